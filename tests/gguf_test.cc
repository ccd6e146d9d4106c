// The GGUF container (worker/gguf_file.h) and GGUF model config (worker/gguf_model.h) on the
// fixtures of tools/make_gguf_model_fixtures.py, and the errors a damaged or foreign file gets.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "worker/gguf_file.h"
#include "worker/gguf_model.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(TPSERVE_FIXTURES) / "gguf" / "models";

std::string ReadBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/gguf_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / name, std::ios::binary) << bytes;
    return path_ / name;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(GgufFileTest, ReadsMetadataAndTensors) {
  auto f = GgufFile::Open((kModels / "qwen2.gguf").string());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ(*(*f)->Architecture(), "qwen2");
  EXPECT_EQ(*(*f)->GetInt("qwen2.block_count"), 4);
  EXPECT_FALSE((*f)->GetString("qwen2.block_count").ok());
  EXPECT_TRUE(absl::IsNotFound((*f)->GetInt("qwen2.no_such_key").status()));
  ASSERT_NE((*f)->Find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_TRUE((*f)->Find("tokenizer.ggml.tokens")->is_array());
  const GgufTensor* embed = (*f)->FindTensor("token_embd.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->type, GgmlType::kF16);  // the qwen2 fixture is float16 on disk
  ASSERT_EQ(embed->ne.size(), 2u);
  EXPECT_EQ(embed->nbytes, static_cast<size_t>(embed->ne[0] * embed->ne[1] * 2));
  EXPECT_EQ(embed->row_bytes(), static_cast<size_t>(embed->ne[0] * 2));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(embed->data) % (*f)->alignment(), 0u);
}

// Arrays longer than held_array_elements are checked on open and read when asked, not held:
// the same values, the same tokenizer, and a damaged one is still an error on open.
TEST(GgufFileTest, LongArraysAreReadWhenAsked) {
  const std::string path = (kModels / "qwen2.gguf").string();
  auto held = GgufFile::Open(path);
  auto lazy = GgufFile::Open(path, GgufOpenOptions{.held_array_elements = 8});
  ASSERT_TRUE(held.ok() && lazy.ok()) << held.status() << lazy.status();
  const nlohmann::json* tokens = (*held)->Find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_GT(tokens->size(), 8u);
  EXPECT_EQ((*lazy)->Find("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ((*lazy)->metadata().count("tokenizer.ggml.tokens"), 0u);
  auto read = (*lazy)->ReadArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, *tokens);
  EXPECT_EQ(**(*held)->ReadArray("tokenizer.ggml.tokens"), *tokens);  // held ones too
  EXPECT_FALSE((*lazy)->ReadArray("no.such.key")->has_value());
  auto all = (*lazy)->MetadataWithLargeArrays();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, (*held)->metadata());
  EXPECT_EQ(*(*lazy)->GetInt("qwen2.block_count"), 4);  // scalars are held

  // Cut inside the tokens array: an error on open, held or not.
  const std::string good = ReadBytes(kModels / "qwen2.gguf");
  const size_t in_tokens = good.find("tokenizer.ggml.tokens") + 200;
  TempDir dir;
  const fs::path cut = dir.Write("cut.gguf", good.substr(0, in_tokens));
  for (uint64_t limit : {uint64_t{8}, uint64_t{1} << 20}) {
    auto f = GgufFile::Open(cut.string(), GgufOpenOptions{.held_array_elements = limit});
    ASSERT_FALSE(f.ok()) << limit;
    EXPECT_TRUE(absl::StrContains(f.status().message(), "truncated or corrupt")) << f.status();
    EXPECT_TRUE(absl::StrContains(f.status().message(), "cut.gguf")) << f.status();
  }
}

TEST(GgufFileTest, DamagedFilesAreErrorsNamingTheFile) {
  const std::string good = ReadBytes(kModels / "qwen2.gguf");
  TempDir dir;
  struct Case {
    std::string name, bytes, expect;
  };
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  std::string big_endian = good;
  std::memcpy(&big_endian[4], "\0\0\0\3", 4);
  std::string future = good;
  future[4] = 9;
  const Case cases[] = {
      {"empty.gguf", "", "not a GGUF file"},
      {"magic.gguf", bad_magic, "no \"GGUF\" magic"},
      {"be.gguf", big_endian, "big-endian"},
      {"v9.gguf", future, "version 9 is not supported"},
      {"header.gguf", good.substr(0, 200), "truncated or corrupt"},
      {"data.gguf", good.substr(0, good.size() - 100), "lies outside the file"},
  };
  for (const Case& c : cases) {
    auto f = GgufFile::Open(dir.Write(c.name, c.bytes).string());
    ASSERT_FALSE(f.ok()) << c.name;
    EXPECT_TRUE(absl::StrContains(f.status().message(), c.expect)) << c.name << ": " << f.status();
    EXPECT_TRUE(absl::StrContains(f.status().message(), c.name)) << f.status();
  }
  EXPECT_TRUE(absl::IsNotFound(GgufFile::Open((dir.path() / "absent.gguf").string()).status()));
}

TEST(GgufFileTest, FindGgufFileInADirectory) {
  TempDir dir;
  EXPECT_TRUE(absl::IsNotFound(FindGgufFile(dir.path().string()).status()));
  EXPECT_FALSE(IsGgufModelPath(dir.path().string()));
  const fs::path one = dir.Write("a.gguf", "x");
  EXPECT_EQ(*FindGgufFile(dir.path().string()), one.string());
  EXPECT_TRUE(IsGgufModelPath(dir.path().string()));
  EXPECT_TRUE(IsGgufModelPath(one.string()));
  dir.Write("b.gguf", "x");
  auto two = FindGgufFile(dir.path().string());
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(absl::StrContains(two.status().message(), "--model FILE.gguf")) << two.status();
  // A Hugging Face directory (config.json) is a safetensors checkpoint even beside a .gguf.
  dir.Write("config.json", "{}");
  EXPECT_FALSE(IsGgufModelPath(dir.path().string()));
}

// The config read off the metadata equals the safetensors fixture's for the same model, in
// every field the engine reads.
TEST(GgufModelTest, ConfigMatchesTheCheckpoints) {
  // GGUF fixture -> the safetensors fixture it was made from.
  const std::pair<std::string, std::string> kFixtures[] = {
      {"llama3", "llama3"}, {"qwen2", "qwen2"}, {"qwen3", "qwen3"}, {"gemma4", "gemma4_text"}};
  for (const auto& [name, dir] : kFixtures) {
    auto f = GgufFile::Open((kModels / (name + ".gguf")).string());
    ASSERT_TRUE(f.ok()) << f.status();
    auto from_gguf = GgufModelConfig(**f);
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
    auto from_json = LoadModelConfig((fs::path(TPSERVE_FIXTURES) / "models" / dir).string());
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    const ModelConfig& g = *from_gguf;
    const ModelConfig& j = *from_json;
    EXPECT_EQ(g.arch, j.arch) << name;
    EXPECT_EQ(g.model_type, j.model_type) << name;
    EXPECT_EQ(g.vocab_size, j.vocab_size) << name;
    EXPECT_EQ(g.hidden_size, j.hidden_size) << name;
    EXPECT_EQ(g.intermediate_size, j.intermediate_size) << name;
    EXPECT_EQ(g.num_layers, j.num_layers) << name;
    EXPECT_EQ(g.num_heads, j.num_heads) << name;
    EXPECT_FLOAT_EQ(g.rms_norm_eps, j.rms_norm_eps) << name;
    EXPECT_EQ(g.max_position_embeddings, j.max_position_embeddings) << name;
    EXPECT_EQ(g.norm_kind, j.norm_kind) << name;
    EXPECT_EQ(g.activation, j.activation) << name;
    EXPECT_EQ(g.tie_word_embeddings, j.tie_word_embeddings) << name;
    EXPECT_EQ(g.qkv_bias, j.qkv_bias) << name;
    EXPECT_EQ(g.o_proj_bias, j.o_proj_bias) << name;
    EXPECT_EQ(g.qk_norm, j.qk_norm) << name;
    EXPECT_EQ(g.v_norm, j.v_norm) << name;
    EXPECT_EQ(g.sandwich_norms, j.sandwich_norms) << name;
    EXPECT_EQ(g.layer_scalar, j.layer_scalar) << name;
    EXPECT_EQ(g.embed_scale, j.embed_scale) << name;
    EXPECT_EQ(g.attn_scale, j.attn_scale) << name;
    EXPECT_EQ(g.attn_softcap, j.attn_softcap) << name;
    EXPECT_EQ(g.final_softcap, j.final_softcap) << name;
    EXPECT_EQ(g.kv_group_windows, j.kv_group_windows) << name;
    EXPECT_EQ(g.torch_dtype, j.torch_dtype) << name;
    EXPECT_EQ(g.bos_token_id, j.bos_token_id) << name;
    EXPECT_EQ(g.eos_token_ids, j.eos_token_ids) << name;
    ASSERT_EQ(g.layers.size(), j.layers.size());
    for (size_t i = 0; i < g.layers.size(); ++i) {
      const LayerConfig& gl = g.layers[i];
      const LayerConfig& jl = j.layers[i];
      EXPECT_EQ(gl.sliding, jl.sliding) << name << " " << i;
      EXPECT_EQ(gl.sliding_window, jl.sliding_window) << name << " " << i;
      EXPECT_EQ(gl.head_dim, jl.head_dim) << name << " " << i;
      EXPECT_EQ(gl.num_kv_heads, jl.num_kv_heads) << name << " " << i;
      EXPECT_EQ(gl.k_eq_v, jl.k_eq_v) << name << " " << i;
      EXPECT_EQ(gl.kv_group, jl.kv_group) << name << " " << i;
      // The rotary frequencies, all the engine takes from a layer's RoPE: Llama 3's scaling
      // comes back from rope_freqs.weight as the same frequencies, Gemma 4's partial rotation
      // from it as the same zeros.
      const std::vector<float> a = RopeInvFreq(gl.rope, gl.head_dim);
      const std::vector<float> b = RopeInvFreq(jl.rope, jl.head_dim);
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-6 * std::abs(b[k])) << name << " " << k;
    }
  }
}

