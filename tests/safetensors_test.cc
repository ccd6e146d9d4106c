// Safetensors loading and bad checkpoints: truncated files, corrupt headers, missing
// tensors, wrong shapes and dtypes each give an error naming the file and tensor.
#include "worker/safetensors.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// A scratch copy of a fixture checkpoint the test may damage.
class BadCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tpserve_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(std::string(TPSERVE_FIXTURES) + "/models/llama3")) {
      fs::copy(e.path(), dir_ / e.path().filename());
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file() const { return (dir_ / "model.safetensors").string(); }
  fs::path dir_;
};

TEST_F(BadCheckpointTest, ReadsTheFixture) {
  auto ckpt = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const TensorInfo* t = (*ckpt)->Find("model.embed_tokens.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape.size(), 2u);
}

TEST_F(BadCheckpointTest, TruncatedFile) {
  fs::resize_file(file(), fs::file_size(file()) - 1000);
  auto ckpt = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(Msg(ckpt.status()).find(file()), std::string::npos) << ckpt.status();
  EXPECT_NE(Msg(ckpt.status()).find("truncated"), std::string::npos) << ckpt.status();
}

TEST_F(BadCheckpointTest, TinyAndCorruptHeader) {
  fs::resize_file(file(), 5);
  auto tiny = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(Msg(tiny.status()).find(file()), std::string::npos);
  std::ofstream(file(), std::ios::binary | std::ios::trunc) << std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": nonsense}", 24);
  auto corrupt = Checkpoint::Open(dir_.string());
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(Msg(corrupt.status()).find("header"), std::string::npos) << corrupt.status();
}

TEST_F(BadCheckpointTest, MissingFile) {
  fs::remove(file());
  auto src = OpenCheckpointSource(dir_.string());
  ASSERT_FALSE(src.ok());
  EXPECT_NE(Msg(src.status()).find(dir_.string()), std::string::npos);
}

TEST_F(BadCheckpointTest, MissingTensorWrongShapeAndDtype) {
  auto src = OpenCheckpointSource(dir_.string());
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<float> buf(1 << 16);
  absl::Status missing = (*src)->Read(SliceRequest{"layers.99.mlp.up_proj.weight", {4, 4}, 0, 4, 0, 4}, DType::kF32,
                                      buf.data());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(Msg(missing).find("model.layers.99.mlp.up_proj.weight"), std::string::npos) << missing;
  absl::Status shape = (*src)->Read(SliceRequest{"embed_tokens.weight", {7, 64}, 0, 7, 0, 64}, DType::kF32, buf.data());
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(Msg(shape).find("model.embed_tokens.weight"), std::string::npos) << shape;
  EXPECT_NE(Msg(shape).find("expected [7, 64]"), std::string::npos) << shape;
}

TEST_F(BadCheckpointTest, UnsupportedDtypeIsNamed) {
  // A minimal file with one I64 tensor.
  const std::string header = R"({"model.embed_tokens.weight": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}})";
  std::ofstream out(file(), std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(16, '\0');
  out.close();
  auto src = OpenCheckpointSource(dir_.string());
  ASSERT_TRUE(src.ok()) << src.status();
  int64_t buf[2];
  absl::Status st = (*src)->Read(SliceRequest{"embed_tokens.weight", {2}, 0, 1, 0, 2}, DType::kF32, buf);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(Msg(st).find("I64"), std::string::npos) << st;
}

TEST(Checkpoint, ShardedIndexAndPrefixes) {
  auto ckpt = Checkpoint::Open(std::string(TPSERVE_FIXTURES) + "/models/gemma4_multimodal");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_NE((*ckpt)->Find("model.language_model.embed_tokens.weight"), nullptr);
  EXPECT_EQ((*ckpt)->Find("model.language_model.embed_tokens.weight")->dtype, DType::kBF16);
  auto src = OpenCheckpointSource(std::string(TPSERVE_FIXTURES) + "/models/gemma4_multimodal");
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_TRUE((*src)->Has("layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE((*src)->Has("layers.5.self_attn.v_proj.weight"));  // K = V layer
}

TEST(Checkpoint, DummyIsDeterministicAndSliceConsistent) {
  auto c = PresetModelConfig("gemma-4-tiny");
  ASSERT_TRUE(c.ok());
  auto src = MakeDummySource(*c, 3);
  std::vector<float> full(64 * 128), part(16 * 32);
  ASSERT_TRUE(src->Read(SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, 0, 64, 0, 128}, DType::kF32, full.data()).ok());
  ASSERT_TRUE(src->Read(SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, 16, 16, 32, 32}, DType::kF32, part.data()).ok());
  for (int r = 0; r < 16; ++r) {
    for (int col = 0; col < 32; ++col) ASSERT_EQ(part[r * 32 + col], full[(16 + r) * 128 + 32 + col]);
  }
  float mean_sq = 0;
  for (float v : full) mean_sq += v * v;
  EXPECT_NEAR(mean_sq / full.size(), 1.0f / 128, 0.3f / 128);  // variance 1/fan_in
}

// A slice outside its shape, or of no shape at all, is an error before anything is read.
TEST(Checkpoint, BadSliceRequestsAreErrors) {
  auto c = PresetModelConfig("gemma-4-tiny");
  ASSERT_TRUE(c.ok());
  auto src = MakeDummySource(*c, 3);
  std::vector<float> buf(256 * 128);
  for (const SliceRequest& r : {SliceRequest{"layers.0.mlp.up_proj.weight", {}, 0, 1, 0, 1},
                                SliceRequest{"layers.0.mlp.up_proj.weight", {2, 2, 2}, 0, 1, 0, 1},
                                SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, 250, 16, 0, 128},
                                SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, 0, 16, 0, 129},
                                SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, 8, -4, 0, 128},
                                SliceRequest{"layers.0.mlp.up_proj.weight", {256, 128}, -1, 1, 0, 128}}) {
    const absl::Status st = src->Read(r, DType::kF32, buf.data());
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << r.shape.size() << " " << r.row0 << " " << r.rows;
    EXPECT_NE(std::string(st.message()).find("bad slice request"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace tpserve
