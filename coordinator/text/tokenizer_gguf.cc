// A GGUF file's tokenizer.ggml.* metadata turned into the tokenizer.json pipeline transformers
// makes of it (integrations/gguf/gguf_tokenizer_mapping.py and the tokenizer classes it hands
// the vocabulary to). Tested by tests/tokenizer_gguf_test.cc.
#include "coordinator/text/tokenizer_gguf.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/tokenizer_bpe.h"
#include "coordinator/text/tokenizer_byte_level.h"
#include "coordinator/text/tokenizer_gguf_vocab.h"
#include "coordinator/text/tokenizer_unicode.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

using Json = nlohmann::json;
using tokenizer_internal::BpeVocabulary;
using tokenizer_internal::GgufAddedTokens;
using tokenizer_internal::GgufVocab;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;

// kGemma: tokenizer.ggml.model "llama" from Gemma 1-3; kGemma4: tokenizer.ggml.model "gemma4".
enum class Family { kGemma, kGemma4, kLlama, kLlama3, kQwen2 };

// The tokenizer's text helpers take std::string_view; Debian's abseil has its own.
std::string_view Std(absl::string_view s) { return {s.data(), s.size()}; }

bool IsSentencePiece(Family f) {
  return f == Family::kGemma || f == Family::kGemma4 || f == Family::kLlama;
}
// Handed to GemmaTokenizer: its normalizer, pre-tokenizer, decoder and special tokens.
bool IsGemma(Family f) { return f == Family::kGemma || f == Family::kGemma4; }

tokenizer_internal::GgufSpelling Spelling(Family f) {
  switch (f) {
    case Family::kGemma:
      return tokenizer_internal::GgufSpelling::kGemma;
    case Family::kGemma4:  // no two-space fix: the file has tokenizer.json's own spelling
    case Family::kLlama:
      return tokenizer_internal::GgufSpelling::kAsIs;
    default:
      return tokenizer_internal::GgufSpelling::kByteLevel;
  }
}

bool InByteAlphabet(absl::string_view token) {
  size_t pos = 0;
  while (pos < token.size()) {
    if (tokenizer_internal::ByteLevelCharToByte(
            tokenizer_internal::NextCodePoint(Std(token), &pos)) < 0) {
      return false;
    }
  }
  return true;
}

constexpr absl::string_view kSupported =
    "supported: tokenizer.ggml.model \"llama\" with general.architecture gemma, gemma2, gemma3 "
    "(Gemma) or llama (Llama 2 style), tokenizer.ggml.model \"gemma4\" with general.architecture "
    "gemma4 (Gemma 4), and tokenizer.ggml.model \"gpt2\" with tokenizer.ggml.pre \"llama-bpe\" "
    "(Llama 3) or \"qwen2\" (Qwen 2, Qwen 3)";

// The pre-tokenizer splits transformers gives these names (GGUF_PRE_TOKENIZER_SPLITS).
constexpr absl::string_view kLlama3Split =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr absl::string_view kQwen2Split =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// Metadata access with errors that name the file and the key.
class Metadata {
 public:
  Metadata(const GgufMetadata& metadata, absl::string_view source)
      : metadata_(metadata), source_(source) {}

  const Json* Find(absl::string_view key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
  }
  absl::Status Error(absl::string_view key, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", key, ": ", message));
  }
  absl::StatusOr<std::optional<std::string>> String(absl::string_view key) const {
    const Json* j = Find(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_string()) return Error(key, absl::StrCat("expected a string, got ", j->type_name()));
    return j->get<std::string>();
  }
  absl::StatusOr<std::optional<bool>> Bool(absl::string_view key) const {
    const Json* j = Find(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_boolean()) return Error(key, absl::StrCat("expected a bool, got ", j->dump()));
    return j->get<bool>();
  }
  // An index into tokenizer.ggml.tokens.
  absl::StatusOr<std::optional<int32_t>> TokenIndex(absl::string_view key, size_t n_tokens) const {
    const Json* j = Find(key);
    if (j == nullptr) return std::nullopt;
    if (!j->is_number_integer() || j->get<int64_t>() < 0 ||
        j->get<int64_t>() >= static_cast<int64_t>(n_tokens)) {
      return Error(key, absl::StrCat(j->dump(), " is not a token id (tokenizer.ggml.tokens has ",
                                     n_tokens, " tokens)"));
    }
    return static_cast<int32_t>(j->get<int64_t>());
  }

 private:
  const GgufMetadata& metadata_;
  std::string source_;
};

