// The CPU backend's weights on transparent huge pages (worker/host_memory.h, issue 21 item 2):
// a large weight allocation starts on a 2 MiB boundary and, where the kernel's THP policy
// allows, is backed by huge pages once touched (AnonHugePages of its mapping in
// /proc/self/smaps); with the option off it is not, and the KV cache and activations never
// are. Also the sysfs policy's parsing and the start-up line.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "worker/backend.h"
#include "worker/host_memory.h"

namespace tpserve {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// AnonHugePages (bytes) of the /proc/self/smaps entry whose range holds p; -1 if none does.
int64_t AnonHugePagesBytes(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    // A mapping's header: "7f..-7f.. rw-p ..."; field lines start with a capital name.
    std::istringstream header(line);
    if (header >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
      continue;
    }
    long long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lld kB", &kb) == 1) return kb * 1024;
  }
  return -1;
}

// Writes one byte per 4 KiB page, as loading weights into the buffer would.
void Touch(void* p, size_t bytes) {
  auto* b = static_cast<volatile uint8_t*>(p);
  for (size_t i = 0; i < bytes; i += 4096) b[i] = 1;
}

TEST(ThpModeTest, ParsesTheBracketedChoice) {
  EXPECT_EQ(ParseThpMode("always [madvise] never\n"), ThpMode::kMadvise);
  EXPECT_EQ(ParseThpMode("[always] madvise never\n"), ThpMode::kAlways);
  EXPECT_EQ(ParseThpMode("always madvise [never]\n"), ThpMode::kNever);
  EXPECT_EQ(ParseThpMode(""), ThpMode::kUnavailable);
  EXPECT_EQ(ParseThpMode("always madvise never"), ThpMode::kUnavailable);
}

TEST(ThpModeTest, DescribesWhatTheBackendGets) {
  EXPECT_EQ(DescribeHugePages(false, ThpMode::kMadvise), "off (--cpu-huge-pages off)");
  EXPECT_EQ(DescribeHugePages(true, ThpMode::kNever), "off (THP: never on this kernel)");
  EXPECT_EQ(DescribeHugePages(true, ThpMode::kUnavailable), "off (THP: unavailable on this kernel)");
  EXPECT_EQ(DescribeHugePages(true, ThpMode::kMadvise).rfind("on (THP: madvise", 0), 0u);
}

TEST(HostMemoryTest, SmallAllocationsStayOnTheHeap) {
  auto a = HostAllocation::Make(100, /*huge_pages=*/true);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->huge_page_mapping());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
  auto b = HostAllocation::Make(kHugePageBytes - 1, /*huge_pages=*/true);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(b->huge_page_mapping());
}

TEST(HostMemoryTest, MovedAllocationFreesOnce) {
  auto a = HostAllocation::Make(8 * kMiB + 12345, /*huge_pages=*/true);
  ASSERT_TRUE(a.ok()) << a.status();
  HostAllocation b = *std::move(a);
  EXPECT_TRUE(b.huge_page_mapping());
  Touch(b.data(), 8 * kMiB + 12345);  // the last, partial 4 KiB page is mapped too
  HostAllocation c = std::move(b);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_NE(c.data(), nullptr);
}

// The backend's large weight buffer with huge pages on: 2 MiB aligned, and on huge pages
// once touched where THP is "always" or "madvise".
TEST(CpuBackendHugePagesTest, LargeWeightBufferIsAlignedAndOnHugePages) {
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1, .cpu_huge_pages = true});
  const size_t bytes = 64 * kMiB + 3 * 4096;
  auto buffer = backend->AllocateWeights(bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  void* p = (*buffer)->data();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u);
  EXPECT_EQ((*buffer)->bytes(), bytes);
  Touch(p, bytes);
  const ThpMode mode = ReadThpMode();
  if (!ThpModeAllowsHugePages(mode)) {
    GTEST_SKIP() << "THP is " << ThpModeName(mode) << " on this kernel (/sys/kernel/mm/transparent_hugepage/enabled): "
                 << "no huge pages to check for";
  }
  const int64_t huge = AnonHugePagesBytes(p);
  // All 32 whole 2 MiB pages where memory is not too fragmented; at least one in any case.
  EXPECT_GT(huge, 0) << "AnonHugePages of the buffer's mapping (THP " << ThpModeName(mode) << ")";
  EXPECT_LE(huge, static_cast<int64_t>(64 * kMiB)) << "only whole 2 MiB pages inside the buffer";
}

// With the option off under THP "madvise" (4 KiB pages unless asked), the same buffer
// gets no huge pages: the option is what makes the difference.
TEST(CpuBackendHugePagesTest, OffGivesNoHugePagesUnderMadvise) {
  const ThpMode mode = ReadThpMode();
  if (mode != ThpMode::kMadvise) {
    GTEST_SKIP() << "THP is " << ThpModeName(mode) << " here, not madvise: without the madvise call the kernel "
                 << (mode == ThpMode::kAlways ? "may still use huge pages" : "uses none either way");
  }
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1, .cpu_huge_pages = false});
  const size_t bytes = 64 * kMiB;
  auto buffer = backend->AllocateWeights(bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Touch((*buffer)->data(), bytes);
  EXPECT_EQ(AnonHugePagesBytes((*buffer)->data()), 0);
}

// The KV cache and activations (Allocate) stay on 4 KiB pages with the option on: a KV
// layer buffer is written a few KiB per token, and on huge pages a short sequence faulted
// in 2 MiB per layer buffer (gemma-4-1b, 576 tokens: 96 MiB resident for 54 MiB of KV).
// Here a buffer of a KV layer's size, written as a prefill's first token would, then whole.
TEST(CpuBackendHugePagesTest, KvCacheIsNotOnHugePages) {
  const ThpMode mode = ReadThpMode();
  if (mode != ThpMode::kMadvise) {
    GTEST_SKIP() << "THP is " << ThpModeName(mode) << " here, not madvise: "
                 << (mode == ThpMode::kAlways ? "the kernel may back any mapping with huge pages"
                                              : "no huge pages either way");
  }
  auto backend = MakeCpuBackend(BackendOptions{.threads = 1, .cpu_huge_pages = true});
  auto buffer = backend->Allocate(16 * kMiB);  // a KV cache layer buffer's size
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  Touch((*buffer)->data(), 4096);
  EXPECT_EQ(AnonHugePagesBytes((*buffer)->data()), 0);
  Touch((*buffer)->data(), 16 * kMiB);  // a whole buffer of activations, as a prefill writes
  EXPECT_EQ(AnonHugePagesBytes((*buffer)->data()), 0);
}

TEST(CpuBackendHugePagesTest, NameSaysWhichMemory) {
  EXPECT_NE(MakeCpuBackend(BackendOptions{.cpu_huge_pages = true})->name().find("huge_pages=on"), std::string::npos);
  EXPECT_NE(MakeCpuBackend(BackendOptions{.cpu_huge_pages = false})->name().find("huge_pages=off"), std::string::npos);
}

}  // namespace
}  // namespace tpserve
