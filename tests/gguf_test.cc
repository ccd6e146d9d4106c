// The GGUF container (worker/gguf_file.h) and GGUF model config (worker/gguf_model.h) on the
// fixtures of tools/make_gguf_model_fixtures.py, and the errors a damaged or foreign file gets.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

// The config read off the metadata equals the safetensors fixture's for the same model.
TEST(GgufModelTest, ConfigMatchesTheCheckpoints) {
  for (const char* name : {"llama3", "qwen2", "qwen3"}) {
    auto f = GgufFile::Open((kModels / (std::string(name) + ".gguf")).string());
    ASSERT_TRUE(f.ok()) << f.status();
    auto from_gguf = GgufModelConfig(**f);
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
    auto from_json = LoadModelConfig((fs::path(TPSERVE_FIXTURES) / "models" / name).string());
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    EXPECT_EQ(from_gguf->arch, from_json->arch) << name;
    EXPECT_EQ(from_gguf->vocab_size, from_json->vocab_size) << name;
    EXPECT_EQ(from_gguf->hidden_size, from_json->hidden_size) << name;
    EXPECT_EQ(from_gguf->num_layers, from_json->num_layers) << name;
    EXPECT_EQ(from_gguf->qkv_bias, from_json->qkv_bias) << name;
    EXPECT_EQ(from_gguf->tie_word_embeddings, from_json->tie_word_embeddings) << name;
    EXPECT_FLOAT_EQ(from_gguf->rms_norm_eps, from_json->rms_norm_eps) << name;
    ASSERT_EQ(from_gguf->layers.size(), from_json->layers.size());
    for (size_t i = 0; i < from_gguf->layers.size(); ++i) {
      EXPECT_EQ(from_gguf->layers[i].head_dim, from_json->layers[i].head_dim) << name;
      EXPECT_EQ(from_gguf->layers[i].num_kv_heads, from_json->layers[i].num_kv_heads) << name;
      // Llama 3's rope scaling comes back from rope_freqs.weight as the same frequencies.
      const std::vector<float> a = RopeInvFreq(from_gguf->layers[i].rope, from_gguf->layers[i].head_dim);
      const std::vector<float> b = RopeInvFreq(from_json->layers[i].rope, from_json->layers[i].head_dim);
      ASSERT_EQ(a.size(), b.size());
      for (size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6 * std::abs(b[j])) << name << " " << j;
    }
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