absl::StatusOr<Family> ReadFamily(const Metadata& m) {
  TP_ASSIGN_OR_RETURN(const auto model, m.String("tokenizer.ggml.model"));
  if (!model) {
    return m.Error("tokenizer.ggml.model",
                   absl::StrCat("missing: the file carries no tokenizer (", kSupported, ")"));
  }
  TP_ASSIGN_OR_RETURN(const auto arch, m.String("general.architecture"));
  TP_ASSIGN_OR_RETURN(const auto pre, m.String("tokenizer.ggml.pre"));
  const std::string arch_name = arch.value_or("");
  if (*model == "llama") {
    if (pre && *pre != "default") {
      return m.Error("tokenizer.ggml.pre",
                     absl::StrCat("\"", *pre,
                                  "\" is not supported with tokenizer.ggml.model \"llama\" "
                                  "(expected \"default\" or none; ",
                                  kSupported, ")"));
    }
    if (arch_name == "gemma" || arch_name == "gemma2" || arch_name == "gemma3")
      return Family::kGemma;
    if (arch_name == "llama") return Family::kLlama;
    return m.Error(
        "general.architecture",
        absl::StrCat("\"", arch_name, "\" with tokenizer.ggml.model \"llama\" is not supported (",
                     kSupported, ")"));
  }
  if (*model == "gemma4") {
    // llama.cpp's converter writes no tokenizer.ggml.pre here (llama.cpp reads it as "gemma4").
    // transformers would swap in a byte-level split for a name in GGUF_PRE_TOKENIZER_SPLITS,
    // which no Gemma 4 file carries: anything but these is refused rather than guessed at.
    if (pre && *pre != "default" && *pre != "gemma4") {
      return m.Error("tokenizer.ggml.pre",
                     absl::StrCat("\"", *pre,
                                  "\" is not supported with tokenizer.ggml.model \"gemma4\" "
                                  "(expected \"default\", \"gemma4\" or none; ",
                                  kSupported, ")"));
    }
    if (arch_name == "gemma4") return Family::kGemma4;
    return m.Error(
        "general.architecture",
        absl::StrCat("\"", arch_name, "\" with tokenizer.ggml.model \"gemma4\" is not supported (",
                     kSupported, ")"));
  }
  if (*model == "gpt2") {
    if (arch_name != "llama" && arch_name != "qwen2" && arch_name != "qwen2moe" &&
        arch_name != "qwen3" && arch_name != "qwen3moe") {
      return m.Error("general.architecture",
                     absl::StrCat("\"", arch_name,
                                  "\" with tokenizer.ggml.model \"gpt2\" is not supported "
                                  "(expected llama, qwen2, qwen2moe, qwen3 or qwen3moe; ",
                                  kSupported, ")"));
    }
    if (pre == "llama-bpe") return Family::kLlama3;
    if (pre == "qwen2") return Family::kQwen2;
    return m.Error(
        "tokenizer.ggml.pre",
        absl::StrCat(pre ? absl::StrCat("\"", *pre, "\"") : std::string("missing, which"),
                     " is not supported with tokenizer.ggml.model \"gpt2\" (", kSupported, ")"));
  }
  return m.Error("tokenizer.ggml.model",
                 absl::StrCat("\"", *model, "\" is not supported (", kSupported, ")"));
}

// tokenizer.ggml.tokens, .scores and .token_type.
struct FileVocab {
  std::vector<absl::string_view> tokens;  // into the metadata
  std::vector<double> scores;             // empty when the file has none
  std::vector<int64_t> types;             // empty when the file has none
  int64_t type(size_t i) const { return types.empty() ? 0 : types[i]; }
};

absl::StatusOr<FileVocab> ReadVocab(const Metadata& m) {
  FileVocab v;
  const Json* tokens = m.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array() || tokens->empty()) {
    return m.Error("tokenizer.ggml.tokens",
                   "missing or empty: expected the array of token strings");
  }
  if (tokens->size() >= INT32_MAX)
    return m.Error("tokenizer.ggml.tokens", "too many tokens for 32-bit ids");
  v.tokens.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    if (!t.is_string())
      return m.Error("tokenizer.ggml.tokens", absl::StrCat("entry ", i, " is not a string"));
    const std::string& s = t.get_ref<const std::string&>();
    // transformers decodes the strings as UTF-8 and fails on anything else.
    if (!tokenizer_internal::IsValidUtf8(s)) {
      return m.Error("tokenizer.ggml.tokens", absl::StrCat("entry ", i, " is not valid UTF-8"));
    }
    v.tokens.push_back(s);
  }
  if (const Json* scores = m.Find("tokenizer.ggml.scores")) {
    if (!scores->is_array() || scores->size() != tokens->size()) {
      return m.Error("tokenizer.ggml.scores",
                     absl::StrCat("expected an array of ", tokens->size(), " numbers"));
    }
    v.scores.reserve(scores->size());
    for (size_t i = 0; i < scores->size(); ++i) {
      if (!(*scores)[i].is_number()) {
        return m.Error("tokenizer.ggml.scores", absl::StrCat("entry ", i, " is not a number"));
      }
      v.scores.push_back((*scores)[i].get<double>());
    }
  }
  if (const Json* types = m.Find("tokenizer.ggml.token_type")) {
    if (!types->is_array() || types->size() != tokens->size()) {
      return m.Error("tokenizer.ggml.token_type",
                     absl::StrCat("expected an array of ", tokens->size(), " integers"));
    }
    v.types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      if (!(*types)[i].is_number_integer()) {
        return m.Error("tokenizer.ggml.token_type",
                       absl::StrCat("entry ", i, " is not an integer"));
      }
      v.types.push_back((*types)[i].get<int64_t>());
    }
  }
  return v;
}

