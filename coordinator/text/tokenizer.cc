// Tokenizer: loads the tokenizer.json pipeline and runs added-token splitting,
// normalizer, pre-tokenizer, BPE and post-processor. Tested by tests/tokenizer_test.cc.
#include "coordinator/text/tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/text/tokenizer_added_vocabulary.h"
#include "coordinator/text/tokenizer_bpe.h"
#include "coordinator/text/tokenizer_decoder.h"
#include "coordinator/text/tokenizer_json.h"
#include "coordinator/text/tokenizer_normalizer.h"
#include "coordinator/text/tokenizer_post_processor.h"
#include "coordinator/text/tokenizer_pre_tokenizer.h"
#include "coordinator/text/tokenizer_text_bound.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

using tokenizer_internal::AddedToken;
using tokenizer_internal::Json;
using tokenizer_internal::JsonPath;

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", what, " \"", path, "\": ", std::strerror(errno)));
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", what, " \"", path, "\""));
  return buffer.str();
}

absl::StatusOr<Json> ParseJson(std::string_view text, const std::string& source) {
  Json j;
  try {  // nlohmann reports the position of a syntax error only through its exception
    j = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", e.what()));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object at the top level"));
  }
  return j;
}

// The parsers check the type of every field they read; this turns a type error one of
// them missed into a status rather than an exception leaving the library.
template <typename Load>
absl::Status CatchJsonErrors(const std::string& source, Load load) {
  try {
    return load();
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unexpected JSON structure: ", e.what()));
  }
}

absl::StatusOr<AddedToken> ParseAddedToken(const Json& j, int64_t id, const JsonPath& at) {
  AddedToken token;
  token.id = static_cast<int32_t>(id);
  TP_ASSIGN_OR_RETURN(token.content, tokenizer_internal::RequireString(j, "content", at));
  TP_ASSIGN_OR_RETURN(token.single_word, tokenizer_internal::BoolOr(j, "single_word", false, at));
  TP_ASSIGN_OR_RETURN(token.lstrip, tokenizer_internal::BoolOr(j, "lstrip", false, at));
  TP_ASSIGN_OR_RETURN(token.rstrip, tokenizer_internal::BoolOr(j, "rstrip", false, at));
  TP_ASSIGN_OR_RETURN(token.special, tokenizer_internal::BoolOr(j, "special", false, at));
  TP_ASSIGN_OR_RETURN(token.normalized,
                      tokenizer_internal::BoolOr(j, "normalized", !token.special, at));
  return token;
}

// bos_token/eos_token: "<s>", {"content": "<s>", ...} or null.
absl::StatusOr<std::optional<std::string>> TokenName(const Json& config, std::string_view key,
                                                     const JsonPath& at) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    TP_ASSIGN_OR_RETURN(std::string content,
                        tokenizer_internal::RequireString(*it, "content", at.Field(key)));
    return content;
  }
  return at.Field(key).Error(absl::StrCat("expected a token string, got ", it->dump()));
}

}  // namespace

