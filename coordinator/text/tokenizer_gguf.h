// The tokenizer a GGUF file describes in its metadata (tokenizer.ggml.*), built exactly as
// transformers converts it for AutoTokenizer.from_pretrained(dir, gguf_file=...)
// (transformers/integrations/gguf/gguf_tokenizer_mapping.py, transformers 5.24). Tested by
// tests/tokenizer_gguf_test.cc against references transformers made from the fixture files of
// tools/make_gguf_tokenizer_fixtures.py, and from the real Gemma 3 270M file when present.
//
// Supported, as llama.cpp's convert_hf_to_gguf.py writes them:
//   tokenizer.ggml.model "llama" (SentencePiece-style BPE with byte fallback)
//     general.architecture gemma, gemma2, gemma3: Gemma. The file has no merges: they are
//       derived from the vocabulary, best first in the order of the tokens in the file;
//       user-defined whitespace tokens spelled with real spaces are read as "▁" runs.
//     general.architecture llama: Llama 2 style (Metaspace, prepend "▁" to the first word).
//       Merges come from tokenizer.ggml.merges or, as usual, are derived ranked by the
//       tokens' scores.
//   tokenizer.ggml.model "gemma4" with general.architecture gemma4: Gemma 4. GemmaTokenizer with
//     the file's vocabulary as spelled and its tokenizer.ggml.merges (derived ranked by the
//     scores when absent, as transformers would); tokenizer.ggml.pre absent, "default" or
//     "gemma4". No BOS is added whatever add_bos_token says (transformers; llama.cpp adds one).
//   tokenizer.ggml.model "gpt2" (byte-level BPE) with tokenizer.ggml.pre
//     "llama-bpe": Llama 3;  "qwen2": Qwen 2, Qwen 2.5, Qwen 3.
// Anything else is an error naming the value and listing these. As in transformers, what
// the file says beyond that is not consulted: add_space_prefix is ignored, and a "gpt2"
// vocabulary gets no Unicode normalizer (Qwen's own tokenizer.json has NFC).
//
// Tokens the file marks control are special added tokens, user-defined ones plain added
// tokens; tokenizer.ggml.bos/eos/unknown/padding_token_id name the special tokens, and
// add_bos_token / add_eos_token (for "llama" vocabularies add_bos defaults to true; for "gemma4"
// add_bos is false) the tokens Encode(text, true) adds.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/text/tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/gguf_file.h"

namespace tpserve {

// A GGUF file's metadata, as GgufFile::metadata() holds it.
using GgufMetadata = std::map<std::string, nlohmann::json, std::less<>>;

// The files of a Hugging Face tokenizer that the conversion amounts to, as text.
struct GgufTokenizerFiles {
  // What transformers' converted tokenizer serializes to (its backend_tokenizer.to_str()),
  // up to key order.
  std::string tokenizer_json;
  // bos_token, eos_token, unk_token, pad_token, add_bos_token, add_eos_token and, when the
  // file has one, chat_template.
  std::string tokenizer_config_json;
  // {"eos_token_id": [...]}: what ends generation besides eos_token. A GGUF file has no
  // generation_config.json, and its eos_token_id is one id, while models stop at more (Gemma
  // 3's generation_config.json has [<eos>, <end_of_turn>]). As llama.cpp does, this lists
  // tokenizer.ggml.eot_token_id and eom_token_id when present, then the family's end-of-turn
  // tokens that the file has as control tokens: <end_of_turn> (Gemma 1-3); <|eot_id|>, <|eom_id|>,
  // <|end_of_text|> (Llama 3); <|im_end|>, <|endoftext|> (Qwen); and Gemma 4's <turn|> and
  // <|tool_response>, as added tokens of either kind (Gemma 4's generation_config.json has
  // [<eos>, <turn|>, <|tool_response>]). Tokenizer::eos_ids() reads it as it reads a
  // generation_config.json.
  std::string generation_config_json;
};

// The tokenizer of `file`, with eos_ids() as GgufTokenizerFiles::generation_config_json says.
// Errors name the file and the metadata key. Gemma 3's 262,144 tokens and 514,906 derived
// merges take about 1.3 s on a busy 2-core machine (transformers: 80 s); the real-file test in
// tests/tokenizer_gguf_test.cc prints the time.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file);
// The same from metadata; `source` names the file in errors.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufMetadata(const GgufMetadata& metadata,
                                                                     absl::string_view source);

// The conversion as files (Tokenizer::FromJson of them builds the same tokenizer as
// TokenizerFromGgufMetadata). For inspection and tests: a large vocabulary's JSON takes
// seconds to parse back.
absl::StatusOr<GgufTokenizerFiles> GgufTokenizerFilesFromMetadata(const GgufMetadata& metadata,
                                                                  absl::string_view source);

// tokenizer.chat_template, nullopt when the file has none (an error when it is not a string).
absl::StatusOr<std::optional<std::string>> GgufChatTemplate(const GgufMetadata& metadata,
                                                            absl::string_view source);

}  // namespace tpserve
