// worker/gguf_quants.h against gguf.quants.dequantize: every supported ggml type, bit for bit,
// on the fixtures of tools/make_gguf_fixtures.py (synthetic blocks with extreme scales, and
// real blocks from Gemma 3 270M Q4_K_M); the error cases.
//
// Bit-exact everywhere, with no tolerance: every product of scales and quants is exact in fp32,
// so ggml, gguf-py and worker/gguf_quants.cc (FMA-contracted under -march=native or not) round
// only once, at the final add of a min (see the comment atop worker/gguf_quants.cc).
#include "worker/gguf_quants.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/base.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

const std::string kDir = std::string(TPSERVE_FIXTURES) + "/gguf/quants/";

const GgmlType kSupported[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0, GgmlType::kQ4_1,
    GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kQ2_K, GgmlType::kQ3_K,
    GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// ggml's block sizes (elements), kept here so the test does not trust the code under test.
int64_t BlockElems(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16: return 1;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return 256;
    default: return 32;
  }
}

struct Case {
  std::string name;
  GgmlType type;
  int64_t rows = 0, row_elems = 0, row_bytes = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> ref;
};

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<Case> LoadCases() {
  std::vector<Case> out;
  std::vector<uint8_t> text = ReadFile(kDir + "manifest.json");
  nlohmann::json manifest = nlohmann::json::parse(text.begin(), text.end());
  for (const auto& c : manifest.at("cases")) {
    Case k;
    k.name = c.at("name").get<std::string>();
    k.type = static_cast<GgmlType>(c.at("type_id").get<uint32_t>());
    k.rows = c.at("rows").get<int64_t>();
    k.row_elems = c.at("row_elems").get<int64_t>();
    k.row_bytes = c.at("row_bytes").get<int64_t>();
    k.blocks = ReadFile(kDir + k.name + ".blocks");
    std::vector<uint8_t> ref = ReadFile(kDir + k.name + ".f32");
    k.ref.resize(ref.size() / 4);
    std::memcpy(k.ref.data(), ref.data(), ref.size());
    EXPECT_EQ(static_cast<int64_t>(k.blocks.size()), k.rows * k.row_bytes) << k.name;
    EXPECT_EQ(static_cast<int64_t>(k.ref.size()), k.rows * k.row_elems) << k.name;
    out.push_back(std::move(k));
  }
  return out;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = LoadCases();
  return cases;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The index of the first element whose bits differ, or -1.
int64_t FirstMismatch(const float* got, const float* want, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (Bits(got[i]) != Bits(want[i])) return i;
  }
  return -1;
}

TEST(GgufQuantsTest, FixturesCoverEverySupportedTypeAndTheRealModelsTypes) {
  ASSERT_FALSE(Cases().empty());
  for (GgmlType t : kSupported) {
    bool found = false;
    for (const Case& c : Cases()) found |= c.type == t && c.rows >= 3;
    EXPECT_TRUE(found) << "no multi-row fixture for ggml type " << static_cast<int>(t);
  }
  // gemma-3-270m-q4_k_m.gguf holds F32 (norms: a copy) and these quantized types.
  for (const char* name : {"gemma3_270m_Q8_0", "gemma3_270m_Q5_0", "gemma3_270m_Q4_K",
                           "gemma3_270m_Q6_K"}) {
    bool found = false;
    for (const Case& c : Cases()) found |= c.name == name;
    EXPECT_TRUE(found) << name;
  }
}

TEST(GgufQuantsTest, RowByRowBitExact) {
  for (const Case& c : Cases()) {
    ASSERT_TRUE(GgmlDequantSupported(c.type)) << c.name;
    // A sentinel tail catches writes past n.
    std::vector<float> out(c.row_elems + 64);
    for (int64_t r = 0; r < c.rows; ++r) {
      std::fill(out.begin(), out.end(), -7.0f);
      ASSERT_TRUE(DequantizeRow(c.type, c.blocks.data() + r * c.row_bytes, c.row_elems, out.data()).ok());
      const float* want = c.ref.data() + r * c.row_elems;
      int64_t bad = FirstMismatch(out.data(), want, c.row_elems);
      EXPECT_EQ(bad, -1) << c.name << " row " << r << " element " << bad << ": got "
                         << (bad >= 0 ? out[bad] : 0) << ", gguf-py " << (bad >= 0 ? want[bad] : 0);
      for (size_t i = c.row_elems; i < out.size(); ++i) ASSERT_EQ(out[i], -7.0f) << c.name << " wrote past n";
    }
  }
}

