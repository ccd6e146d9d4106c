// Every checkpoint tensor is read by the model or known to be safe to skip
// (WeightSource::CheckAllUsed, called by Model::Load): an unknown tensor fails the load
// with its name at TP 1 and 2, multimodal towers and rotary buffers do not; GGUF files too.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "kernels/cpu/dequantize.h"
#include "nlohmann/json.hpp"
#include "tests/tp_harness.h"
#include "worker/backend.h"
#include "worker/gguf_model.h"
#include "worker/model.h"
#include "worker/safetensors.h"
#include "worker/weight_source.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

struct ExtraTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// A safetensors file of F32 tensors filled with 0.5.
void WriteSafetensors(const fs::path& path, const std::vector<ExtraTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + numel * 4}}};
    offset += numel * 4;
  }
  const std::string text = header.dump();
  const uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text;
  const std::vector<float> data(offset / 4, 0.5f);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(offset));
}

// A scratch copy of a fixture checkpoint; its model.safetensors becomes the first of two
// shards (no index: every *.safetensors is read), the second holding `extra`.
class CheckpointCopy {
 public:
  CheckpointCopy(const std::string& fixture, const std::vector<ExtraTensor>& extra) {
    dir_ = fs::temp_directory_path() / ("tpserve_ckuse_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(testing::FixtureDir(fixture))) {
      fs::copy(e.path(), dir_ / e.path().filename());
    }
    fs::rename(dir_ / "model.safetensors", dir_ / "model-00001-of-00002.safetensors");
    WriteSafetensors(dir_ / "model-00002-of-00002.safetensors", extra);
  }
  ~CheckpointCopy() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path path() const { return dir_; }

 private:
  fs::path dir_;
};

// Model::Load's status on every one of `tp` thread ranks.
std::vector<absl::Status> LoadOnRanks(const std::string& dir, int tp) {
  std::vector<absl::Status> status(tp);
  testing::RunThreads(tp, [&](Communicator& comm) {
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    auto source = OpenCheckpointSource(dir);
    ASSERT_TRUE(source.ok()) << source.status();
    auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
    auto model = Model::Load(*config, **source, *backend, comm, ModelOptions{});
    status[comm.rank()] = model.status();
  });
  return status;
}

TEST(CheckpointUse, UnknownTensorsFailTheLoadByName) {
  CheckpointCopy ckpt("llama3", {{"model.layers.0.self_attn.foo.weight", {2, 2}},
                                 {"model.layers.1.mlp.gate_proj.bias", {128}}});
  for (int tp : {1, 2}) {
    for (const absl::Status& st : LoadOnRanks(ckpt.dir(), tp)) {
      ASSERT_FALSE(st.ok()) << "tp " << tp;
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(Msg(st).find("loading a llama model: checkpoint " + ckpt.dir() + " has 2 tensors no layer read: "
                             "model.layers.0.self_attn.foo.weight, model.layers.1.mlp.gate_proj.bias "
                             "(a different architecture or an unsupported option?)"),
                std::string::npos)
          << st;
    }
  }
}

TEST(CheckpointUse, LongListsNameTheFirstFiveAndCountTheRest) {
  std::vector<ExtraTensor> extra;
  for (int i = 0; i < 8; ++i) extra.push_back({"model.extra_" + std::to_string(i), {1}});
  CheckpointCopy ckpt("llama3", extra);
  const absl::Status st = LoadOnRanks(ckpt.dir(), 1)[0];
  ASSERT_FALSE(st.ok());
  EXPECT_NE(Msg(st).find("has 8 tensors no layer read: model.extra_0, model.extra_1, model.extra_2, model.extra_3, "
                         "model.extra_4, ... (3 more)"),
            std::string::npos)
      << st;
}

// The bug this check exists for: attention biases present, the config saying there are
// none (or the loader forgetting o_proj's).
TEST(CheckpointUse, BiasesTheConfigDoesNotMentionAreReported) {
  CheckpointCopy ckpt("llama3_attn_bias", {});
  const fs::path config = ckpt.path() / "config.json";
  std::ifstream in(config);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  j["attention_bias"] = false;
  std::ofstream(config, std::ios::trunc) << j.dump(2);
  const absl::Status st = LoadOnRanks(ckpt.dir(), 2)[0];
  ASSERT_FALSE(st.ok());
  EXPECT_NE(Msg(st).find("has 8 tensors no layer read: model.layers.0.self_attn.k_proj.bias, "
                         "model.layers.0.self_attn.o_proj.bias, model.layers.0.self_attn.q_proj.bias"),
            std::string::npos)
      << st;
}