Json Replace(absl::string_view from, absl::string_view to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

// The normalizer, pre-tokenizer, decoder and model options of each family's tokenizer class
// (GemmaTokenizer, LlamaTokenizer, GPT2Tokenizer) after transformers' GGUF conversion. Gemma 1-3
// ("llama" files) and Gemma 4 ("gemma4" files) both get GemmaTokenizer's.
Json Pipeline(Family family) {
  Json t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  Json model = {{"type", "BPE"}, {"dropout", nullptr}, {"ignore_merges", false}};
  if (IsSentencePiece(family)) {
    Json decoders =
        Json::array({Replace("\u2581", " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}});
    if (IsGemma(family)) {
      t["normalizer"] = Replace(" ", "\u2581");
      t["pre_tokenizer"] = {{"type", "Split"},
                            {"pattern", {{"String", " "}}},
                            {"behavior", "MergedWithPrevious"},
                            {"invert", false}};
      model["unk_token"] = "<unk>";
    } else {
      t["normalizer"] = nullptr;
      t["pre_tokenizer"] = {{"type", "Metaspace"},
                            {"replacement", "\u2581"},
                            {"prepend_scheme", "first"},
                            {"split", false}};
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
      model["unk_token"] = nullptr;
    }
    t["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
    model["continuing_subword_prefix"] = nullptr;
    model["end_of_word_suffix"] = nullptr;
    model["fuse_unk"] = true;
    model["byte_fallback"] = true;
  } else {
    const absl::string_view split = family == Family::kLlama3 ? kLlama3Split : kQwen2Split;
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", Json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", split}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         {{"type", "ByteLevel"},
                                                          {"add_prefix_space", false},
                                                          {"trim_offsets", true},
                                                          {"use_regex", false}}})}};
    t["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", true},
                    {"trim_offsets", true},
                    {"use_regex", true}};
    model["unk_token"] = nullptr;
    model["continuing_subword_prefix"] = "";
    model["end_of_word_suffix"] = "";
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
  }
  t["model"] = std::move(model);
  return t;
}

