// The output writers of the bench tools: SVG charts (ticks, escaping, structure), JSON and
// Markdown/CSV reports, plot panels of load results, and the progress line.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "bench/llm_bench.h"
#include "loadgen/load_driver.h"
#include "loadgen/load_plots.h"
#include "loadgen/progress.h"
#include "loadgen/svg.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(BenchSvg, NiceTicks) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 97, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(nice_ticks(3, 17, 3), (std::vector<double>{0, 5, 10, 15, 20}));
  std::vector<double> t = nice_ticks(0.013, 0.049, 4);
  ASSERT_GE(t.size(), 3u);
  EXPECT_LE(t.front(), 0.013);
  EXPECT_GE(t.back(), 0.049);
  std::vector<double> same = nice_ticks(5, 5, 5);  // degenerate range widened
  ASSERT_GE(same.size(), 2u);
  EXPECT_LT(same.front(), 5);
  EXPECT_GT(same.back(), 5);
  std::vector<double> neg = nice_ticks(-7, 3, 5);
  EXPECT_EQ(neg.front(), -8);
  EXPECT_EQ(neg.back(), 4);
}

TEST(BenchSvg, LogTicks) {
  EXPECT_EQ(log_ticks(1, 100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
  EXPECT_EQ(log_ticks(4, 64), (std::vector<double>{2, 5, 10, 20, 50, 100}));
  std::vector<double> t = log_ticks(1, 1);
  ASSERT_FALSE(t.empty());
  EXPECT_LE(t.front(), 1);
}

TEST(BenchSvg, EscapesText) {
  EXPECT_EQ(xml_escape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  SvgPanel p;
  p.title = "p99 <TTFT> & \"users\"";
  p.series.push_back({"s<1>", {1, 2}, {3, 4}, true, true, ""});
  const std::string svg = render_svg({p}, {"title & more", 600, 300});
  EXPECT_EQ(svg.find("<TTFT>"), std::string::npos);
  EXPECT_NE(svg.find("p99 &lt;TTFT&gt; &amp; &quot;users&quot;"), std::string::npos);
  EXPECT_NE(svg.find("title &amp; more"), std::string::npos);
  EXPECT_NE(svg.find("s&lt;1&gt;"), std::string::npos);
}

TEST(BenchSvg, Structure) {
  SvgPanel a{"Throughput", "users", "tokens/s", true, true, {}};
  a.series.push_back({"tok/s", {1, 4, 16, 64, 100}, {10, 35, 90, 140, 150}, true, true, ""});
  SvgPanel b{"Latency", "users", "ms", false, true, {}};
  b.series.push_back({"p99", {1, 2, 3}, {5, NAN, 7}, true, true, ""});  // NaN skipped
  b.series.push_back({"scatter", {1, 2}, {1, 2}, false, true, "#123456"});
  const std::string svg = render_svg({a, b}, {"", 760, 320});
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_NE(svg.find("height=\"640.0\""), std::string::npos);  // two panels
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_EQ(count(svg, "<g class=\"panel\">"), 2u);
  EXPECT_EQ(count(svg, "<polyline"), 2u);  // scatter series has none
  EXPECT_EQ(count(svg, "<circle"), 5u + 2u + 2u);
  EXPECT_NE(svg.find("fill=\"#123456\""), std::string::npos);
  // The first polyline has exactly 5 points.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("<polyline[^>]*points=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), ","), 5u);
  // Balanced tags: every <g opens a </g>.
  EXPECT_EQ(count(svg, "<g "), count(svg, "</g>"));
  // Log axis shows the 1-2-5 ticks.
  EXPECT_NE(svg.find(">50</text>"), std::string::npos);
}

TEST(BenchSvg, EmptyPanel) {
  SvgPanel p{"nothing", "x", "y", false, true, {}};
  const std::string svg = render_svg({p});
  EXPECT_NE(svg.find("no data"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 0u);
}

TEST(BenchSvg, WritesFiles) {
  const std::string path = ::testing::TempDir() + "/bench_svg_test.svg";
  ASSERT_TRUE(write_text_file(path, "<svg/>\n").is_ok());
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "<svg/>");
  std::remove(path.c_str());
  Status bad = write_text_file("/nonexistent-dir/x.svg", "x");
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("/nonexistent-dir/x.svg"), std::string::npos);
}

LoadReport sample_load_report() {
  std::vector<RequestResult> q;
  for (int i = 0; i < 4; ++i) {
    RequestResult r;
    r.index = i;
    r.ok = true;
    r.status = 200;
    r.t_start_s = 0.5 * i;
    r.ttft_ms = 10.0 * (i + 1);
    r.e2e_ms = 100.0 * (i + 1);
    r.n_output_tokens = 8;
    r.usage_reported = true;
    r.itl_ms = {1, 2};
    r.finish_reason = "length";
    q.push_back(r);
  }
  RequestResult e;
  e.index = 4;
  e.status = 429;
  e.error_kind = "http_429";
  e.error = "HTTP 429: slow down";
  q.push_back(e);
  LoadReport r = summarize_requests(q, 2.0);
  r.mode = "closed";
  r.users = 2;
  return r;
}

TEST(BenchJson, LoadReport) {
  const LoadReport r = sample_load_report();
  nlohmann::json j = to_json(r, true);
  // Survives a round trip through text.
  j = nlohmann::json::parse(j.dump());
  EXPECT_EQ(j["mode"], "closed");
  EXPECT_EQ(j["users"], 2);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["errors"], 1);
  EXPECT_EQ(j["errors_by_kind"]["http_429"], 1);
  EXPECT_EQ(j["error_examples"]["http_429"], "HTTP 429: slow down");
  EXPECT_EQ(j["output_tokens"], 32);
  EXPECT_DOUBLE_EQ(j["output_tokens_per_s"].get<double>(), 16.0);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["p50"].get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(j["e2e_ms"]["max"].get<double>(), 400.0);
  EXPECT_EQ(j["itl_ms"]["n"], 8);
  ASSERT_EQ(j["requests"].size(), 5u);
  EXPECT_EQ(j["requests"][4]["status"], 429);
  EXPECT_EQ(j["requests"][0]["finish_reason"], "length");
  EXPECT_FALSE(to_json(r, false).contains("requests"));
  const std::string text = format_text(r);
  EXPECT_NE(text.find("closed loop, 2 users"), std::string::npos) << text;
  EXPECT_NE(text.find("http_429"), std::string::npos) << text;
}

TEST(BenchJson, LoadPlots) {
  const LoadReport r = sample_load_report();
  std::vector<SvgPanel> p = run_panels(r);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].series[0].x.size(), 4u);  // TTFT of completed requests
  // Completions at 0.1, 0.7, 1.3 and 1.9 s, 8 tokens each: 16 in [0, 1), 16 in the partial
  // bin [1, 1.9) (divided by its width 0.9).
  ASSERT_EQ(p[1].series[0].y.size(), 2u);
  EXPECT_DOUBLE_EQ(p[1].series[0].y[0], 16.0);
  EXPECT_NEAR(p[1].series[0].y[1], 16.0 / 0.9, 1e-9);
  EXPECT_NEAR(p[1].series[0].x[1], 1.45, 1e-9);
  LoadReport a = r, b = r;
  a.users = 1;
  b.users = 64;
  std::vector<SvgPanel> s = sweep_panels({a, b});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].log_x);
  EXPECT_EQ(s[0].series[0].x, (std::vector<double>{1, 64}));
  EXPECT_EQ(s[1].series[0].name, "p99 TTFT");
  EXPECT_DOUBLE_EQ(s[1].series[0].y[0], r.ttft_ms.p99);
}

