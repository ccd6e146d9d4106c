// Host memory for the CPU backend's buffers: large weight buffers start on a 2 MiB boundary
// and are madvise(MADV_HUGEPAGE)'d before first touch, so that the kernel backs them with
// transparent huge pages where its THP policy is not "never" (decode GEMVs stream the
// weights; 4 KiB pages cost them TLB misses). The KV cache and activations take the C heap
// (CpuBackend::Allocate). Tested by tests/host_memory_test.cc.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tpserve {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// The kernel's THP policy, /sys/kernel/mm/transparent_hugepage/enabled.
enum class ThpMode { kAlways, kMadvise, kNever, kUnavailable };

// The bracketed choice of that file's text ("always [madvise] never"); kUnavailable when
// there is none.
ThpMode ParseThpMode(std::string_view sysfs_text);
// This kernel's; kUnavailable where the file does not exist (a kernel without THP).
ThpMode ReadThpMode();
const char* ThpModeName(ThpMode mode);
// Whether madvise(MADV_HUGEPAGE) gets huge pages under `mode`.
inline bool ThpModeAllowsHugePages(ThpMode mode) { return mode == ThpMode::kAlways || mode == ThpMode::kMadvise; }

// One line for start-up logs: whether the CPU backend's large buffers are on huge pages
// and why, e.g. "on (THP: madvise)", "off (THP: never on this kernel)", "off (--cpu-huge-pages off)".
std::string DescribeHugePages(bool requested, ThpMode mode);

// A host allocation of at least `bytes` bytes, freed on destruction; not zeroed. Move-only.
class HostAllocation {
 public:
  // 64-byte aligned. With huge_pages, one of >= kHugePageBytes is a mapping of its own
  // starting on a 2 MiB boundary, madvised for huge pages; its length is rounded up to the
  // 4 KiB page only, so the part past the last 2 MiB boundary stays on 4 KiB pages and no
  // memory is spent on rounding. Smaller ones come from the C heap either way.
  static absl::StatusOr<HostAllocation> Make(size_t bytes, bool huge_pages);

  HostAllocation(HostAllocation&& other) noexcept;
  HostAllocation& operator=(HostAllocation&& other) noexcept;
  HostAllocation(const HostAllocation&) = delete;
  HostAllocation& operator=(const HostAllocation&) = delete;
  ~HostAllocation();

  void* data() const { return data_; }
  // True for the mmap'd, 2 MiB-aligned, madvised kind.
  bool huge_page_mapping() const { return mapped_bytes_ > 0; }

 private:
  HostAllocation(void* data, size_t mapped_bytes) : data_(data), mapped_bytes_(mapped_bytes) {}
  void Release();

  void* data_ = nullptr;
  size_t mapped_bytes_ = 0;  // 0: from aligned_alloc
};

}  // namespace tpserve
