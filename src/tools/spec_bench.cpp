#include "tools/spec_bench.h"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>
#include <sstream>

#include "bench/stats.h"
#include "tools/generate.h"

namespace ubatch::tools {

std::string SpecSetting::name() const {
  return k <= 0 ? "off" : fmt::format("n{} k{}{}", ngram, k, always ? " always" : "");
}

Result<std::vector<SpecSetting>> parse_spec_settings(const std::string& text) {
  std::vector<SpecSetting> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    SpecSetting s;
    const std::string given = item;
    if (!item.empty() && item.back() == 'a') {
      s.always = true;
      item.pop_back();
    }
    try {
      size_t used = 0;
      const size_t colon = item.find(':');
      if (colon != std::string::npos) {
        s.ngram = std::stoi(item.substr(0, colon), &used);
        if (used != colon) throw std::invalid_argument(item);
        const std::string k = item.substr(colon + 1);
        s.k = std::stoi(k, &used);
        if (used != k.size()) throw std::invalid_argument(item);
      } else {
        s.k = std::stoi(item, &used);
        if (used != item.size()) throw std::invalid_argument(item);
      }
    } catch (...) {
      return Status::error(fmt::format("--spec: bad item '{}' (want K, N:K, Ka or N:Ka)", given));
    }
    if (s.k < 0 || s.k > 64 || s.ngram < 1 || s.ngram > 16)
      return Status::error(fmt::format("--spec: '{}' is out of range (K in 0..64, N in 1..16)", given));
    out.push_back(s);
  }
  if (out.empty()) return Status::error("--spec: no settings");
  return out;
}