BenchReport sample_bench_report() {
  BenchReport rep;
  rep.model.path = "m.gguf";
  rep.model.desc = "llama 1M Q8_0";
  rep.model.cost.weight_bytes = 3 << 20;
  rep.model.cost.streamed_bytes = 2 << 20;
  rep.model.cost.n_params = 2000000;
  rep.machine.simd = "avx2";
  rep.machine.hw_threads = 2;
  rep.machine.bandwidth.gbps = 20;
  rep.machine.peaks.push_back({2, ComputePeak{100.0, TensorType::Q8_0, 256, 64, 256, 2}});
  BenchResult pp;
  pp.config = {2, 512, 128};
  pp.test = {64, 0, 1, false};
  pp.n_threads = 2;
  pp.n_ubatch = 128;
  pp.prompt_s = {0.5, 0.5};
  pp.gen_s = {0, 0};
  compute_rates(pp);
  pp.prompt_gflops = 40;
  pp.prompt_peak_share = 0.4;
  BenchResult tg = pp;
  tg.test = {0, 32, 1, false};
  tg.prompt_s = {0, 0};
  tg.gen_s = {1.0, 1.0};
  compute_rates(tg);
  tg.gen_gbps = 5;
  tg.gen_bw_share = 0.25;
  BenchResult bt = pp;
  bt.test = {16, 8, 4, true};
  bt.prompt_s = {0.25};
  bt.gen_s = {0.5};
  compute_rates(bt);
  rep.results = {pp, tg, bt};
  return rep;
}

