// compressed-tensors checkpoints (worker/compressed_tensors.h): which quantization_configs are
// read and which are refused with the field named, the source's view of the fixtures
// (tools/make_compressed_tensors_fixtures.py: their blocks against their widened values), and
// checkpoints whose parts disagree.
#include "worker/compressed_tensors.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "kernels/cpu/dequantize.h"
#include "nlohmann/json.hpp"
#include "worker/safetensors.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string FixtureDir(const std::string& name) { return std::string(TPSERVE_FIXTURES) + "/models/" + name; }

json FixtureConfig(const std::string& name) {
  std::ifstream in(FixtureDir(name) + "/config.json");
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

absl::StatusOr<CompressedTensorsScheme> Parse(const json& config) {
  return ParseCompressedTensorsConfig(config.dump(), "config.json");
}

// Whether parsing `config` fails with a message containing `needle`.
void ExpectRefused(const json& config, const std::string& needle) {
  auto s = Parse(config);
  ASSERT_FALSE(s.ok()) << "accepted: " << config["quantization_config"].dump();
  EXPECT_NE(std::string(s.status().message()).find(needle), std::string::npos) << s.status();
}

TEST(CompressedTensorsConfig, ReadsTheFixturesSchemes) {
  auto none = Parse(FixtureConfig("llama3"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->present);
  auto channel = Parse(FixtureConfig("ct_fp8_channel"));
  ASSERT_TRUE(channel.ok()) << channel.status();
  EXPECT_TRUE(channel->present && channel->fp8 && !channel->int4 && channel->dynamic_activations);
  EXPECT_NE(channel->description.find("fp8 e4m3 weights (channel)"), std::string::npos) << channel->description;
  EXPECT_NE(channel->description.find("weight-only"), std::string::npos) << channel->description;
  auto block = Parse(FixtureConfig("ct_fp8_block"));
  ASSERT_TRUE(block.ok()) << block.status();
  EXPECT_NE(block->description.find("block 128x128"), std::string::npos) << block->description;
  auto w4 = Parse(FixtureConfig("ct_w4a16"));
  ASSERT_TRUE(w4.ok()) << w4.status();
  EXPECT_TRUE(w4->int4 && !w4->fp8 && !w4->dynamic_activations);
  EXPECT_NE(w4->description.find("int4 weights (group 128)"), std::string::npos) << w4->description;
}

TEST(CompressedTensorsConfig, RefusesWhatItCannotRunNamingTheField) {
  const json w4 = FixtureConfig("ct_w4a16"), fp8 = FixtureConfig("ct_fp8_channel"), blk = FixtureConfig("ct_fp8_block");
  json c = w4;
  c["quantization_config"]["quant_method"] = "gptq";
  ExpectRefused(c, "quant_method \"gptq\" is not supported");
  c = w4;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  ExpectRefused(c, "group_0.weights.symmetric is false");
  c = w4;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 100;
  ExpectRefused(c, "group_size 100");
  c = w4;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["actorder"] = "group";
  ExpectRefused(c, "actorder");
  c = w4;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  ExpectRefused(c, "int weights of 8 bits are not supported");
  c = w4;
  c["quantization_config"]["format"] = "marlin-24";
  ExpectRefused(c, "format \"marlin-24\"");
  c = w4;
  c["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
  ExpectRefused(c, "kv_cache_scheme");
  c = w4;
  c["quantization_config"]["sparsity_config"] = {{"format", "sparse-bitmask"}};
  ExpectRefused(c, "sparsity_config");
  c = w4;
  c["quantization_config"]["quantization_status"] = "frozen";
  ExpectRefused(c, "quantization_status \"frozen\"");
  c = w4;
  c["quantization_config"]["config_groups"] = json::object();
  ExpectRefused(c, "config_groups: missing or empty");
  c = fp8;
  c["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = false;
  ExpectRefused(c, "static activation scales");
  c = fp8;
  c["quantization_config"]["config_groups"]["group_0"]["output_activations"] = {{"num_bits", 8}};
  ExpectRefused(c, "output_activations");
  c = fp8;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "group";
  ExpectRefused(c, "strategy \"group\" for fp8 weights");
  c = blk;
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["block_structure"] = {64, 64};
  ExpectRefused(c, "only [128, 128] blocks");
}

// The kept blocks widen (kernels/cpu/dequantize.h, the kernels' reference) to exactly the
// values the source widens itself, and those are scale * value from the fixture's tensors.
TEST(CompressedTensorsSource, BlocksAndWidenedValuesAgree) {
  for (const char* name : {"ct_fp8_channel", "ct_fp8_block", "ct_w4a16"}) {
    SCOPED_TRACE(name);
    auto src = OpenCheckpointSource(FixtureDir(name));
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_NE((*src)->Describe().find("compressed-tensors"), std::string::npos) << (*src)->Describe();
    const bool int4 = std::string(name) == "ct_w4a16";
    const DType want = int4 ? DType::kQ4_0 : DType::kF8_E4M3;
    for (const auto& [tensor, n, k] : {std::tuple{"layers.0.self_attn.k_proj.weight", 128, 256},
                                       std::tuple{"layers.1.mlp.down_proj.weight", 256, 512}}) {
      SCOPED_TRACE(tensor);
      ASSERT_TRUE((*src)->Has(tensor));
      ASSERT_EQ((*src)->QuantizedDType(tensor), want);
      // Rows 3..9, the second half of the columns (a tensor-parallel rank's slice).
      const SliceRequest r{tensor, {n, k}, 3, 7, k / 2, k / 2};
      std::vector<uint8_t> blocks(r.rows * RowBytes(want, r.cols));
      ASSERT_TRUE((*src)->Read(r, want, blocks.data()).ok());
      std::vector<float> wide(r.rows * r.cols), from_blocks(r.rows * r.cols);
      ASSERT_TRUE((*src)->Read(r, DType::kF32, wide.data()).ok());
      for (int64_t i = 0; i < r.rows; ++i) {
        cpu::DequantizeRow(want, blocks.data() + i * RowBytes(want, r.cols), r.cols, from_blocks.data() + i * r.cols);
      }
      EXPECT_EQ(wide, from_blocks);
      int64_t nonzero = 0;
      for (float v : wide) nonzero += v != 0;
      EXPECT_GT(nonzero, static_cast<int64_t>(wide.size()) * 3 / 4);
    }
    EXPECT_FALSE((*src)->QuantizedDType("embed_tokens.weight").has_value());
  }
}

// A fixture copy the test may damage.
class BrokenCompressedCheckpoint : public ::testing::Test {
 protected:
  void Copy(const std::string& name) {
    dir_ = fs::temp_directory_path() / ("tpserve_ct_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(FixtureDir(name))) fs::copy(e.path(), dir_ / e.path().filename());
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Rewrites model.safetensors with tensor `name` renamed to `to` (the same length).
  void Rename(const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    const std::string path = (dir_ / "model.safetensors").string();
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = bytes.find("\"" + from + "\"");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at + 1, from.size(), to);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  fs::path dir_;
};

TEST_F(BrokenCompressedCheckpoint, MissingScaleOrShapeIsNamed) {
  Copy("ct_fp8_channel");
  Rename("model.layers.0.self_attn.q_proj.weight_scale", "model.layers.0.self_attn.q_proj.weight_scalX");
  auto src = OpenCheckpointSource(dir_.string());
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<float> buf(256 * 256);
  absl::Status st = (*src)->Read(SliceRequest{"layers.0.self_attn.q_proj.weight", {256, 256}, 0, 256, 0, 256},
                                 DType::kF32, buf.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("without its model.layers.0.self_attn.q_proj.weight_scale"),
            std::string::npos) << st;

  Copy("ct_w4a16");
  Rename("model.layers.1.mlp.up_proj.weight_shape", "model.layers.1.mlp.up_proj.weight_shapX");
  src = OpenCheckpointSource(dir_.string());
  ASSERT_TRUE(src.ok()) << src.status();
  st = (*src)->Read(SliceRequest{"layers.1.mlp.up_proj.weight", {512, 256}, 0, 512, 0, 256}, DType::kF32, buf.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(std::string(st.message()).find("up_proj.weight_shape"), std::string::npos) << st;
}

TEST_F(BrokenCompressedCheckpoint, AnUnsupportedConfigFailsAtOpen) {
  Copy("ct_w4a16");
  json c = FixtureConfig("ct_w4a16");
  c["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  std::ofstream(dir_ / "config.json", std::ios::trunc) << c.dump();
  auto src = OpenCheckpointSource(dir_.string());
  ASSERT_FALSE(src.ok());
  EXPECT_NE(std::string(src.status().message()).find("asymmetric"), std::string::npos) << src.status();
}

// Row conversions on hand-made rows: nibble order and offset, FP8 block scales.
TEST(CompressedTensorsRows, Int4NibblesAndFp8Blocks) {
  // 64 int4 values v_j = (j % 16) - 8, packed as compressed-tensors does: element j of each
  // int32 word's 8 in bits 4j..4j+3, stored as v + 8.
  std::vector<uint32_t> packed(8, 0);
  for (int j = 0; j < 64; ++j) packed[j / 8] |= static_cast<uint32_t>(j % 16) << (4 * (j % 8));
  const std::vector<float> scale = {0.5f, 0.25f};  // groups of 32
  std::vector<float> wide(64);
  Int4RowToF32(reinterpret_cast<const uint8_t*>(packed.data()), scale.data(), 32, 0, 64, wide.data());
  for (int j = 0; j < 64; ++j) EXPECT_EQ(wide[j], static_cast<float>(j % 16 - 8) * scale[j / 32]) << j;
  const std::vector<uint16_t> scale16 = {F32ToF16(0.5f), F32ToF16(0.25f)};
  std::vector<uint8_t> q4(2 * BlockBytes(DType::kQ4_0));
  Int4RowToQ4_0(reinterpret_cast<const uint8_t*>(packed.data()), scale16.data(), 32, 0, 64, q4.data());
  std::vector<float> back(64);
  cpu::DequantizeRow(DType::kQ4_0, q4.data(), 64, back.data());
  EXPECT_EQ(back, wide);

  // Two rows of 256 FP8 codes with 128x128 block scales [1, 2]: columns 128.. take scale[1].
  std::vector<uint8_t> row(256);
  for (int j = 0; j < 256; ++j) row[j] = static_cast<uint8_t>(j % 0x7f);  // no NaN code
  const std::vector<float> bscale = {2.0f, 0.125f};
  std::vector<uint8_t> blocks(BlockBytes(DType::kF8_E4M3));
  Fp8RowToBlocks(row.data(), bscale.data(), 2, 128, 1, 128, 128, blocks.data());
  std::vector<float> from_blocks(128), direct(128);
  cpu::DequantizeRow(DType::kF8_E4M3, blocks.data(), 128, from_blocks.data());
  Fp8RowToF32(row.data(), bscale.data(), 2, 128, 1, 128, 128, direct.data());
  EXPECT_EQ(from_blocks, direct);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(direct[j], 0.125f * cpu::F8E4M3ToF32(row[128 + j])) << j;
}

}  // namespace
}  // namespace tpserve