Result<std::vector<SpecBenchRow>> run_spec_bench(Context& ctx, const Tokenizer& tok, const SpecBenchOptions& o) {
  struct Prompt {
    std::string name;
    std::vector<int32_t> tokens;
  };
  std::vector<Prompt> prompts;
  for (const std::string& path : o.prompt_files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::error(fmt::format("--spec-prompts: cannot read {}", path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Prompt p{std::filesystem::path(path).filename().string(), tok.tokenize(text, tok.add_bos_default(), false)};
    if (p.tokens.empty()) return Status::error(fmt::format("--spec-prompts: {} is empty", path));
    if (static_cast<int64_t>(p.tokens.size()) + o.n_gen > ctx.kv().n_cells())
      return Status::error(fmt::format("--spec-prompts: {} ({} tokens) + {} generated exceeds the KV cache ({} tokens)",
                                       path, p.tokens.size(), o.n_gen, ctx.kv().n_cells()));
    prompts.push_back(std::move(p));
  }
  const size_t n_set = o.settings.size();
  std::vector<SpecBenchRow> rows;
  for (const Prompt& p : prompts)
    for (const SpecSetting& s : o.settings) {
      SpecBenchRow r;
      r.prompt = p.name;
      r.setting = s;
      r.n_prompt = static_cast<int32_t>(p.tokens.size());
      rows.push_back(r);
    }
  std::vector<uint64_t> drafts(rows.size(), 0), accepted(rows.size(), 0), gen(rows.size(), 0), seq_steps(rows.size(), 0);
  size_t off = n_set;  // index of the "off" setting, if any
  for (size_t j = 0; j < n_set; ++j)
    if (o.settings[j].k == 0 && off == n_set) off = j;
  for (int rep = 0; rep < o.reps; ++rep) {
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      std::vector<double> rate(n_set, 0.0);
      std::vector<std::vector<int32_t>> outputs(n_set);
      for (size_t jj = 0; jj < n_set; ++jj) {
        const size_t j = rep % 2 == 0 ? jj : n_set - 1 - jj;  // alternate the order between rounds
        SpecBenchRow& row = rows[pi * n_set + j];
        fmt::print(stderr, "bench: spec round {}/{}: {} ({})\n", rep + 1, o.reps, row.prompt, row.setting.name());
        sched::EngineConfig cfg;
        cfg.n_parallel = 1;
        cfg.n_batch = ctx.params().n_batch;
        cfg.spec_ngram = row.setting.ngram;
        cfg.spec_k = row.setting.k;
        cfg.spec_always = row.setting.always;
        sched::Request req;
        req.prompt = prompts[pi].tokens;
        req.sampling = o.sampling;
        req.max_tokens = o.n_gen;
        double first_ms = -1, last_ms = 0;
        ctx.kv().clear();
        Generated g = generate(ctx, tok, cfg, std::move(req), [&](const sched::Event& e, double ms) {
          if (e.kind != sched::Event::Kind::Token || e.token < 0) return;
          if (first_ms < 0) first_ms = ms;
          last_ms = ms;
          outputs[j].push_back(e.token);
        });
        if (!g.error.empty()) return Status::error(fmt::format("bench: {}: {}", row.prompt, g.error));
        const auto n = static_cast<int32_t>(outputs[j].size());
        row.n_gen = n;
        rate[j] = n > 1 && last_ms > first_ms ? 1000.0 * (n - 1) / (last_ms - first_ms) : 0.0;
        row.gen_tps.push_back(rate[j]);
        const size_t ri = pi * n_set + j;
        drafts[ri] += g.metrics.draft_tokens;
        accepted[ri] += g.metrics.draft_accepted;
        gen[ri] += g.metrics.generated_tokens;
        seq_steps[ri] += g.metrics.sample_seq_steps;
      }
      for (size_t j = 0; j < n_set; ++j) {
        SpecBenchRow& row = rows[pi * n_set + j];
        if (outputs[j] != outputs[0]) row.same_output = false;
        if (off < n_set && rate[off] > 0) row.speedup.push_back(rate[j] / rate[off]);
      }
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].acceptance = drafts[i] ? double(accepted[i]) / double(drafts[i]) : 0.0;
    rows[i].tokens_per_step = seq_steps[i] ? double(gen[i]) / double(seq_steps[i]) : 0.0;
  }
  return rows;
}

namespace {
std::string min_med_max(const std::vector<double>& v, const char* fmt_one) {
  if (v.empty()) return "-";
  const bench::Summary s = bench::summarize(v);
  return fmt::format(fmt::runtime(fmt::format("{} / {} / {}", fmt_one, fmt_one, fmt_one)), s.min, s.p50, s.max);
}
}  // namespace

std::string format_spec_markdown(const std::vector<SpecBenchRow>& rows) {
  std::string out =
      "| prompt | spec | prompt tokens | generated | gen t/s min / median / max | speedup min / median / max | "
      "acceptance | tokens/step | same output |\n"
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const SpecBenchRow& r : rows)
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.2f} | {} |\n", r.prompt, r.setting.name(), r.n_prompt,
                       r.n_gen, min_med_max(r.gen_tps, "{:.1f}"), min_med_max(r.speedup, "{:.2f}"),
                       r.setting.k > 0 ? fmt::format("{:.1f}%", 100.0 * r.acceptance) : "-", r.tokens_per_step,
                       r.same_output ? "yes" : "NO");
  return out;
}

std::string format_spec_csv(const std::vector<SpecBenchRow>& rows) {
  std::string out =
      "prompt,spec_ngram,spec_k,n_prompt,n_gen,reps,gen_tps_min,gen_tps_median,gen_tps_max,speedup_min,speedup_median,"
      "speedup_max,acceptance,tokens_per_step,same_output\n";
  for (const SpecBenchRow& r : rows) {
    const bench::Summary t = bench::summarize(r.gen_tps), s = bench::summarize(r.speedup);
    out += fmt::format("\"{}\",{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{}\n", r.prompt,
                       r.setting.ngram, r.setting.k, r.n_prompt, r.n_gen, r.gen_tps.size(), t.min, t.p50, t.max, s.min,
                       s.p50, s.max, r.acceptance, r.tokens_per_step, r.same_output ? 1 : 0);
  }
  return out;
}

nlohmann::json spec_json(const std::vector<SpecBenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const SpecBenchRow& r : rows)
    out.push_back({{"prompt", r.prompt},
                   {"spec_ngram", r.setting.ngram},
                   {"spec_k", r.setting.k},
                   {"n_prompt", r.n_prompt},
                   {"n_gen", r.n_gen},
                   {"gen_tps", r.gen_tps},
                   {"speedup", r.speedup},
                   {"acceptance", r.acceptance},
                   {"tokens_per_step", r.tokens_per_step},
                   {"same_output", r.same_output}});
  return out;
}

}  // namespace ubatch::tools
