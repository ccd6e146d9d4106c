// Paths into tests/fixtures/ and whole-file reads, for tests and fuzz targets that are
// built with TPSERVE_FIXTURES defined (tests/CMakeLists.txt, tests/fuzz_tests.cmake).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace tpserve {

inline std::string Fixture(const std::string& path) { return std::string(TPSERVE_FIXTURES) + "/" + path; }

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace tpserve