// A copy of the gemma4 fixture with the bytes `from` (e.g. a metadata key or a tensor name, once
// in the file) replaced by `to`, of the same length.
std::string Gemma4With(const std::string& from, const std::string& to) {
  std::string bytes = ReadBytes(kModels / "gemma4.gguf");
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(bytes.find(from, at + 1), std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

// What the engine needs from a Gemma 4 file and cannot default is an error naming the key or
// tensor; so are the other Gemma 4 models' features.
TEST(GgufModelTest, Gemma4MissingOrUnsupportedMetadataIsNamed) {
  struct Case {
    std::string from, to, expect;
  };
  std::string per_layer_embeddings = "gemma4.embedding_length_per_layer_input";
  // The value follows the key: its type (uint32) then 0, made 256 here.
  per_layer_embeddings += std::string("\x04\0\0\0\0\0\0\0", 8);
  std::string ple_256 = per_layer_embeddings;
  ple_256[ple_256.size() - 3] = 1;
  const Case cases[] = {
      {"gemma4.attention.key_length_swa", "gemma4.attention.key_length_swX",
       "metadata \"gemma4.attention.key_length_swa\" is missing"},
      {"gemma4.attention.sliding_window_pattern", "gemma4.attention.sliding_window_patterX",
       "metadata \"gemma4.attention.sliding_window_pattern\" is missing"},
      {"gemma4.attention.layer_norm_rms_epsilon", "gemma4.attention.layer_norm_rms_epsiloX",
       "metadata \"gemma4.attention.layer_norm_rms_epsilon\" is missing"},
      {"rope_freqs.weight", "rope_freqX.weight", "tensor \"rope_freqs.weight\" is missing"},
      {per_layer_embeddings, ple_256,
       "metadata \"gemma4.embedding_length_per_layer_input\" is 256: per-layer input embeddings"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    auto f = GgufFile::Open(dir.Write("m.gguf", Gemma4With(c.from, c.to)).string());
    ASSERT_TRUE(f.ok()) << f.status();
    auto config = GgufModelConfig(**f);
    ASSERT_FALSE(config.ok()) << c.expect;
    EXPECT_TRUE(absl::StrContains(config.status().message(), c.expect)) << config.status();
    EXPECT_TRUE(absl::StrContains(config.status().message(), "m.gguf")) << config.status();
  }
}

TEST(GgufModelTest, UnsupportedArchitectureIsNamed) {
  std::string bytes = ReadBytes(kModels / "qwen2.gguf");
  // "qwen2" -> "qwen9" in general.architecture's value (the first "qwen2" string after the key).
  const size_t key = bytes.find("general.architecture");
  ASSERT_NE(key, std::string::npos);
  const size_t value = bytes.find("qwen2", key);
  bytes[value + 4] = '9';
  TempDir dir;
  auto f = GgufFile::Open(dir.Write("m.gguf", bytes).string());
  ASSERT_TRUE(f.ok()) << f.status();
  auto c = GgufModelConfig(**f);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(absl::StrContains(c.status().message(), "\"qwen9\" is not supported")) << c.status();
}

}  // namespace
}  // namespace tpserve