Tokenizer::Tokenizer() : added_(std::make_unique<tokenizer_internal::AddedVocabulary>()) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(
    const std::string& tokenizer_json_path) {
  TP_ASSIGN_OR_RETURN(const std::string json, ReadFile(tokenizer_json_path, "tokenizer file"));
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  TP_RETURN_IF_ERROR(CatchJsonErrors(tokenizer_json_path, [&] {
    return tokenizer->LoadTokenizerJson(json, tokenizer_json_path, nullptr);
  }));
  const std::filesystem::path dir = std::filesystem::path(tokenizer_json_path).parent_path();
  const std::string config_path = (dir / "tokenizer_config.json").string();
  if (std::filesystem::exists(config_path)) {
    TP_ASSIGN_OR_RETURN(const std::string config, ReadFile(config_path, "tokenizer config"));
    TP_RETURN_IF_ERROR(CatchJsonErrors(
        config_path, [&] { return tokenizer->LoadTokenizerConfig(config, config_path); }));
  }
  const std::string generation_path = (dir / "generation_config.json").string();
  if (std::filesystem::exists(generation_path)) {
    TP_ASSIGN_OR_RETURN(const std::string generation,
                        ReadFile(generation_path, "generation config"));
    TP_RETURN_IF_ERROR(CatchJsonErrors(generation_path, [&] {
      return tokenizer->LoadGenerationConfig(generation, generation_path);
    }));
  }
  tokenizer->added_->Build(tokenizer->normalizer_.get());
  tokenizer->FinishTextBound();
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view json, std::string_view source_name, std::string_view tokenizer_config_json,
    std::string_view generation_config_json) {
  return Build(json, source_name, tokenizer_config_json, generation_config_json, nullptr);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonWithVocabulary(
    std::string_view json, std::string_view source_name, std::string_view tokenizer_config_json,
    std::string_view generation_config_json, tokenizer_internal::BpeVocabulary vocabulary) {
  return Build(json, source_name, tokenizer_config_json, generation_config_json, &vocabulary);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Build(
    std::string_view json, std::string_view source_name, std::string_view tokenizer_config_json,
    std::string_view generation_config_json, tokenizer_internal::BpeVocabulary* vocabulary) {
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  const std::string source(source_name);
  TP_RETURN_IF_ERROR(CatchJsonErrors(
      source, [&] { return tokenizer->LoadTokenizerJson(json, source, vocabulary); }));
  if (!tokenizer_config_json.empty()) {
    TP_RETURN_IF_ERROR(CatchJsonErrors("tokenizer_config.json", [&] {
      return tokenizer->LoadTokenizerConfig(tokenizer_config_json, "tokenizer_config.json");
    }));
  }
  if (!generation_config_json.empty()) {
    TP_RETURN_IF_ERROR(CatchJsonErrors("generation_config.json", [&] {
      return tokenizer->LoadGenerationConfig(generation_config_json, "generation_config.json");
    }));
  }
  tokenizer->added_->Build(tokenizer->normalizer_.get());
  tokenizer->FinishTextBound();
  return tokenizer;
}

absl::Status Tokenizer::LoadTokenizerJson(std::string_view json, const std::string& source,
                                          tokenizer_internal::BpeVocabulary* vocabulary) {
  TP_ASSIGN_OR_RETURN(const Json root, ParseJson(json, source));
  const JsonPath top(source, "");
  const auto section = [&root](std::string_view key) -> const Json* {
    const auto it = root.find(key);
    return (it == root.end() || it->is_null()) ? nullptr : &*it;
  };
  const Json* model = section("model");
  if (model == nullptr) {
    return top.Error("missing \"model\" section; is this a Hugging Face tokenizer.json?");
  }
  if (vocabulary != nullptr) {
    TP_ASSIGN_OR_RETURN(model_, tokenizer_internal::BpeModel::FromVocabulary(
                                    *model, top.Field("model"), std::move(*vocabulary)));
  } else {
    TP_ASSIGN_OR_RETURN(model_, tokenizer_internal::BpeModel::FromJson(*model, top.Field("model")));
  }
  if (const Json* n = section("normalizer")) {
    TP_ASSIGN_OR_RETURN(normalizer_,
                        tokenizer_internal::ParseNormalizer(*n, top.Field("normalizer")));
  }
  if (const Json* p = section("pre_tokenizer")) {
    TP_ASSIGN_OR_RETURN(pre_tokenizer_,
                        tokenizer_internal::ParsePreTokenizer(*p, top.Field("pre_tokenizer")));
  }
  if (const Json* p = section("post_processor")) {
    TP_ASSIGN_OR_RETURN(post_processor_,
                        tokenizer_internal::ParsePostProcessor(*p, top.Field("post_processor")));
    bos_id_ = post_processor_->LeadingId();
  }
  if (const Json* d = section("decoder")) {
    TP_ASSIGN_OR_RETURN(decoder_, tokenizer_internal::ParseDecoder(*d, top.Field("decoder")));
  }
  normalizer_shrink_factor_ = tokenizer_internal::NormalizerShrinkFactor(section("normalizer"));
  if (tokenizer_internal::PreTokenizerDropsText(section("pre_tokenizer"))) normalizer_shrink_factor_.reset();
  vocab_size_ = model_->max_id() + 1;
  if (const Json* added = section("added_tokens")) {
    const JsonPath at = top.Field("added_tokens");
    if (!added->is_array()) return at.Error("expected an array");
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& entry = (*added)[i];
      if (!entry.is_object()) return at.Index(i).Error("expected an object");
      TP_ASSIGN_OR_RETURN(const int64_t id,
                          tokenizer_internal::RequireIndex(entry, "id", at.Index(i)));
      TP_ASSIGN_OR_RETURN(AddedToken token, ParseAddedToken(entry, id, at.Index(i)));
      // As in the tokenizers library, a token the model already has keeps its model id.
      if (const auto model_id = model_->TokenToId(token.content)) token.id = *model_id;
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      if (token.special) special_contents_.insert(token.content);
      added_->Add(std::move(token));
    }
  }
  return absl::OkStatus();
}

int64_t Tokenizer::NonWhitespaceBytes(std::string_view text) {
  int64_t bytes = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[pos]);
    if (lead < 0x80) {  // the common case, without decoding
      bytes += !(lead == ' ' || (lead >= '\t' && lead <= '\r') || (lead >= 0x1C && lead <= 0x1F));
      ++pos;
      continue;
    }
    const size_t len = tokenizer_internal::Utf8SeqLen(lead);
    bool valid = len > 1 && pos + len <= text.size();
    for (size_t i = 1; valid && i < len; ++i) valid = (static_cast<unsigned char>(text[pos + i]) & 0xC0) == 0x80;
    if (!valid) {  // Encode reads it as U+FFFD: count it as text
      ++bytes;
      ++pos;
      continue;
    }
    size_t next = 0;
    const char32_t c = tokenizer_internal::NextCodePoint(text.substr(pos, len), &next);
    if (!tokenizer_internal::IsWhiteSpace(c)) bytes += static_cast<int64_t>(len);
    pos += len;
  }
  return bytes;
}

