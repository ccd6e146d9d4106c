// kernels/tuning.h: the row counts measured, the measurement a row count uses, the choice.
#include "kernels/tuning.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace tpserve {
namespace {

TEST(TuneRowBuckets, PowersOfTwoEndingAtTheLargestProduct) {
  EXPECT_EQ(TuneRowBuckets(8, 2048), (std::vector<int64_t>{8, 16, 32, 64, 128, 256, 512, 1024, 2048}));
  EXPECT_EQ(TuneRowBuckets(8, 3000), (std::vector<int64_t>{8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3000}));
  EXPECT_EQ(TuneRowBuckets(5, 20), (std::vector<int64_t>{8, 16, 20}));
  EXPECT_EQ(TuneRowBuckets(8, 8), (std::vector<int64_t>{8}));
  EXPECT_EQ(TuneRowBuckets(1, 4), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(TuneRowBuckets(0, 3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(TuneRowBuckets(8, 4).empty());
  EXPECT_TRUE(TuneRowBuckets(1, 0).empty());
}

TEST(TuneBucketFor, SmallestMeasuredAtOrAbove) {
  const std::vector<int64_t> m{8, 16, 32, 3000};
  EXPECT_EQ(TuneBucketFor(5, m), 8);
  EXPECT_EQ(TuneBucketFor(8, m), 8);
  EXPECT_EQ(TuneBucketFor(9, m), 16);
  EXPECT_EQ(TuneBucketFor(33, m), 3000);
  EXPECT_EQ(TuneBucketFor(3000, m), 3000);
  EXPECT_EQ(TuneBucketFor(5000, m), 3000);  // beyond them all: the largest
  EXPECT_EQ(TuneBucketFor(5, std::vector<int64_t>{}), -1);
}

TEST(ChooseFastest, TheFastestBeyondTheMarginElseTheDefault) {
  EXPECT_EQ(ChooseFastest(std::vector<double>{10, 8, 9}), 1);
  EXPECT_EQ(ChooseFastest(std::vector<double>{10, 9.8, 11}), 0);  // 2% faster: noise
  EXPECT_EQ(ChooseFastest(std::vector<double>{10, 9.8, 11}, 0.01), 1);
  EXPECT_EQ(ChooseFastest(std::vector<double>{10}), 0);
  EXPECT_EQ(ChooseFastest(std::vector<double>{-1, 12, 11}), 2);  // the default could not run
  EXPECT_EQ(ChooseFastest(std::vector<double>{10, -1, 7}), 2);
  EXPECT_EQ(ChooseFastest(std::vector<double>{-1, -1}), -1);
  EXPECT_EQ(ChooseFastest(std::vector<double>{}), -1);
}

TEST(ChosenAtOrAbove, TheChoiceOfTheNextMeasuredRowCount) {
  const std::map<int64_t, bool> gemv_won{{8, true}, {16, false}};
  EXPECT_TRUE(ChosenAtOrAbove(gemv_won, 5));
  EXPECT_TRUE(ChosenAtOrAbove(gemv_won, 8));
  EXPECT_FALSE(ChosenAtOrAbove(gemv_won, 9));
  EXPECT_FALSE(ChosenAtOrAbove(gemv_won, 16));
  EXPECT_FALSE(ChosenAtOrAbove(gemv_won, 17));  // not measured that far
  EXPECT_FALSE(ChosenAtOrAbove({}, 5));
}

}  // namespace
}  // namespace tpserve
