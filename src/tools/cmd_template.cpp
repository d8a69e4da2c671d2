// `ubatch template`: the chat-template engine (src/template/) from the command line.
//
//   ubatch template render TEMPLATE [INPUT] [--segments]
//     Renders a Jinja chat template with the conversation in INPUT (a JSON file, "-" or
//     absent: standard input): {"messages": [...], "tools": [...] (optional),
//     "add_generation_prompt": bool, "continue_final_message": bool, "bos_token": "...",
//     "eos_token": "...", "extra_vars": {...}, "date": "YYYY-MM-DD" (strftime_now; default
//     today)}. Prints the prompt; with --segments, one JSON line per segment
//     {"special": bool, "text": "..."} (special: template literal text, which the tokenizer
//     may turn into special tokens; docs/CHAT.md).
//   ubatch template bench [--corpus DIR] [--iterations N]
//     Renders every template × conversation of the reference corpus (DIR defaults to
//     $UBATCH_SHARED_DIR/reference/templates, else ../shared/… beside the source tree) N times
//     each and prints the per-render time distribution (p50/p90/p99/max, microseconds; wall
//     time and the thread's CPU time, which other processes' load does not inflate), per
//     template and overall, the fuel of the heaviest render, and each template's parse time.
// Exit status 0; 1 on a template or input error (the error on stderr); 2 on a usage error.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <cstdio>
#include <functional>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "template/chat_template_renderer.h"
#include "template/strftime.h"
#include "tools/command.h"

