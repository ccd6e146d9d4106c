// Host allocations on transparent huge pages; see host_memory.h.
#include "worker/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

ThpMode ParseThpMode(std::string_view text) {
  const size_t open = text.find('[');
  const size_t close = text.find(']', open);
  if (open == std::string_view::npos || close == std::string_view::npos) return ThpMode::kUnavailable;
  const std::string_view chosen = text.substr(open + 1, close - open - 1);
  if (chosen == "always") return ThpMode::kAlways;
  if (chosen == "madvise") return ThpMode::kMadvise;
  if (chosen == "never") return ThpMode::kNever;
  return ThpMode::kUnavailable;
}

ThpMode ReadThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!f) return ThpMode::kUnavailable;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return ParseThpMode(text);
}

const char* ThpModeName(ThpMode mode) {
  switch (mode) {
    case ThpMode::kAlways:
      return "always";
    case ThpMode::kMadvise:
      return "madvise";
    case ThpMode::kNever:
      return "never";
    case ThpMode::kUnavailable:
      break;
  }
  return "unavailable";
}

std::string DescribeHugePages(bool requested, ThpMode mode) {
  if (!requested) return "off (--cpu-huge-pages off)";
  if (!ThpModeAllowsHugePages(mode)) return absl::StrCat("off (THP: ", ThpModeName(mode), " on this kernel)");
  return absl::StrCat("on (THP: ", ThpModeName(mode), "; weight buffers >= 2 MiB 2 MiB-aligned and madvised)");
}

absl::StatusOr<HostAllocation> HostAllocation::Make(size_t bytes, bool huge_pages) {
  bytes = std::max<size_t>(bytes, 1);
  if (!huge_pages || bytes < kHugePageBytes) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("out of host memory allocating ", bytes, " bytes"));
    return HostAllocation(p, 0);
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t length = (bytes + page - 1) / page * page;
  // Map enough to find a 2 MiB boundary, then give back the head and the tail around it.
  const size_t reserved = length + kHugePageBytes - page;
  void* raw = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("out of host memory mapping ", bytes, " bytes"));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (start > begin) munmap(raw, start - begin);
  if (begin + reserved > start + length) {
    munmap(reinterpret_cast<void*>(start + length), begin + reserved - (start + length));
  }
  void* p = reinterpret_cast<void*>(start);
  // Fails only where the kernel has no THP (EINVAL): 4 KiB pages then, as DescribeHugePages
  // (from the sysfs policy) says.
  madvise(p, length, MADV_HUGEPAGE);
  return HostAllocation(p, length);
}

HostAllocation::HostAllocation(HostAllocation&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

HostAllocation& HostAllocation::operator=(HostAllocation&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
  }
  return *this;
}

HostAllocation::~HostAllocation() { Release(); }

void HostAllocation::Release() {
  if (data_ == nullptr) return;
  if (mapped_bytes_ > 0) {
    munmap(data_, mapped_bytes_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  mapped_bytes_ = 0;
}

}  // namespace tpserve
