// Rank 0's host-side costs, measured, never asserted (the tests check behaviour, not speed):
// (a) tokenizing 1 MB with each fixture family's tokenizer.json, (b) the CPU sampler per
// logit row at Gemma's vocabulary (262144) for each sampling mode. CPU time of the calling
// thread, as the machines these run on are shared. Moved out of tokenizer_test and
// sampler_test, whose clocks could fail or slow the suite on a loaded machine.
//
//   build/bench/coordinator_bench [--fixtures tests/fixtures] [--runs 50]
#include <time.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/types/span.h"
#include "coordinator/sampler.h"
#include "coordinator/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, fixtures, TPSERVE_FIXTURES, "tests/fixtures (tokenizers/<family>/tokenizer.json, reference.json)");
ABSL_FLAG(int, runs, 50, "(b): rows sampled per mode");

namespace tpserve {
namespace {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void BenchTokenizers(const std::string& fixtures) {
  std::printf("(a) encode 1 MB (fixture samples repeated), CPU time\n");
  for (const char* family : {"gemma", "llama2", "mistral", "llama3", "qwen2", "gpt2"}) {
    const std::string dir = fixtures + "/tokenizers/" + family;
    auto tokenizer = Tokenizer::FromFile(dir + "/tokenizer.json");
    std::ifstream in(dir + "/reference.json");
    if (!tokenizer.ok() || !in) {
      std::printf("  %-8s cannot load %s: %s\n", family, dir.c_str(),
                  tokenizer.ok() ? "no reference.json" : std::string(tokenizer.status().message()).c_str());
      continue;
    }
    const nlohmann::json reference = nlohmann::json::parse(in);
    std::string text;
    while (text.size() < (1 << 20)) {
      for (const auto& sample : reference["samples"]) text += sample["text"].get<std::string>() + " ";
    }
    const double start = ThreadCpuSeconds();
    const std::vector<int32_t> ids = (*tokenizer)->Encode(text, false);
    const double s = ThreadCpuSeconds() - start;
    std::printf("  %-8s %8zu bytes -> %7zu tokens  %7.3f s  %6.1f MB/s\n", family, text.size(), ids.size(), s,
                text.size() / 1e6 / s);
  }
}

void BenchSampler(int runs) {
  constexpr int64_t kVocab = 262144;
  std::printf("(b) CPU sampler, vocab %lld, %d rows per mode, CPU time per row\n", static_cast<long long>(kVocab), runs);
  std::mt19937_64 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(gen);
  std::vector<int32_t> prompt(8192);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919) % kVocab);
  const std::vector<int32_t> output(256, 17);
  Sampler sampler(kVocab, {});
  auto time = [&](const char* name, const SamplingParams& p, bool with_history) {
    const double start = ThreadCpuSeconds();
    for (int i = 0; i < runs; ++i) {
      auto r = sampler.Sample(logits, p, with_history ? absl::MakeConstSpan(prompt) : absl::Span<const int32_t>(),
                              with_history ? absl::MakeConstSpan(output) : absl::Span<const int32_t>(),
                              SamplingRng(i));
      if (!r.ok()) {
        std::printf("  %-42s error: %s\n", name, std::string(r.status().message()).c_str());
        return;
      }
    }
    std::printf("  %-42s %8.1f us/row\n", name, (ThreadCpuSeconds() - start) * 1e6 / runs);
  };
  SamplingParams p;
  p.temperature = 0;
  time("greedy", p, false);
  p.logprobs = 5;
  time("greedy + logprobs 5", p, false);
  p.logprobs.reset();
  p.temperature = 1;
  time("T=1", p, false);
  p.temperature = 0.7f;
  p.top_k = 50;
  time("T=0.7 top_k=50", p, false);
  p.top_k = 0;
  p.top_p = 0.9f;
  time("T=0.7 top_p=0.9", p, false);
  p.top_k = 50;
  p.min_p = 0.05f;
  time("T=0.7 top_k=50 top_p=0.9 min_p=0.05", p, false);
  p.top_k = 0;
  p.top_p = 0.999f;
  p.temperature = 5;
  time("T=5 top_p=0.999 (flat: many candidates)", p, false);
  p.top_k = 10000;
  p.top_p = 1;
  time("T=5 top_k=10000", p, false);
  p = SamplingParams();
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.1f;
  time("T=1 penalties, 8192 prompt + 256 output", p, true);
}

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  tpserve::BenchTokenizers(absl::GetFlag(FLAGS_fixtures));
  tpserve::BenchSampler(absl::GetFlag(FLAGS_runs));
  return 0;
}