TEST(BenchJson, BenchReportFormats) {
  const BenchReport rep = sample_bench_report();
  const std::string md = format_markdown(rep);
  EXPECT_NE(md.find("| llama 1M Q8_0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| pp64 | 128.00 ± 0.00 | 40.00 GFLOP/s (40% peak) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| tg32 | 32.00 ± 0.00 | 5.00 GB/s (25% bw) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 2 | 512 | 128 | 16 | 8 | 4 | 256.00 ± 0.00 | 64.00 ± 0.00 | 128.00 ± 0.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("memory read bandwidth: 20.00 GB/s"), std::string::npos) << md;

  const std::string csv = format_csv(rep);
  EXPECT_EQ(count(csv, "\n"), 4u);  // header + 3 rows
  const std::string header = csv.substr(0, csv.find('\n'));
  const size_t n_cols = count(header, ",") + 1;
  for (size_t p = csv.find('\n') + 1; p < csv.size();) {
    const size_t e = csv.find('\n', p);
    EXPECT_EQ(count(csv.substr(p, e - p), ",") + 1, n_cols);
    p = e + 1;
  }
  EXPECT_NE(csv.find("\"pp16+tg8 B4\",16,8,4,2,512,128,1,256.0000"), std::string::npos) << csv;

  nlohmann::json j = nlohmann::json::parse(to_json(rep).dump());
  EXPECT_EQ(j["model"]["desc"], "llama 1M Q8_0");
  EXPECT_DOUBLE_EQ(j["machine"]["mem_read_bw"]["gbps"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["machine"]["matmul_peak"][0]["gflops"].get<double>(), 100.0);
  ASSERT_EQ(j["results"].size(), 3u);
  EXPECT_EQ(j["results"][0]["test"], "pp64");
  EXPECT_DOUBLE_EQ(j["results"][0]["prompt_tps"]["mean"].get<double>(), 128.0);
  EXPECT_EQ(j["results"][2]["n_seq"], 4);
  EXPECT_TRUE(j["results"][2]["batched"].get<bool>());
  EXPECT_DOUBLE_EQ(j["results"][1]["gen_bw_share"].get<double>(), 0.25);
}

TEST(BenchProgress, RendersLine) {
  Progress p;
  p.elapsed_s = 5;
  p.fraction = 0.5;
  p.completed = 10;
  p.errors = 1;
  p.in_flight = 3;
  p.output_tokens = 100;
  const std::string s = render_progress(p, 10, "users 4");
  EXPECT_EQ(s.rfind("users 4 [#####     ]", 0), 0u) << s;
  EXPECT_NE(s.find(" 50%"), std::string::npos) << s;
  EXPECT_NE(s.find("done 10  err 1  in flight 3  20.0 tok/s"), std::string::npos) << s;
  p.fraction = 7;  // clamped
  EXPECT_NE(render_progress(p, 4).find("[####]"), std::string::npos);
  // Not a terminal: nothing is drawn.
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressBar bar(true, f);
  EXPECT_FALSE(bar.enabled());
  bar.update(p);
  bar.finish();
  EXPECT_EQ(std::ftell(f), 0);
  std::fclose(f);
}

}  // namespace
}  // namespace ubatch::bench
