// How far rounding flips alone move each tiny fixture's logits at bf16 precision: the CPU
// reference (tests/bf16_reference_backend.h) with its Linear outputs jittered, as another
// fp32 summation order does, against the same reference without jitter, over the steps
// tests/cuda_model_test.cc compares the GPU on. A GPU that differs from the reference only
// in summation order can pass that test only if this stays inside its tolerance; a
// fixture that amplifies rounding (the first Gemma 4 fixtures: 3.4 and 3.8x the tolerance)
// fails here. CPU test.
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/model_steps.h"

namespace tpserve {
namespace {

constexpr int kDecodeSteps = 7;  // as tests/cuda_model_test.cc
constexpr int kJitterSeeds = 4;

class RoundingEnvelopeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundingEnvelopeTest, JitteredReferenceStaysWithinModelTolerance) {
  const std::string fixture = GetParam();
  const testing::Steps s = testing::GreedySteps(fixture, kDecodeSteps);
  ASSERT_EQ(s.forced.size(), static_cast<size_t>(kDecodeSteps));
  const auto plain = testing::RunOnCpu(fixture, s);
  ASSERT_EQ(plain.size(), s.prompt.size() + s.forced.size());
  float envelope = 0;
  double ratio = 0;  // of the model tolerance; <= 1 passes
  for (uint64_t seed = 1; seed <= kJitterSeeds; ++seed) {
    const auto jittered = testing::RunOnCpu(fixture, s, seed);
    ASSERT_EQ(jittered.size(), plain.size());
    envelope = std::max(envelope, testing::MaxAbsDiff(jittered, plain));
    for (size_t r = 0; r < plain.size(); ++r) {
      ratio = std::max(ratio, testing::ToleranceRatio(jittered[r], plain[r], testing::kModelAtol, testing::kModelRtol));
    }
  }
  std::printf("%s: jittered reference moves logits by up to %.3f, %.2f of the model tolerance\n", fixture.c_str(),
              envelope, ratio);
  EXPECT_GT(envelope, 0.0f) << "the jitter should flip some rounding of " << fixture;
  EXPECT_LE(ratio, 1.0) << fixture << ": rounding flips alone move logits by up to " << envelope;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RoundingEnvelopeTest,
                         ::testing::Values("gemma4_text", "gemma4_multimodal", "gemma3_text", "llama3", "qwen2",
                                           "qwen3", "llama3_attn_bias", "gemma3_attn_bias"));

}  // namespace
}  // namespace tpserve
