// Argument handling of `ubatch bench` and `ubatch load`: list and range parsing, test and
// configuration expansion, load configuration checks, and the binary's answers to bad input.
#include <gtest/gtest.h>

#include <filesystem>

#include "bench/args.h"
#include "bench/llm_bench.h"
#include "loadgen/load_driver.h"
#include "support.h"

namespace ubatch::bench {

using namespace ::ubatch::loadgen;
namespace {

TEST(BenchArgs, IntLists) {
  auto a = parse_int_list("1,2,4", "-B", 1, 64);
  ASSERT_TRUE(a) << a.message();
  EXPECT_EQ(a.value(), (std::vector<int64_t>{1, 2, 4}));
  auto b = parse_int_list(" 8 , 16,32 ", "-B", 1, 64);
  ASSERT_TRUE(b) << b.message();
  EXPECT_EQ(b.value(), (std::vector<int64_t>{8, 16, 32}));
  auto c = parse_int_list("+3", "-t", 1, 8);
  ASSERT_TRUE(c);
  EXPECT_EQ(c.value(), std::vector<int64_t>{3});
}

TEST(BenchArgs, BadIntLists) {
  struct Case {
    const char* text;
    const char* expect;  // part of the message
  } cases[] = {
      {"", "empty list"},        {"  ", "empty list"},       {"1,,2", "empty item"},   {"1,2,", "empty item"},
      {",1", "empty item"},      {"x", "'x' is not an integer"}, {"1.5", "'1.5' is not an integer"},
      {"2-4", "'2-4' is not an integer"}, {"1 2", "'1 2' is not an integer"}, {"0", "outside [1, 64]"},
      {"65", "outside [1, 64]"}, {"-1", "outside [1, 64]"},  {"99999999999999999999", "not an integer"},
  };
  for (const Case& c : cases) {
    auto r = parse_int_list(c.text, "--threads", 1, 64);
    ASSERT_FALSE(r) << "'" << c.text << "' was accepted";
    EXPECT_NE(r.message().find(c.expect), std::string::npos) << r.message();
    EXPECT_NE(r.message().find("--threads"), std::string::npos) << r.message();
  }
}

TEST(BenchArgs, Ranges) {
  auto a = parse_range("32:256", "--prompt-tokens", 1, 1000);
  ASSERT_TRUE(a) << a.message();
  EXPECT_EQ(a->min, 32);
  EXPECT_EQ(a->max, 256);
  auto b = parse_range("64", "--max-tokens", 1, 1000);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->min, 64);
  EXPECT_EQ(b->max, 64);
  auto c = parse_range(" 5 : 5 ", "--max-tokens", 1, 1000);
  ASSERT_TRUE(c) << c.message();
  EXPECT_EQ(c->min, 5);
  for (const char* bad : {"", ":5", "5:", "a:5", "5:b", "10:5", "0:5", "1:1001", "1:2:3", "-3:4"}) {
    auto r = parse_range(bad, "--max-tokens", 1, 1000);
    EXPECT_FALSE(r) << "'" << bad << "' was accepted";
    if (!r) {
      EXPECT_NE(r.message().find("--max-tokens"), std::string::npos);
    }
  }
}

TEST(BenchArgs, ConfigCombinations) {
  std::vector<BenchConfig> c = expand_configs({1, 2}, {512, 2048}, {64, 128, 256});
  ASSERT_EQ(c.size(), 12u);
  EXPECT_EQ(c[0].n_threads, 1);
  EXPECT_EQ(c[0].n_batch, 512);
  EXPECT_EQ(c[0].n_ubatch, 64);
  EXPECT_EQ(c[2].n_ubatch, 256);
  EXPECT_EQ(c[3].n_batch, 2048);
  EXPECT_EQ(c[6].n_threads, 2);
  EXPECT_EQ(c[11].n_threads, 2);
  EXPECT_EQ(c[11].n_batch, 2048);
  EXPECT_EQ(c[11].n_ubatch, 256);
}

TEST(BenchArgs, TestsAndNames) {
  std::vector<BenchTest> t = make_tests({512, 0}, {128}, {128}, {32, 0}, {1, 8});
  ASSERT_EQ(t.size(), 6u);  // pp512, tg128, (128,32)x{1,8}, (128,0)x{1,8}
  EXPECT_EQ(t[0].name(), "pp512");
  EXPECT_EQ(t[1].name(), "tg128");
  EXPECT_EQ(t[2].name(), "pp128+tg32 B1");
  EXPECT_EQ(t[3].name(), "pp128+tg32 B8");
  EXPECT_EQ(t[3].n_seq, 8);
  EXPECT_TRUE(t[3].batched);
  EXPECT_EQ(t[5].name(), "pp128 B8");
  EXPECT_TRUE(make_tests({0}, {0}, {128}, {128}, {}).empty());
  // KV room: 8 sequences × round_up(160, 16) + one block.
  EXPECT_EQ(kv_cells_needed(t, 16), 8 * 160 + 16);
  EXPECT_EQ(kv_cells_needed({BenchTest{500, 0, 1, false}}, 16), 512 + 16);
}

TEST(BenchArgs, LoadConfigChecks) {
  LoadConfig c;
  c.duration_s = 1;
  EXPECT_TRUE(validate(c).is_ok()) << validate(c).message();
  LoadConfig d = c;
  d.duration_s = 0;
  EXPECT_FALSE(validate(d));  // neither duration nor count
  d.n_requests = 5;
  EXPECT_TRUE(validate(d).is_ok());
  LoadConfig e = c;
  e.users = 0;
  EXPECT_FALSE(validate(e));
  e.rate = 2;  // open loop ignores users
  EXPECT_TRUE(validate(e).is_ok());
  e.rate = -1;
  EXPECT_FALSE(validate(e));
  for (const char* url : {"127.0.0.1:8080", "ftp://x", "http://", "http://host:port", "http://a b", "http://h/path"}) {
    LoadConfig u = c;
    u.endpoint.url = url;
    EXPECT_FALSE(validate(u)) << url;
  }
  for (const char* url : {"http://127.0.0.1:8080", "https://api.example.com", "http://localhost/", "http://[::1]:80"}) {
    LoadConfig u = c;
    u.endpoint.url = url;
    EXPECT_TRUE(validate(u).is_ok()) << url;
  }
  LoadConfig p = c;
  p.endpoint.endpoint = "v1/completions";
  EXPECT_FALSE(validate(p));
  EXPECT_TRUE(c.endpoint.is_chat() == false);
  p.endpoint.endpoint = "/v1/chat/completions";
  EXPECT_TRUE(p.endpoint.is_chat());
}

// The binary's answers to bad arguments (no model or server needed: they fail first).
class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::ubatch_binary())) GTEST_SKIP() << "binary not built: " << test::ubatch_binary();
  }
  std::string run(const std::string& args, int* status) {
    return test::run_command(test::ubatch_command() + " " + args + " 2>&1", status);
  }
};