// TokenizersBackend.update_post_processor: "[bos] $A [eos]" (and the pair form).
Json TemplateProcessor(const std::optional<std::string>& bos, std::optional<int32_t> bos_id,
                       const std::optional<std::string>& eos, std::optional<int32_t> eos_id) {
  const auto special = [](const std::string& name, int type_id) {
    return Json{{"SpecialToken", {{"id", name}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* name, int type_id) {
    return Json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  Json single = Json::array();
  Json pair = Json::array();
  Json specials = Json::object();
  for (int type_id = 0; type_id < 2; ++type_id) {
    Json& out = type_id == 0 ? single : pair;
    if (bos) out.push_back(special(*bos, type_id));
    out.push_back(sequence(type_id == 0 ? "A" : "B", type_id));
    if (eos) out.push_back(special(*eos, type_id));
  }
  pair.insert(pair.begin(), single.begin(), single.end());
  if (bos) specials[*bos] = {{"id", *bos}, {"ids", {*bos_id}}, {"tokens", {*bos}}};
  if (eos) specials[*eos] = {{"id", *eos}, {"ids", {*eos_id}}, {"tokens", {*eos}}};
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

// Everything the conversion makes: the tokenizer.json minus its model's vocab and merges,
// which `vocabulary` holds.
struct Conversion {
  Json tokenizer;
  BpeVocabulary vocabulary;
  Json config;
  Json generation;
};

absl::StatusOr<Conversion> Convert(const GgufMetadata& metadata, absl::string_view source) {
  const Metadata m(metadata, source);
  TP_ASSIGN_OR_RETURN(const Family family, ReadFamily(m));
  TP_ASSIGN_OR_RETURN(const FileVocab file, ReadVocab(m));
  const size_t n = file.tokens.size();
  const GgufVocab vocab(file.tokens, Spelling(family));

  Conversion c;
  c.tokenizer = Pipeline(family);
  if (const Json* merges = m.Find("tokenizer.ggml.merges")) {
    TP_ASSIGN_OR_RETURN(c.vocabulary.merges,
                        tokenizer_internal::GgufFileMerges(*merges, vocab, source));
  } else if (!IsSentencePiece(family)) {
    return m.Error("tokenizer.ggml.merges", "missing: a \"gpt2\" vocabulary needs its merges");
  } else {
    // Gemma 1-3's scores do not follow its merge order; the token order does (transformers'
    // gemma_tokenizer). Elsewhere the scores rank the merges (get_merges), Gemma 4 included:
    // its converter writes the merges, but transformers would derive them so without.
    std::vector<double> score = file.scores;
    if (family == Family::kGemma) {
      score.resize(n);
      for (size_t i = 0; i < n; ++i) score[i] = -static_cast<double>(i);
    } else if (score.empty()) {
      return m.Error("tokenizer.ggml.scores",
                     "missing: a vocabulary without merges needs scores to rank them");
    }
    c.vocabulary.merges = tokenizer_internal::DeriveGgufMerges(vocab, score);
  }
  c.vocabulary.tokens = vocab.ModelTokens();

  // The added vocabulary, in the order transformers builds it.
  GgufAddedTokens added(vocab);
  // 1. The special tokens of the tokenizer class the vocabulary is handed to (GemmaTokenizer's
  // include the <mask> that the final GemmaTokenizer would add again).
  switch (family) {
    case Family::kGemma:
    case Family::kGemma4:
      for (const char* t : {"<bos>", "<eos>", "<unk>", "<pad>", "<mask>"}) added.Add(t, true);
      break;
    case Family::kLlama:
      for (const char* t : {"<s>", "</s>", "<unk>"}) added.Add(t, true);
      break;
    default:
      added.Add("<|endoftext|>", true);  // GPT2Tokenizer's bos, eos and unk
  }
  // 2. Control tokens are special, user-defined ones plain added tokens (if the vocabulary
  // has them as the file spells them). In a byte-level vocabulary a control token outside the
  // byte alphabet is a llama.cpp mislabel and stays an ordinary token.
  absl::flat_hash_map<std::string, int32_t> control_ids;
  for (size_t i = 0; i < n && !file.types.empty(); ++i) {
    if (file.type(i) == kControl && (IsSentencePiece(family) || InByteAlphabet(file.tokens[i]))) {
      control_ids.try_emplace(file.tokens[i], added.Add(file.tokens[i], true));
    }
  }
  for (size_t i = 0; i < n && !file.types.empty(); ++i) {
    if (file.type(i) == kUserDefined &&
        (vocab.Find(file.tokens[i]) || added.Find(file.tokens[i]))) {
      added.Add(file.tokens[i], false);
    }
  }
  // 3. The file's named special tokens not added yet.
  std::optional<std::string> names[4];
  const char* const keys[4] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                               "tokenizer.ggml.unknown_token_id",
                               "tokenizer.ggml.padding_token_id"};
  for (int k = 0; k < 4; ++k) {
    TP_ASSIGN_OR_RETURN(const auto index, m.TokenIndex(keys[k], n));
    if (index) names[k] = std::string(file.tokens[*index]);
  }
  const auto& [bos, eos, unk, pad] = names;
  for (const auto* name : {&bos, &eos, &unk, &pad}) {
    if (*name && !added.Find(**name)) added.Add(**name, true);
  }
  c.tokenizer["added_tokens"] = added.ToJson();

  const auto token_id = [&](const std::string& token) {
    const auto id = added.Find(token);
    return id ? *id : *vocab.Find(token);  // named tokens are all added above
  };
  TP_ASSIGN_OR_RETURN(const auto add_bos_flag, m.Bool("tokenizer.ggml.add_bos_token"));
  TP_ASSIGN_OR_RETURN(const auto add_eos_flag, m.Bool("tokenizer.ggml.add_eos_token"));
  // transformers: llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise.
  // Gemma 4: never, whatever tokenizer.ggml.add_bos_token says (the converter writes true).
  // transformers follows Gemma 4's own tokenizer, whose chat template writes <bos> itself;
  // llama.cpp forces BOS on for these files (ggml-org/llama.cpp#21500), so a raw prompt
  // encodes one token shorter here than in llama.cpp.
  const bool add_bos = family != Family::kGemma4 &&
                       add_bos_flag.value_or(IsSentencePiece(family)) && bos.has_value();
  const bool add_eos = add_eos_flag.value_or(false) && eos.has_value();
  c.tokenizer["post_processor"] = TemplateProcessor(
      add_bos ? bos : std::nullopt, add_bos ? std::optional(token_id(*bos)) : std::nullopt,
      add_eos ? eos : std::nullopt, add_eos ? std::optional(token_id(*eos)) : std::nullopt);

  const auto name_json = [](const std::optional<std::string>& s) {
    return s ? Json(*s) : Json(nullptr);
  };
  c.config = {{"bos_token", name_json(bos)}, {"eos_token", name_json(eos)},
              {"unk_token", name_json(unk)}, {"pad_token", name_json(pad)},
              {"add_bos_token", add_bos},    {"add_eos_token", add_eos}};
  TP_ASSIGN_OR_RETURN(const auto chat_template, GgufChatTemplate(metadata, source));
  if (chat_template) c.config["chat_template"] = *chat_template;

  // End of generation besides eos: the file's eot/eom tokens, then the family's end-of-turn
  // control tokens (llama.cpp's end-of-generation set). Gemma 4's are those of its
  // generation_config.json, [<eos>, <turn|>, <|tool_response>], which transformers' GGUF loader
  // also sets (as ids 1, 106, 50, in modeling_gguf_pytorch_utils.py); the converter writes
  // <|tool_response> USER_DEFINED (so that it is rendered), so Gemma 4's are looked up among all
  // added tokens.
  Json eos_ids = Json::array();
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    TP_ASSIGN_OR_RETURN(const auto index, m.TokenIndex(key, n));
    if (index) {
      const auto id = added.Find(file.tokens[*index]);
      eos_ids.push_back(id ? *id : *vocab.Find(vocab.spelled(*index)));
    }
  }
  std::vector<const char*> end_of_turn;
  switch (family) {
    case Family::kGemma:
      end_of_turn = {"<end_of_turn>"};
      break;
    case Family::kGemma4:
      end_of_turn = {"<turn|>", "<|tool_response>"};
      break;
    case Family::kLlama3:
      end_of_turn = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
      break;
    case Family::kQwen2:
      end_of_turn = {"<|im_end|>", "<|endoftext|>"};
      break;
    case Family::kLlama:
      break;
  }
  for (const char* name : end_of_turn) {
    if (const auto it = control_ids.find(name); it != control_ids.end()) {
      eos_ids.push_back(it->second);
    } else if (family == Family::kGemma4) {
      if (const auto id = added.Find(name)) eos_ids.push_back(*id);
    }
  }
  c.generation = {{"eos_token_id", std::move(eos_ids)}};
  return c;
}

}  // namespace

absl::StatusOr<std::optional<std::string>> GgufChatTemplate(const GgufMetadata& metadata,
                                                            absl::string_view source) {
  return Metadata(metadata, source).String("tokenizer.chat_template");
}

absl::StatusOr<GgufTokenizerFiles> GgufTokenizerFilesFromMetadata(const GgufMetadata& metadata,
                                                                  absl::string_view source) {
  TP_ASSIGN_OR_RETURN(Conversion c, Convert(metadata, source));
  Json& model = c.tokenizer["model"];
  Json vocab = Json::object();
  std::vector<const std::string*> by_id;
  for (const auto& [token, id] : c.vocabulary.tokens) {
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(id + 1, nullptr);
    by_id[id] = &token;
    vocab[token] = id;
  }
  Json merges = Json::array();
  for (const BpeVocabulary::Merge& merge : c.vocabulary.merges) {
    merges.push_back(Json::array({*by_id[merge.left], *by_id[merge.right]}));
  }
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return GgufTokenizerFiles{c.tokenizer.dump(), c.config.dump(), c.generation.dump()};
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGgufMetadata(const GgufMetadata& metadata,
                                                                     absl::string_view source) {
  TP_ASSIGN_OR_RETURN(Conversion c, Convert(metadata, source));
  return Tokenizer::FromJsonWithVocabulary(c.tokenizer.dump(), Std(source), c.config.dump(),
                                           c.generation.dump(), std::move(c.vocabulary));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& file) {
  // The vocabulary arrays are not held by the file (GgufOpenOptions): read them for this once.
  TP_ASSIGN_OR_RETURN(const GgufMetadata metadata, file.MetadataWithLargeArrays());
  return TokenizerFromGgufMetadata(metadata, file.path());
}

}  // namespace tpserve
