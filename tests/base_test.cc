// Tests for kernels/base.h: dtype parsing and the bf16/fp16 conversions.
#include "kernels/base.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

TEST(DType, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBF16);
  EXPECT_EQ(*ParseDType("float32"), DType::kF32);
  EXPECT_EQ(*ParseDType("F16"), DType::kF16);
  auto bad = ParseDType("int4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int4"), std::string::npos);
}

TEST(DType, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.0e38f, 1.0e-30f}) {
    EXPECT_EQ(Bf16ToF32(F32ToBf16(f)), Bf16ToF32(F32ToBf16(Bf16ToF32(F32ToBf16(f)))));
  }
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even gives 1.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // Slightly above halfway rounds up.
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12))),
            1.0f + std::ldexp(1.0f, -7));
}

TEST(DType, F16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + std::ldexp(1.0f, -11))), 1.0f);  // tie to even
}

}  // namespace
}  // namespace tpserve