TEST_F(BenchCli, BenchRejectsBadLists) {
  int status = 0;
  std::string out = run("bench -m /nonexistent.gguf -t 1,,2", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--threads: empty item"), std::string::npos) << out;
  out = run("bench -m /nonexistent.gguf -B 1,x", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("'x' is not an integer"), std::string::npos) << out;
  out = run("bench -m /nonexistent.gguf -u 0", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--n-ubatch"), std::string::npos) << out;
  out = run("bench -m /nonexistent.gguf -o xml", &status);
  EXPECT_NE(status, 0);
  out = run("bench -m /nonexistent.gguf -p 0 -n 0", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("no tests"), std::string::npos) << out;
  out = run("bench -m /nonexistent.gguf -p 8 -n 0 --no-roofline", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("/nonexistent.gguf"), std::string::npos) << out;
}

TEST_F(BenchCli, LoadRejectsBadArguments) {
  int status = 0;
  std::string out = run("load --url 127.0.0.1:1 --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--url"), std::string::npos) << out;
  out = run("load --prompt-tokens 9:3 --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("MIN 9 is above MAX 3"), std::string::npos) << out;
  out = run("load --max-tokens 0:4 --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  out = run("load --sweep 1,,4 --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--sweep: empty item"), std::string::npos) << out;
  out = run("load --sweep 1,4 --rate 3 --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  out = run("load --prompts /nonexistent.jsonl --requests 1 -q", &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("/nonexistent.jsonl: cannot open"), std::string::npos) << out;
  // Nothing listens on port 1: every request fails to connect; exit status 2, error kind shown.
  out = run("load --url http://127.0.0.1:1 --requests 2 -q", &status);
  EXPECT_EQ(status, 2) << out;
  EXPECT_NE(out.find("connect"), std::string::npos) << out;
}

}  // namespace
}  // namespace ubatch::bench
