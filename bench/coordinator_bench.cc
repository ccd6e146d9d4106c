// Rank 0's host-side text costs, measured, never asserted (the tests check behaviour, not
// speed): tokenizing 1 MB with each fixture family's tokenizer.json, in CPU time of the
// calling thread, as the machines these run on are shared. Moved out of tokenizer_test,
// whose clock could fail or slow the suite on a loaded machine. (The sampler, which runs
// on the workers, is timed by sampling_bench.)
//
//   build/bench/coordinator_bench [--fixtures tests/fixtures]
#include <time.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/cpu_time.h"
#include "coordinator/text/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, fixtures, TPSERVE_FIXTURES, "tests/fixtures (tokenizers/<family>/tokenizer.json, reference.json)");

namespace tpserve {
namespace {

using bench::ThreadCpuSeconds;

void BenchTokenizers(const std::string& fixtures) {
  std::printf("encode 1 MB (fixture samples repeated), CPU time\n");
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

}  // namespace
}  // namespace tpserve

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  tpserve::BenchTokenizers(absl::GetFlag(FLAGS_fixtures));
  return 0;
}