void Tokenizer::FinishTextBound() {
  max_text_bytes_per_token_.reset();
  if (!normalizer_shrink_factor_ || model_->fuses_unknown_runs()) return;
  int64_t longest = std::max<int64_t>(4, model_->max_token_bytes());
  for (const AddedToken& token : added_->tokens()) {
    longest = std::max(longest, static_cast<int64_t>(token.content.size()));
  }
  max_text_bytes_per_token_ = longest * *normalizer_shrink_factor_;
}

absl::Status Tokenizer::LoadTokenizerConfig(std::string_view json, const std::string& source) {
  TP_ASSIGN_OR_RETURN(const Json config, ParseJson(json, source));
  const JsonPath top(source, "");
  if (const auto it = config.find("added_tokens_decoder"); it != config.end() && it->is_object()) {
    for (const auto& [key, entry] : it->items()) {
      const JsonPath at = top.Field("added_tokens_decoder").Field(key);
      int64_t id = -1;
      if (!absl::SimpleAtoi(key, &id) || id < 0 || id > INT32_MAX)
        return at.Error("the key must be a token id");
      if (!entry.is_object()) return at.Error("expected an object");
      TP_ASSIGN_OR_RETURN(AddedToken token, ParseAddedToken(entry, id, at));
      if (TokenToId(token.content).has_value()) continue;  // tokenizer.json already has it
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      if (token.special) special_contents_.insert(token.content);
      added_->Add(std::move(token));
    }
  }
  const auto resolve = [&](std::string_view key) -> absl::StatusOr<std::optional<int32_t>> {
    TP_ASSIGN_OR_RETURN(const auto name, TokenName(config, key, top));
    if (!name) return std::nullopt;
    const auto id = TokenToId(*name);
    if (!id)
      return top.Field(key).Error(absl::StrCat("\"", *name, "\" is not a token of the tokenizer"));
    return id;
  };
  TP_ASSIGN_OR_RETURN(const auto bos, resolve("bos_token"));
  TP_ASSIGN_OR_RETURN(const auto eos, resolve("eos_token"));
  if (bos) bos_id_ = bos;
  if (eos) AddEosId(*eos);
  // transformers rebuilds the post-processor as [bos] $A [eos] when either flag is set.
  if (config.contains("add_bos_token") || config.contains("add_eos_token")) {
    TP_ASSIGN_OR_RETURN(const bool add_bos,
                        tokenizer_internal::BoolOr(config, "add_bos_token", false, top));
    TP_ASSIGN_OR_RETURN(const bool add_eos,
                        tokenizer_internal::BoolOr(config, "add_eos_token", false, top));
    std::vector<int32_t> prefix;
    std::vector<int32_t> suffix;
    if (add_bos && bos) prefix.push_back(*bos);
    if (add_eos && eos) suffix.push_back(*eos);
    post_processor_ = tokenizer_internal::MakeWrapProcessor(std::move(prefix), std::move(suffix));
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadGenerationConfig(std::string_view json, const std::string& source) {
  TP_ASSIGN_OR_RETURN(const Json config, ParseJson(json, source));
  const JsonPath at = JsonPath(source, "").Field("eos_token_id");
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  const Json list = it->is_array() ? *it : Json::array({*it});
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size_) {
      return at.Error(absl::StrCat("expected token ids below ", vocab_size_, ", got ", it->dump()));
    }
    AddEosId(static_cast<int32_t>(id.get<int64_t>()));
  }
  return absl::OkStatus();
}