TEST(GgufQuantsTest, AllRowsInOneCallBitExact) {
  for (const Case& c : Cases()) {
    std::vector<float> out(c.rows * c.row_elems);
    ASSERT_TRUE(DequantizeRow(c.type, c.blocks.data(), c.rows * c.row_elems, out.data()).ok());
    int64_t bad = FirstMismatch(out.data(), c.ref.data(), out.size());
    EXPECT_EQ(bad, -1) << c.name << " element " << bad;
  }
}

// A slice starting at a block boundary inside a row (a tensor-parallel shard of a row), one
// block at a time and the rest of the row at once.
TEST(GgufQuantsTest, SlicesStartingInsideARow) {
  for (const Case& c : Cases()) {
    const int64_t be = BlockElems(c.type);
    const int64_t bb = c.row_bytes / (c.row_elems / be);
    const int64_t r = c.rows - 1;
    const uint8_t* row = c.blocks.data() + r * c.row_bytes;
    const float* want = c.ref.data() + r * c.row_elems;
    std::vector<float> out(c.row_elems);
    for (int64_t b = 0; b < c.row_elems / be; ++b) {
      ASSERT_TRUE(DequantizeRow(c.type, row + b * bb, be, out.data() + b * be).ok());
    }
    EXPECT_EQ(FirstMismatch(out.data(), want, c.row_elems), -1) << c.name << " block by block";
    std::fill(out.begin(), out.end(), 0.0f);
    ASSERT_TRUE(DequantizeRow(c.type, row + bb, c.row_elems - be, out.data()).ok());
    EXPECT_EQ(FirstMismatch(out.data(), want + be, c.row_elems - be), -1) << c.name << " from block 1";
  }
}

// The vectorizable F16 path against kernels/base.h's F16ToF32 on every bit pattern.
TEST(GgufQuantsTest, F16MatchesF16ToF32OnAllInputs) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  ASSERT_TRUE(DequantizeRow(GgmlType::kF16, reinterpret_cast<const uint8_t*>(all.data()), 65536,
                            out.data()).ok());
  for (int i = 0; i < 65536; ++i) {
    ASSERT_EQ(Bits(out[i]), Bits(F16ToF32(all[i]))) << "half 0x" << std::hex << i;
  }
}

TEST(GgufQuantsTest, SupportedTypes) {
  for (GgmlType t : kSupported) EXPECT_TRUE(GgmlDequantSupported(t)) << static_cast<int>(t);
  for (GgmlType t : {GgmlType::kQ8_1, GgmlType::kQ8_K, GgmlType::kIQ2_XS, GgmlType::kIQ4_NL,
                     GgmlType::kI8, GgmlType::kF64, GgmlType::kTQ1_0, GgmlType::kMXFP4,
                     static_cast<GgmlType>(99)}) {
    EXPECT_FALSE(GgmlDequantSupported(t)) << static_cast<int>(t);
  }
}

TEST(GgufQuantsTest, UnsupportedTypeIsAnErrorNamingIt) {
  uint8_t src[256] = {};
  float dst[256];
  absl::Status s = DequantizeRow(GgmlType::kIQ2_XS, src, 256, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("IQ2_XS tensors are not supported"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("supported: F32, F16, BF16, Q4_0"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("Q6_K"), std::string_view::npos) << s;

  s = DequantizeRow(GgmlType::kMXFP4, src, 32, dst);
  EXPECT_NE(s.message().find("MXFP4"), std::string_view::npos) << s;
  s = DequantizeRow(static_cast<GgmlType>(99), src, 32, dst);
  EXPECT_NE(s.message().find("ggml type 99"), std::string_view::npos) << s;
}

TEST(GgufQuantsTest, PartialBlockIsAnErrorNamingTypeAndCount) {
  uint8_t src[512] = {};
  float dst[512];
  absl::Status s = DequantizeRow(GgmlType::kQ4_K, src, 100, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q4_K"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("n = 100"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("256"), std::string_view::npos) << s;

  s = DequantizeRow(GgmlType::kQ4_0, src, 33, dst);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q4_0"), std::string_view::npos) << s;
  EXPECT_NE(s.message().find("n = 33"), std::string_view::npos) << s;

  EXPECT_FALSE(DequantizeRow(GgmlType::kQ8_0, src, -32, dst).ok());
  EXPECT_FALSE(DequantizeRow(GgmlType::kQ6_K, src, 128, dst).ok());
  // Whole blocks, including none, are fine.
  EXPECT_TRUE(DequantizeRow(GgmlType::kQ6_K, src, 0, dst).ok());
  EXPECT_TRUE(DequantizeRow(GgmlType::kF16, src, 3, dst).ok());
}

}  // namespace
}  // namespace tpserve
