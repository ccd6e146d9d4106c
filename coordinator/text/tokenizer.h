// A Hugging Face tokenizer.json tokenizer for BPE models: SentencePiece-style with
// byte fallback (Gemma, Llama 2) and byte-level (Llama 3, Qwen, GPT-2). Tested by
// tests/tokenizer_test.cc against references made with the Python `tokenizers` library.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tpserve {

namespace tokenizer_internal {
class AddedVocabulary;
class BpeModel;
struct BpeVocabulary;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;
}  // namespace tokenizer_internal

// Encodes and decodes exactly as the `tokenizers` library does for the components it
// supports (see the parse functions in coordinator/tokenizer_*.h); loading a file with
// any other component fails with an error naming it. Thread-safe: all methods are const.
class Tokenizer {
 public:
  // Loads tokenizer.json and, when present in the same directory, tokenizer_config.json
  // (bos_token, eos_token, add_bos_token, add_eos_token, added_tokens_decoder) and
  // generation_config.json (eos_token_id, added to eos_ids()). Errors name the file and
  // the field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(
      const std::string& tokenizer_json_path);
  // `source_name` prefixes error messages. `tokenizer_config_json` and
  // `generation_config_json`, when not empty, are the texts of the matching
  // tokenizer_config.json and generation_config.json (read as FromFile reads the files).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view json, std::string_view source_name,
      std::string_view tokenizer_config_json = {}, std::string_view generation_config_json = {});
  // As FromJson, but the BPE model's vocabulary and merges come as `vocabulary` instead of
  // the JSON's model.vocab and model.merges (which must be absent; the model's other
  // fields apply): a 262k-token vocabulary with 500k merges loads in a fraction of the time
  // its JSON text takes to parse. How coordinator/text/tokenizer_gguf.h builds tokenizers.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJsonWithVocabulary(
      std::string_view json, std::string_view source_name, std::string_view tokenizer_config_json,
      std::string_view generation_config_json, tokenizer_internal::BpeVocabulary vocabulary);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // As tokenizers' encode(text, add_special_tokens). Added tokens in `text` (special or
  // not) are recognised. With add_special_tokens the post-processor runs (e.g. adds
  // BOS); if tokenizer_config.json sets add_bos_token or add_eos_token, that choice
  // replaces the post-processor, as transformers does. Invalid UTF-8 in `text` is
  // read as U+FFFD.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;
  // As tokenizers' decode(ids, skip_special_tokens). Unknown ids are skipped. The
  // result is valid UTF-8 (incomplete byte sequences decode to U+FFFD).
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const;

  // One more than the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string ("" for an unknown id).
  std::string IdToToken(int32_t id) const;
  std::optional<int32_t> bos_id() const { return bos_id_; }
  // Ids that end generation: tokenizer_config.json's eos_token, then
  // generation_config.json's eos_token_id, without repeats. A GGUF file has no
  // generation_config.json: TokenizerFromGguf (tokenizer_gguf.h) writes the equivalent text,
  // listing the end-of-turn tokens llama.cpp also stops at (Gemma's <end_of_turn>, ...).
  std::vector<int32_t> eos_ids() const { return eos_ids_; }
  // True for added tokens marked special (skipped by Decode(ids, true)).
  bool IsSpecial(int32_t id) const;

  // At most how many bytes of input text, not counting Unicode whitespace, one token stands
  // for: the longest token's byte length (vocabulary entries and added tokens, at least 4,
  // one character), times how much the normalizer can shrink text (4 for Unicode normal
  // forms and lowercasing). Token spellings never undercount the text they encode
  // (byte-level spells a byte with one or two bytes, SentencePiece a space as the 3-byte
  // "▁", byte fallback a byte as "<0xNN>"). So a text of B such bytes is at least
  // B / max_text_bytes_per_token() tokens: what lets the front end refuse a prompt that
  // cannot fit max_model_len without tokenizing it. Nullopt when no bound exists: a
  // normalizer or pre-tokenizer that can delete text (StripAccents, Replace by a regex or
  // by shorter content, Split "Removed"), or an unk token fusing any run of unknown
  // characters. Computed once at load.
  std::optional<int64_t> max_text_bytes_per_token() const { return max_text_bytes_per_token_; }
  // The bytes of `text` outside Unicode whitespace: what max_text_bytes_per_token() bounds.
  static int64_t NonWhitespaceBytes(std::string_view text);

 private:
  Tokenizer();
  // FromJson and FromJsonWithVocabulary; `vocabulary` may be null.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Build(
      std::string_view json, std::string_view source_name, std::string_view tokenizer_config_json,
      std::string_view generation_config_json, tokenizer_internal::BpeVocabulary* vocabulary);
  absl::Status LoadTokenizerJson(std::string_view json, const std::string& source,
                                 tokenizer_internal::BpeVocabulary* vocabulary);
  absl::Status LoadTokenizerConfig(std::string_view json, const std::string& source);
  absl::Status LoadGenerationConfig(std::string_view json, const std::string& source);
  void AddEosId(int32_t id);
  // Sets max_text_bytes_per_token_ once all tokens are loaded.
  void FinishTextBound();

  std::unique_ptr<tokenizer_internal::Normalizer> normalizer_;
  std::unique_ptr<tokenizer_internal::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokenizer_internal::BpeModel> model_;
  std::unique_ptr<tokenizer_internal::PostProcessor> post_processor_;
  std::unique_ptr<tokenizer_internal::Decoder> decoder_;
  std::unique_ptr<tokenizer_internal::AddedVocabulary> added_;
  absl::flat_hash_set<std::string> special_contents_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_;
  std::vector<int32_t> eos_ids_;
  // From the normalizer and pre-tokenizer sections; nullopt: no bound.
  std::optional<int64_t> normalizer_shrink_factor_ = 1;
  std::optional<int64_t> max_text_bytes_per_token_;
};

}  // namespace tpserve
