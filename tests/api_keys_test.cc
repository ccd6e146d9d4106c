// ApiKeys and ConstantTimeEquals (coordinator/api/api_keys.h): which Authorization values pass,
// what the refusals say, and that the comparison agrees with == on every length and position of
// a difference. Its timing is not measured here (a 2-core CI machine shared with builds would
// make any timing test flaky); the loop's shape is what keeps it constant.
#include "coordinator/api/api_keys.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(ConstantTimeEqualsTest, AgreesWithEqualityOnEveryLengthAndPosition) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  EXPECT_FALSE(ConstantTimeEquals("a", ""));
  const std::string key = "sk-0123456789abcdef";
  EXPECT_TRUE(ConstantTimeEquals(key, key));
  EXPECT_TRUE(ConstantTimeEquals(key, std::string(key)));
  for (size_t i = 0; i < key.size(); ++i) {
    std::string other = key;
    other[i] ^= 0x01;
    EXPECT_FALSE(ConstantTimeEquals(key, other)) << "differs at " << i;
    EXPECT_FALSE(ConstantTimeEquals(other, key)) << "differs at " << i;
  }
  for (size_t n = 0; n < key.size(); ++n) {
    EXPECT_FALSE(ConstantTimeEquals(key, key.substr(0, n))) << "prefix of " << n;
    EXPECT_FALSE(ConstantTimeEquals(key.substr(0, n), key)) << "prefix of " << n;
  }
  // A longer string whose extra bytes are zeros is still longer.
  EXPECT_FALSE(ConstantTimeEquals(key, key + std::string(1, '\0')));
  EXPECT_FALSE(ConstantTimeEquals(std::string(3, '\0'), std::string(2, '\0')));
  // Bytes above 0x7f.
  EXPECT_TRUE(ConstantTimeEquals("\xff\x80", "\xff\x80"));
  EXPECT_FALSE(ConstantTimeEquals("\xff\x80", "\xff\x81"));
}

TEST(ApiKeysTest, NoKeysLetEverythingThrough) {
  const ApiKeys none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Check("").ok());
  EXPECT_TRUE(none.Check("Bearer anything").ok());
  EXPECT_FALSE(ApiKeys({"", ""}).enabled());  // empty keys are dropped
}

TEST(ApiKeysTest, AnyOfTheKeysAsABearerToken) {
  const ApiKeys keys({"alpha-key", "", "beta-key"});
  EXPECT_TRUE(keys.enabled());
  EXPECT_EQ(keys.size(), 2u);
  EXPECT_TRUE(keys.Check("Bearer alpha-key").ok());
  EXPECT_TRUE(keys.Check("Bearer beta-key").ok());
  EXPECT_TRUE(keys.Check("bearer beta-key").ok());  // the scheme is case-insensitive (RFC 7235)
  EXPECT_TRUE(keys.Check("BEARER  alpha-key ").ok());

  const absl::Status missing = keys.Check("");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("Authorization: Bearer <key>"));
  for (const char* wrong : {"Bearer alpha", "Bearer alpha-key2", "Bearer gamma-key", "Bearer ", "Bearer"}) {
    const absl::Status s = keys.Check(wrong);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << wrong;
  }
  EXPECT_THAT(keys.Check("Bearer gamma-key").message(), HasSubstr("not valid"));
  const absl::Status basic = keys.Check("Basic YWxwaGEta2V5");
  EXPECT_EQ(basic.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(basic.message(), HasSubstr("must be \"Bearer <key>\""));
  // The key alone, without the scheme, is refused too.
  EXPECT_EQ(keys.Check("alpha-key").code(), absl::StatusCode::kUnauthenticated);
  // A refusal never repeats the keys.
  for (const absl::Status& s : {missing, basic, keys.Check("Bearer gamma-key")}) {
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("alpha-key")));
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("beta-key")));
  }
}

}  // namespace
}  // namespace tpserve