TEST(CheckpointUse, TowersRotaryBuffersAndTiedHeadsMaySkip) {
  for (const char* name :
       {"model.vision_tower.encoder.layers.0.mlp.fc1.weight", "vision_tower.vision_model.post_layernorm.weight",
        "model.multi_modal_projector.mm_input_projection_weight", "multi_modal_projector.mm_soft_emb_norm.weight",
        "model.audio_tower.conv.weight", "model.embed_vision.embedding_projection.weight",
        "model.embed_audio.embedding_projection.weight", "model.layers.3.self_attn.rotary_emb.inv_freq",
        "model.rotary_emb.inv_freq", "lm_head.weight", "language_model.lm_head.weight"}) {
    EXPECT_TRUE(IsIgnorableCheckpointTensor(name)) << name;
  }
  for (const char* name : {"model.layers.0.self_attn.o_proj.bias", "model.language_model.layers.0.foo.weight",
                           "model.vision_tower", "model.model.vision_tower.x", "lm_head.bias", "model.lm_head.weight",
                           "model.vision_towers.x", "model.layers.0.vision_tower.x"}) {
    EXPECT_FALSE(IsIgnorableCheckpointTensor(name)) << name;
  }
  // llama3 unties its head, so lm_head.weight is read; the extras here are all skippable.
  CheckpointCopy ckpt("llama3", {{"model.layers.0.self_attn.rotary_emb.inv_freq", {8}},
                                 {"model.audio_tower.conv.weight", {4, 4}},
                                 {"multi_modal_projector.mm_input_projection_weight", {4, 4}}});
  for (const absl::Status& st : LoadOnRanks(ckpt.dir(), 2)) EXPECT_TRUE(st.ok()) << st;
}

// gemma4_multimodal's vision tower and embedder sit beside model.language_model.
TEST(CheckpointUse, MultimodalVisionTowerIsAccepted) {
  const std::string dir = testing::FixtureDir("gemma4_multimodal");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  int towers = 0;
  for (const std::string& n : (*ckpt)->Names()) {
    towers += n.starts_with("model.vision_tower.") || n.starts_with("model.embed_vision.");
  }
  EXPECT_GT(towers, 10);
  for (int tp : {1, 2}) {
    for (const absl::Status& st : LoadOnRanks(dir, tp)) EXPECT_TRUE(st.ok()) << "tp " << tp << ": " << st;
  }
}