void Tokenizer::AddEosId(int32_t id) {
  if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  using tokenizer_internal::PreToken;
  using tokenizer_internal::TextSpan;
  const std::string input = tokenizer_internal::IsValidUtf8(text)
                                ? std::string(text)
                                : tokenizer_internal::Utf8Lossy(text);
  std::vector<int32_t> ids;
  std::vector<PreToken> pieces;
  for (const TextSpan& span : added_->SplitRaw(input)) {
    if (span.token_id >= 0) {
      ids.push_back(span.token_id);
      continue;
    }
    if (span.begin == span.end) continue;
    std::string chunk = input.substr(span.begin, span.end - span.begin);
    if (normalizer_ != nullptr) normalizer_->Normalize(&chunk);
    for (const TextSpan& part : added_->SplitNormalized(chunk)) {
      if (part.token_id >= 0) {
        ids.push_back(part.token_id);
        continue;
      }
      if (part.begin == part.end) continue;
      pieces.clear();
      pieces.push_back(
          {chunk.substr(part.begin, part.end - part.begin), span.begin == 0 && part.begin == 0});
      if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces);
      for (const PreToken& piece : pieces) model_->Tokenize(piece.text, &ids);
    }
  }
  if (post_processor_ != nullptr) post_processor_->Process(&ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    std::optional<absl::string_view> token;
    if (const AddedToken* added = added_->FindById(id)) {
      token = added_->DecodeString(*added);
    } else {
      token = model_->IdToToken(id);
    }
    if (!token) continue;
    if (skip_special_tokens && special_contents_.contains(*token)) continue;
    tokens.emplace_back(*token);
  }
  if (decoder_ == nullptr) return absl::StrJoin(tokens, " ");
  decoder_->DecodeChain(&tokens);
  return absl::StrJoin(tokens, "");
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const auto id = added_->FindByContent(token)) return id;
  return model_->TokenToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* added = added_->FindById(id)) return added_->DecodeString(*added);
  const std::optional<absl::string_view> token = model_->IdToToken(id);
  return token ? std::string(*token) : std::string();
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_->FindById(id);
  return added != nullptr && added->special;
}

}  // namespace tpserve