namespace ubatch::tools {
namespace {

using nlohmann::ordered_json;

struct TemplateOptions {
  std::string template_path;
  std::string input_path;
  bool segments = false;
  std::string corpus;
  int iterations = 20;
};

bool read_file(const std::string& path, std::string& out) {
  if (path.empty() || path == "-") {
    out.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return true;
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  out = ss.str();
  return true;
}

bool parse_date(const std::string& s, std::tm& out) {
  int y, m, d;
  if (std::sscanf(s.c_str(), "%d-%d-%d", &y, &m, &d) != 3 || m < 1 || m > 12 || d < 1 || d > 31) return false;
  out = jinja::make_date(y, m, d);
  return true;
}

int run_render(const TemplateOptions& o) {
  std::string source, input_text;
  if (!read_file(o.template_path, source)) {
    std::fprintf(stderr, "ubatch template: cannot read %s\n", o.template_path.c_str());
    return 1;
  }
  if (!read_file(o.input_path, input_text)) {
    std::fprintf(stderr, "ubatch template: cannot read %s\n", o.input_path.c_str());
    return 1;
  }
  ordered_json input = ordered_json::parse(input_text, nullptr, false);
  if (input.is_discarded() || !input.is_object()) {
    std::fprintf(stderr, "ubatch template: the input is not a JSON object\n");
    return 1;
  }
  jinja::ChatTemplateInputs in;
  in.messages = input.value("messages", ordered_json::array());
  if (input.contains("tools") && !input["tools"].is_null()) in.tools = input["tools"];
  in.add_generation_prompt = input.value("add_generation_prompt", false);
  in.continue_final_message = input.value("continue_final_message", false);
  in.bos_token = input.value("bos_token", "");
  in.eos_token = input.value("eos_token", "");
  if (input.contains("extra_vars")) in.extra_vars = input["extra_vars"];
  if (input.contains("date")) {
    std::tm date{};
    if (!input["date"].is_string() || !parse_date(input["date"].get<std::string>(), date)) {
      std::fprintf(stderr, "ubatch template: \"date\" must be \"YYYY-MM-DD\"\n");
      return 1;
    }
    in.now = date;
  }
  auto out = jinja::render_chat_template(source, in);
  if (!out) {
    std::fprintf(stderr, "ubatch template: %s error: %s\n", jinja::error_kind_name(out.error().kind),
                 out.error().describe().c_str());
    return 1;
  }
  if (!o.segments) {
    std::fwrite(out->text.data(), 1, out->text.size(), stdout);
  } else {
    size_t begin = 0;
    for (const auto& seg : out->segments) {
      const ordered_json line = {{"special", seg.parse_special}, {"text", out->text.substr(begin, seg.end - begin)}};
      std::printf("%s\n", line.dump().c_str());
      begin = seg.end;
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

// CPU time of the calling thread, in microseconds (unaffected by other processes' load).
double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

int run_bench(const TemplateOptions& o) {
  const std::string dir = o.corpus + "/";
  std::string cases_text, expected_text;
  if (!read_file(dir + "cases.json", cases_text) || !read_file(dir + "expected.json", expected_text)) {
    std::fprintf(stderr, "ubatch template bench: no cases.json/expected.json in %s\n", o.corpus.c_str());
    return 1;
  }
  const ordered_json cases = ordered_json::parse(cases_text);
  const ordered_json expected = ordered_json::parse(expected_text);
  std::tm date{};
  parse_date(cases["fixed_date"].get<std::string>(), date);
  using clock = std::chrono::steady_clock;
  std::vector<double> all_wall, all_cpu, parse_cpu;
  size_t n_errors = 0, n_pairs = 0;
  double slowest_cpu = 0;
  std::string slowest;
  std::printf("%-44s %9s %8s %8s %8s %8s %9s\n", "template", "parse_us", "p50_us", "p99_us", "max_us", "cpu_max", "fuel_max");
  for (const auto& [template_id, results] : expected.items()) {
    const ordered_json& meta = cases["templates"][template_id];
    std::string source;
    if (!read_file(dir + meta["file"].get<std::string>(), source)) continue;
    const double p0 = thread_cpu_us();
    auto renderer = jinja::ChatTemplateRenderer::create(source);
    const double parse_us = thread_cpu_us() - p0;
    parse_cpu.push_back(parse_us);
    if (!renderer) {
      std::fprintf(stderr, "%s: %s\n", template_id.c_str(), renderer.error().describe().c_str());
      return 1;
    }
    std::vector<double> wall, cpu;
    uint64_t fuel_max = 0;
    for (const auto& c : cases["cases"]) {
      const std::string case_id = c["id"].get<std::string>();
      if (!results.contains(case_id)) continue;
      ++n_pairs;
      jinja::ChatTemplateInputs in;
      in.messages = c["messages"];
      if (!c["tools"].is_null()) in.tools = c["tools"];
      in.add_generation_prompt = c.value("add_generation_prompt", false);
      in.continue_final_message = c.value("continue_final_message", false);
      in.bos_token = meta.value("bos_token", "");
      in.eos_token = meta.value("eos_token", "");
      if (meta.contains("extra_vars"))
        for (const auto& [k, v] : meta["extra_vars"].items()) in.extra_vars[k] = v;
      if (c.contains("extra_vars"))
        for (const auto& [k, v] : c["extra_vars"].items()) in.extra_vars[k] = v;
      in.now = date;
      std::vector<double> pair_cpu;
      for (int i = 0; i < o.iterations; ++i) {
        jinja::RenderStats stats;
        const double c0 = thread_cpu_us();
        const auto r0 = clock::now();
        auto out = renderer->render(in, {}, &stats);
        const double t = std::chrono::duration<double, std::micro>(clock::now() - r0).count();
        const double ct = thread_cpu_us() - c0;
        wall.push_back(t);
        cpu.push_back(ct);
        pair_cpu.push_back(ct);
        all_wall.push_back(t);
        all_cpu.push_back(ct);
        fuel_max = std::max(fuel_max, stats.fuel_used);
        if (i == 0 && !out) ++n_errors;
      }
      const double p50 = bench::percentile(pair_cpu, 50);
      if (p50 > slowest_cpu) {
        slowest_cpu = p50;
        slowest = template_id + " / " + case_id;
      }
    }
    std::printf("%-44s %9.1f %8.1f %8.1f %8.1f %8.1f %9llu\n", template_id.c_str(), parse_us, bench::percentile(wall, 50),
                bench::percentile(wall, 99), *std::max_element(wall.begin(), wall.end()),
                *std::max_element(cpu.begin(), cpu.end()), static_cast<unsigned long long>(fuel_max));
  }
  std::printf("\nall: %zu renders (%zu template x conversation pairs x %d; %zu pairs end in a template error)\n",
              all_wall.size(), n_pairs, o.iterations, n_errors);
  std::printf("per render, wall: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n", bench::percentile(all_wall, 50),
              bench::percentile(all_wall, 90), bench::percentile(all_wall, 99),
              *std::max_element(all_wall.begin(), all_wall.end()));
  std::printf("per render, thread CPU: p50 %.1f us, p90 %.1f us, p99 %.1f us, max %.1f us\n",
              bench::percentile(all_cpu, 50), bench::percentile(all_cpu, 90), bench::percentile(all_cpu, 99),
              *std::max_element(all_cpu.begin(), all_cpu.end()));
  std::printf("slowest pair (CPU p50): %s, %.1f us; parse (CPU): p50 %.1f us, max %.1f us\n", slowest.c_str(),
              slowest_cpu, bench::percentile(parse_cpu, 50), *std::max_element(parse_cpu.begin(), parse_cpu.end()));
  return 0;
}

std::function<int()> setup(CLI::App& sub) {
  auto o = std::make_shared<TemplateOptions>();
  sub.require_subcommand(1);
  CLI::App* render = sub.add_subcommand("render", "Render a chat template with a conversation");
  render->add_option("template", o->template_path, "Jinja template file")->required();
  render->add_option("input", o->input_path,
                     "Conversation JSON file (messages, tools, add_generation_prompt, bos_token, eos_token, "
                     "extra_vars, date); default stdin");
  render->add_flag("--segments", o->segments, "Print one JSON line per segment with its special/plain mark");
  CLI::App* bench = sub.add_subcommand("bench", "Time every render of the reference corpus");
  const char* shared = std::getenv("UBATCH_SHARED_DIR");
  o->corpus = (shared ? std::string(shared) : std::string(UBATCH_MODELS_DIR) + "/../../shared") + "/reference/templates";
  bench->add_option("--corpus", o->corpus, "Folder with cases.json, expected.json, *.jinja")->capture_default_str();
  bench->add_option("-n,--iterations", o->iterations, "Renders per template x conversation")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  return [o, render] { return render->parsed() ? run_render(*o) : run_bench(*o); };
}

UBATCH_REGISTER_COMMAND("template", "Render a Jinja chat template (render) or time the template corpus (bench)", setup);

}  // namespace
}  // namespace ubatch::tools
