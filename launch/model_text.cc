// Tokenizer and chat template resolution for --model. Tested by tests/cli_test.sh and
// tests/real_model_test.sh.
#include "launch/model_text.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "coordinator/text/builtin_chat_templates.h"
#include "coordinator/text/tokenizer_gguf.h"
#include "worker/gguf_file.h"
#include "worker/gguf_model.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

// The template variables transformers passes (bos_token, eos_token, ...), named by the
// file's special token ids.
nlohmann::ordered_json GgufSpecialTokens(const GgufFile& file, const Tokenizer& tokenizer) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  for (const auto& [key, name] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                                  {"tokenizer.ggml.eos_token_id", "eos_token"},
                                  {"tokenizer.ggml.unknown_token_id", "unk_token"},
                                  {"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    const nlohmann::json* id = file.Find(key);
    if (id == nullptr || !id->is_number_integer()) continue;
    const std::string token = tokenizer.IdToToken(id->get<int32_t>());
    if (!token.empty()) tokens[name] = token;
  }
  return tokens;
}

absl::StatusOr<ModelText> FromGguf(const GgufFile& file, bool with_chat) {
  const std::string& path = file.path();
  ModelText text;
  TP_ASSIGN_OR_RETURN(text.tokenizer, TokenizerFromGguf(file));
  text.source = absl::StrCat(path, " (GGUF metadata)");
  if (!with_chat) return text;
  TP_ASSIGN_OR_RETURN(std::optional<std::string> own, GgufChatTemplate(file.metadata(), path));
  std::string name = absl::StrCat(path, ": tokenizer.chat_template");
  if (!own.has_value()) {
    TP_ASSIGN_OR_RETURN(std::string arch, file.Architecture());
    own = BuiltinChatTemplate(arch);
    name = absl::StrCat("the built-in ", arch, " chat template");
  }
  if (!own.has_value()) {
    text.chat_status = absl::NotFoundError(absl::StrCat(path, " has no tokenizer.chat_template"));
    return text;
  }
  auto chat = MakeChatTemplate(*own, name, GgufSpecialTokens(file, *text.tokenizer));
  if (chat.ok()) {
    text.chat = std::make_unique<ModelChatTemplate>(std::move(*chat));
  } else {
    text.chat_status = chat.status();
  }
  return text;
}

}  // namespace

bool ModelHasTokenizer(const std::string& model) {
  std::error_code ec;
  return IsGgufModelPath(model) || fs::exists(fs::path(model) / "tokenizer.json", ec);
}

absl::StatusOr<ModelText> LoadModelText(const std::string& model, const std::string& tokenizer_path, bool with_chat,
                                        const GgufFile* gguf) {
  if (tokenizer_path.empty() && (gguf != nullptr || IsGgufModelPath(model))) {
    if (gguf != nullptr) return FromGguf(*gguf, with_chat);
    TP_ASSIGN_OR_RETURN(std::string path, FindGgufFile(model));
    TP_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
    return FromGguf(*file, with_chat);
  }
  const std::string path = tokenizer_path.empty() ? (fs::path(model) / "tokenizer.json").string() : tokenizer_path;
  ModelText text;
  TP_ASSIGN_OR_RETURN(text.tokenizer, Tokenizer::FromFile(path));
  text.source = path;
  if (!with_chat) return text;
  const std::string dir = fs::path(path).parent_path().string();
  auto chat = LoadChatTemplate(dir.empty() ? "." : dir);
  if (chat.ok()) {
    text.chat = std::make_unique<ModelChatTemplate>(std::move(*chat));
  } else {
    text.chat_status = chat.status();
  }
  return text;
}

absl::StatusOr<GenerationDefaults> LoadModelGenerationDefaults(const std::string& generation_config,
                                                               const std::string& model, const GgufFile* gguf) {
  TP_ASSIGN_OR_RETURN(GenerationDefaults defaults, LoadGenerationDefaults(generation_config, model));
  if (generation_config != "auto" || !defaults.empty() || (gguf == nullptr && !IsGgufModelPath(model))) {
    return defaults;
  }
  std::unique_ptr<GgufFile> opened;
  if (gguf == nullptr) {
    TP_ASSIGN_OR_RETURN(std::string path, FindGgufFile(model));
    TP_ASSIGN_OR_RETURN(opened, GgufFile::Open(path));
    gguf = opened.get();
  }
  const std::string& path = gguf->path();
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& [key, field] : {std::pair{"general.sampling.temp", "temperature"},
                                   {"general.sampling.top_k", "top_k"},
                                   {"general.sampling.top_p", "top_p"},
                                   {"general.sampling.min_p", "min_p"},
                                   {"general.sampling.penalty_repeat", "repetition_penalty"}}) {
    if (const nlohmann::json* v = gguf->Find(key)) fields[field] = *v;
  }
  if (fields.empty()) return defaults;
  return GenerationDefaultsFromJson(fields, absl::StrCat(path, ": general.sampling.*"));
}

}  // namespace tpserve