// Reads from several threads sharing one source all count; Has() does not.
TEST(CheckpointUse, SourceTracksReadsAcrossThreads) {
  auto src = OpenCheckpointSource(testing::FixtureDir("llama3"));
  ASSERT_TRUE(src.ok()) << src.status();
  auto ckpt = Checkpoint::Open(testing::FixtureDir("llama3"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<std::string> names = (*ckpt)->Names();
  ASSERT_GT(names.size(), 10u);
  const absl::Status before = (*src)->CheckAllUsed();
  ASSERT_FALSE(before.ok());
  // All but lm_head.weight, which a tied model would leave unread.
  EXPECT_NE(Msg(before).find("has " + std::to_string(names.size() - 1) + " tensors"), std::string::npos) << before;

  // Read all but the last tensor, one element each, split over four threads.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      float v;
      for (size_t i = t; i + 1 < names.size(); i += 4) {
        // The source's names drop the language model's prefix ("model."), lm_head's excepted.
        std::string name = names[i];
        if (name.starts_with("model.")) name = name.substr(std::strlen("model."));
        const SliceRequest r{name, (*ckpt)->Find(names[i])->shape, 0, 1, 0, 1};
        EXPECT_TRUE((*src)->Read(r, DType::kF32, &v).ok()) << names[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE((*src)->Has("norm.weight"));
  const absl::Status after = (*src)->CheckAllUsed();
  ASSERT_FALSE(after.ok());
  EXPECT_NE(Msg(after).find("has 1 tensor no layer read: " + names.back() + " ("), std::string::npos) << after;
}

// A GGUF source reports the file's tensors by their GGUF names until a load reads them;
// llama3.gguf's rope_freqs.weight feeds the config, not a layer, and is never reported.
TEST(CheckpointUse, GgufSourceReportsUnreadTensors) {
  const std::string path = std::string(TPSERVE_FIXTURES) + "/gguf/models/llama3.gguf";
  std::shared_ptr<const GgufFile> file;
  {
    auto opened = GgufFile::Open(path);
    ASSERT_TRUE(opened.ok()) << opened.status();
    file = std::move(*opened);
  }
  ASSERT_NE(file->FindTensor("rope_freqs.weight"), nullptr);
  auto config = GgufModelConfig(*file);
  ASSERT_TRUE(config.ok()) << config.status();
  auto fresh = OpenGgufSource(file);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const absl::Status before = (*fresh)->CheckAllUsed();
  ASSERT_FALSE(before.ok());
  EXPECT_NE(Msg(before).find("GGUF file " + path + " has " + std::to_string(file->tensors().size() - 1) +
                             " tensors no layer read: blk.0.attn_k.weight, "),
            std::string::npos)
      << before;
  EXPECT_EQ(Msg(before).find("rope_freqs"), std::string::npos) << before;
  testing::RunThreads(2, [&](Communicator& comm) {
    auto source = OpenGgufSource(file);
    ASSERT_TRUE(source.ok()) << source.status();
    auto backend = MakeCpuBackend(BackendOptions{.threads = 1});
    auto model = Model::Load(*config, **source, *backend, comm, ModelOptions{});
    EXPECT_TRUE(model.ok()) << model.status();
  });
}

// A float matrix whose element (r, c) is a function of r and c, for any slice.
class FormulaSource : public WeightSource {
 public:
  absl::Status Read(const SliceRequest& req, DType dtype, void* dst) const override {
    if (dtype != DType::kF32) return absl::InvalidArgumentError("fp32 only");
    ++reads_;
    float* out = static_cast<float*>(dst);
    for (int64_t r = 0; r < req.rows; ++r) {
      for (int64_t c = 0; c < req.cols; ++c) out[r * req.cols + c] = Value(req.row0 + r, req.col0 + c);
    }
    return absl::OkStatus();
  }
  bool Has(const std::string&) const override { return true; }
  std::string Describe() const override { return "formula"; }
  absl::Status CheckAllUsed(const TensorFilter&) const override { return absl::OkStatus(); }
  static float Value(int64_t r, int64_t c) { return static_cast<float>((r * 131 + c * 7) % 1999 - 999) / 97.0f; }
  mutable int reads_ = 0;
};

// --quantization reads a big matrix in bounded runs of rows (not a whole fp32 copy), and the
// blocks are those of quantizing each row whole.
TEST(CheckpointUse, QuantizeAtLoadReadsBigMatricesInRunsOfRows) {
  constexpr int64_t kRows = 1100, kCols = 4096, kRow0 = 3;  // 4.5M floats: more than one run
  for (DType target : {DType::kQ8_0, DType::kF8_E4M3}) {
    auto inner = std::make_unique<FormulaSource>();
    const FormulaSource* formula = inner.get();
    std::unique_ptr<WeightSource> q = QuantizeAtLoad(std::move(inner), target);
    const SliceRequest req{.name = "m", .shape = {kRows + kRow0, kCols}, .row0 = kRow0, .rows = kRows, .col0 = 0,
                           .cols = kCols};
    const size_t row_bytes = RowBytes(target, kCols);
    std::vector<uint8_t> got(kRows * row_bytes);
    ASSERT_TRUE(q->Read(req, target, got.data()).ok());
    EXPECT_GT(formula->reads_, 1) << DTypeName(target);
    std::vector<float> row(kCols);
    std::vector<uint8_t> want(row_bytes);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) row[c] = FormulaSource::Value(kRow0 + r, c);
      if (target == DType::kQ8_0) {
        cpu::QuantizeRowQ8_0(row.data(), kCols, want.data());
      } else {
        cpu::QuantizeRowF8E4M3(row.data(), kCols, want.data());
      }
      ASSERT_EQ(std::memcmp(want.data(), got.data() + r * row_bytes, row_bytes), 0) << DTypeName(target) << " row " << r;
    }
  }
}

TEST(CheckpointUse, DummySourceHasNothingToLeaveUnread) {
  auto c = PresetModelConfig("gemma-4-tiny");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(MakeDummySource(*c, 3)->CheckAllUsed().ok());
}

}  // namespace
}  // namespace tpserve
