// The collectives of worker/communicator.h on thread ranks (LocalGroup), and the helpers
// every Communicator shares (AgreeOnStatus, AllReduceMin/Max, BroadcastBytes). The same
// helpers under real MPI ranks: tests/mpi_model_test.cc.
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/tp_harness.h"
#include "worker/communicator.h"

namespace tpserve {
namespace {

using testing::RunThreads;

TEST(Communicator, CollectivesOnThreadRanks) {
  RunThreads(3, [](Communicator& comm) {
    const int r = comm.rank();
    EXPECT_EQ(comm.size(), 3);
    std::vector<float> v = {1.0f + r, -2.0f * r};
    comm.AllReduceSum(v.data(), v.size(), DType::kF32);
    EXPECT_EQ(v, (std::vector<float>{6.0f, -6.0f}));
    uint16_t b = F32ToBf16(0.5f);
    comm.AllReduceSum(&b, 1, DType::kBF16);
    EXPECT_EQ(Bf16ToF32(b), 1.5f);

    const int32_t mine = 10 * r;
    std::vector<int32_t> all(3, -1);
    comm.AllGather(&mine, sizeof(mine), all.data());
    EXPECT_EQ(all, (std::vector<int32_t>{0, 10, 20}));
    std::vector<int32_t> at_root(3, -1);
    comm.Gather(&mine, sizeof(mine), at_root.data(), 1);
    EXPECT_EQ(at_root, r == 1 ? all : std::vector<int32_t>(3, -1)) << "rank " << r;

    int64_t word = r == 2 ? 77 : 0;
    comm.Broadcast(&word, sizeof(word), 2);
    EXPECT_EQ(word, 77);
  });
}

// Split groups ranks by color, in their world order; point-to-point messages between a pair
// arrive whole and in order, whatever else is in flight.
TEST(Communicator, SplitAndPointToPointOnThreadRanks) {
  RunThreads(4, [](Communicator& comm) {
    const int r = comm.rank();
    std::unique_ptr<Communicator> stage = comm.Split(r / 2);  // {0, 1}, {2, 3}
    EXPECT_EQ(stage->size(), 2);
    EXPECT_EQ(stage->rank(), r % 2);
    std::vector<float> v = {static_cast<float>(r)};
    stage->AllReduceSum(v.data(), 1, DType::kF32);
    EXPECT_EQ(v[0], r < 2 ? 1.0f : 5.0f);
    std::unique_ptr<Communicator> odd_even = comm.Split(r % 2);  // a second split: {0, 2}, {1, 3}
    EXPECT_EQ(odd_even->rank(), r / 2);
    int64_t word = odd_even->rank() == 0 ? 100 + r : 0;
    odd_even->Broadcast(&word, sizeof(word), 0);
    EXPECT_EQ(word, 100 + r % 2);

    // Stage 0's rank t sends to stage 1's rank t, twice, then the reply comes back.
    std::vector<int32_t> a(64, r), b(3, -r), in_a(64, -1), in_b(3, -1);
    if (r < 2) {
      comm.Send(a.data(), a.size() * 4, r + 2);
      comm.Send(b.data(), b.size() * 4, r + 2);
      int32_t reply = 0;
      comm.Recv(&reply, 4, r + 2);
      EXPECT_EQ(reply, 1000 + r + 2);
    } else {
      comm.Recv(in_a.data(), in_a.size() * 4, r - 2);
      comm.Recv(in_b.data(), in_b.size() * 4, r - 2);
      EXPECT_EQ(in_a, std::vector<int32_t>(64, r - 2));
      EXPECT_EQ(in_b, std::vector<int32_t>(3, 2 - r));
      const int32_t reply = 1000 + r;
      comm.Send(&reply, 4, r - 2);
    }
  });
}

TEST(Communicator, MinAndMaxOverRanks) {
  RunThreads(4, [](Communicator& comm) {
    const int64_t v = comm.rank() == 2 ? -5 : 100 + comm.rank();
    EXPECT_EQ(comm.AllReduceMin(v), -5);
    EXPECT_EQ(comm.AllReduceMax(v), 103);
    EXPECT_EQ(comm.AllReduceMax(-comm.rank()), 0);
  });
}

// Every rank gets the first failing rank's code and message; the other ranks' copies say
// which rank it came from. All OK: OK everywhere.
TEST(Communicator, AgreeOnStatusTakesTheFirstFailingRank) {
  RunThreads(4, [](Communicator& comm) {
    const int r = comm.rank();
    EXPECT_TRUE(comm.AgreeOnStatus(absl::OkStatus()).ok());
    absl::Status local = absl::OkStatus();
    if (r == 1) local = absl::ResourceExhaustedError("KV cache: lower --max-model-len");
    if (r == 3) local = absl::NotFoundError("a later failure");
    const absl::Status agreed = comm.AgreeOnStatus(local);
    EXPECT_EQ(agreed.code(), absl::StatusCode::kResourceExhausted) << "rank " << r;
    const std::string want =
        r == 1 ? "KV cache: lower --max-model-len" : "rank 1: KV cache: lower --max-model-len";
    EXPECT_EQ(std::string(agreed.message()), want) << "rank " << r;
  });
}

TEST(Communicator, BroadcastBytesCarriesAnySize) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{100000}}) {
    RunThreads(3, [n](Communicator& comm) {
      std::vector<uint8_t> bytes;
      if (comm.rank() == 0) {
        for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(i * 7));
      } else {
        bytes.assign(5, 0xee);  // stale contents on the receivers go
      }
      comm.BroadcastBytes(bytes, 0);
      ASSERT_EQ(bytes.size(), n) << "rank " << comm.rank();
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bytes[i], static_cast<uint8_t>(i * 7)) << i;
    });
  }
}

TEST(Communicator, OneRankIsItsOwnWorld) {
  RunThreads(1, [](Communicator& comm) {
    float x = 2.5f;
    comm.AllReduceSum(&x, 1, DType::kF32);
    EXPECT_EQ(x, 2.5f);
    EXPECT_EQ(comm.AllReduceMin(9), 9);
    EXPECT_EQ(comm.AllReduceMax(9), 9);
    EXPECT_TRUE(comm.AgreeOnStatus(absl::OkStatus()).ok());
    EXPECT_EQ(comm.AgreeOnStatus(absl::InternalError("x")).message(), "x");
  });
}

}  // namespace
}  // namespace tpserve
