// Fixture loading shared by the fuzz targets in tests/fuzz/: set-up failures abort, since a
// fuzzer without its fixtures would test nothing. TPSERVE_FIXTURES is set by tests/fuzz_tests.cmake.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "tests/fixture_files.h"

namespace tpserve::fuzz {

template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "fuzz set-up failed: %s: %s\n", what, value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

// A broken invariant that the fuzzer should report as a crash.
inline void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
using tokenizer_internal::IsValidUtf8;

}  // namespace tpserve::fuzz
