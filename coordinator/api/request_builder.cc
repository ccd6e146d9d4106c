// RequestBuilder: model routing, prompt rendering and tokenization, length checks.
// Tested by tests/frontend_test.cc.
#include "coordinator/api/request_builder.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/engine/field_error.h"

namespace tpserve {
namespace {

constexpr int32_t kDefaultCompletionTokens = 16;

// The field that names the prompt in both APIs' error messages.
const char* PromptField(const Prompt& prompt) {
  return std::holds_alternative<ChatPrompt>(prompt) ? "messages" : "prompt";
}

// The text of a chat's message contents that every template renders, in non-whitespace
// bytes (templates may trim it): string contents and the "text" of content parts. An
// assistant content counts only after its last "</think>": Qwen3 and DeepSeek V3.1
// templates drop the reasoning before it from earlier turns.
int64_t ChatContentBytes(const nlohmann::ordered_json& messages) {
  int64_t bytes = 0;
  for (const auto& message : messages) {
    if (!message.is_object()) continue;
    const auto content = message.find("content");
    if (content == message.end()) continue;
    const auto role = message.find("role");
    const bool assistant = role != message.end() && role->is_string() && *role == "assistant";
    const auto count = [&](const std::string& text) {
      std::string_view rest = text;
      if (assistant) {
        if (const size_t think = rest.rfind("</think>"); think != std::string_view::npos) rest.remove_prefix(think);
      }
      bytes += Tokenizer::NonWhitespaceBytes(rest);
    };
    if (content->is_string()) {
      count(content->get_ref<const std::string&>());
    } else if (content->is_array()) {
      for (const auto& part : *content) {
        if (!part.is_object()) continue;
        const auto text = part.find("text");
        if (text != part.end() && text->is_string()) count(text->get_ref<const std::string&>());
      }
    }
  }
  return bytes;
}

// The roles a chat message may have: OpenAI's, which chat templates are written for, less
// "developer" (tpserve does not map it to "system") and the deprecated "function" ("tool").
constexpr const char* kChatRoles[] = {"system", "user", "assistant", "tool"};

// INVALID_ARGUMENT naming the first message whose role is not one of kChatRoles: templates
// render an unknown role as text (or fail on it), so the model would see a turn it was never
// trained on.
absl::Status CheckChatRoles(const nlohmann::ordered_json& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::ordered_json* role = nullptr;
    if (messages[i].is_object()) {
      if (const auto it = messages[i].find("role"); it != messages[i].end()) role = &*it;
    }
    if (role != nullptr && role->is_string() &&
        std::find(std::begin(kChatRoles), std::end(kChatRoles), role->get_ref<const std::string&>()) !=
            std::end(kChatRoles)) {
      continue;
    }
    const std::string field = absl::StrCat("messages[", i, "].role");
    if (role == nullptr || !role->is_string()) return FieldError(field, absl::StrCat(field, " must be a string"));
    const std::string& name = role->get_ref<const std::string&>();
    return FieldError(field, absl::StrCat(field, " \"", name, "\" is not a role this server renders; use one of ",
                                          absl::StrJoin(kChatRoles, ", "),
                                          name == "developer" ? " (send developer instructions as \"system\")"
                                          : name == "function" ? " (send function results as \"tool\")"
                                                               : ""));
  }
  return absl::OkStatus();
}

// The tool-call syntax of the template that renders requests with tools.
ToolCallFormat TemplateToolCallFormat(const ModelChatTemplate* chat_template) {
  if (chat_template == nullptr) return ToolCallFormat::kNone;
  const ChatTemplate* t = chat_template->Find("tool_use");
  if (t == nullptr) t = chat_template->Find("default");
  return t == nullptr ? ToolCallFormat::kNone : DetectToolCallFormat(t->source());
}

}  // namespace

absl::StatusOr<ToolUse> ParseToolUse(const nlohmann::ordered_json& tools, const nlohmann::ordered_json& choice) {
  ToolUse use;
  if (!tools.is_null()) {
    if (absl::Status s = ValidateTools(tools); !s.ok()) return FieldError("tools", s.message());
    use.tools = tools;
  }
  const bool has_tools = !use.tools.empty();
  if (choice.is_null()) {
    use.choice = has_tools ? ToolUse::Choice::kAuto : ToolUse::Choice::kNone;
  } else if (choice == "none") {
    use.choice = ToolUse::Choice::kNone;
  } else if (choice == "auto") {
    use.choice = ToolUse::Choice::kAuto;
  } else if (choice == "required") {
    use.choice = ToolUse::Choice::kRequired;
  } else if (choice.is_object() && choice.value("type", nlohmann::ordered_json()) == "function" &&
             choice.contains("function") && choice["function"].is_object() &&
             choice["function"].value("name", nlohmann::ordered_json()).is_string()) {
    use.choice = ToolUse::Choice::kNamed;
    use.function = choice["function"]["name"].get<std::string>();
  } else {
    std::string got = choice.dump();
    if (got.size() > 40) got = got.substr(0, 37) + "...";
    return FieldError("tool_choice", absl::StrCat("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}, got ",
                                                  got));
  }
  if (use.choice != ToolUse::Choice::kNone && !has_tools) {
    return FieldError("tool_choice", "'tool_choice' other than \"none\" needs a non-empty \"tools\" list");
  }
  return use;
}

std::vector<ServeRequest> MoreChoices(const ServeRequest& first, int32_t n) {
  std::vector<ServeRequest> more;
  for (int32_t i = 1; i < n; ++i) {
    ServeRequest r = first;
    r.request_id = absl::StrCat(first.request_id, "-", i);
    if (r.params.seed.has_value()) r.params.seed = *r.params.seed + static_cast<uint64_t>(i);
    more.push_back(std::move(r));
  }
  return more;
}

absl::Status RequestBuilder::ApplyToolUse(GenerateInput& input) const {
  const ToolUse& use = input.tool_use;
  if (use.choice == ToolUse::Choice::kNone) return absl::OkStatus();  // no tools offered
  auto* chat = std::get_if<ChatPrompt>(&input.prompt);
  if (chat == nullptr) return FieldError("tools", "tools need a chat prompt (messages)");
  chat->tools = use.tools;
  if (use.choice == ToolUse::Choice::kAuto) {
    if (tool_call_format_ == ToolCallFormat::kNone) {
      return FieldError("tools", "tool_choice \"auto\": this model's chat template writes no tool-call syntax tpserve "
                                 "can read back (docs/tool_calls.md); start the server with --tool-call-parser, or "
                                 "send tool_choice \"required\" or a named function");
    }
    input.params.skip_special_tokens = false;  // the call markers may be special tokens
    return absl::OkStatus();
  }
  if (input.response_format.has_value()) {
    return FieldError("response_format", "'response_format' cannot be combined with a tool_choice that forces a call");
  }
  absl::StatusOr<std::string> schema = use.choice == ToolUse::Choice::kRequired ? RequiredToolsSchema(use.tools)
                                                                                : NamedToolSchema(use.tools, use.function);
  if (!schema.ok()) return FieldError("tool_choice", schema.status().message());
  input.response_format = ResponseFormat{ResponseFormat::Type::kJsonSchema, *std::move(schema)};
  return absl::OkStatus();
}

RequestBuilder::RequestBuilder(const EngineApi& engine, const Tokenizer& tokenizer,
                               const ModelChatTemplate* chat_template, std::vector<std::string> served_model_names,
                               GenerationDefaults generation_defaults, std::optional<ToolCallFormat> tool_call_parser)
    : engine_(engine),
      tokenizer_(tokenizer),
      chat_template_(chat_template),
      served_model_names_(std::move(served_model_names)),
      generation_defaults_(std::move(generation_defaults)),
      tool_call_format_(tool_call_parser.value_or(TemplateToolCallFormat(chat_template))),
      id_base_(absl::Uniform<uint64_t>(absl::BitGen())) {
  if (served_model_names_.empty()) served_model_names_.push_back(engine_.Info().served_model_name);
}

absl::Status RequestBuilder::CheckModel(absl::string_view model) const {
  if (model.empty()) return absl::OkStatus();
  for (const std::string& name : served_model_names_) {
    if (name == model) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("model \"", model, "\" is not served here; served models: ",
                                          absl::StrJoin(served_model_names_, ", ")));
}

const std::string& RequestBuilder::ResolveModel(absl::string_view model) const {
  for (const std::string& name : served_model_names_) {
    if (name == model) return name;
  }
  return served_model_names_.front();
}

absl::StatusOr<std::vector<int32_t>> RequestBuilder::Tokenize(const Prompt& prompt) const {
  // Work on a prompt is bounded before it is done: a prompt that provably cannot fit
  // max_model_len is refused before its template runs or its text is tokenized. The
  // bounds are sound (no prompt that could fit is refused): every chat message renders to
  // at least one token, and no token holds more than max_text_bytes_per_token()
  // non-whitespace bytes of the text. The exact check on the token count follows in Build.
  const int64_t max_model_len = engine_.Info().max_model_len;
  const std::optional<int64_t> bytes_per_token = tokenizer_.max_text_bytes_per_token();
  // 0: no bound (no max_model_len, or a tokenizer without the figure).
  const int64_t max_text_bytes = max_model_len > 0 && bytes_per_token ? max_model_len * *bytes_per_token : 0;
  if (const auto* text = std::get_if<std::string>(&prompt)) {
    if (text->empty()) return FieldError("prompt", "prompt must not be empty");
    if (max_text_bytes > 0 && static_cast<int64_t>(text->size()) > max_text_bytes) {
      const int64_t bytes = Tokenizer::NonWhitespaceBytes(*text);
      if (bytes > max_text_bytes) {
        return FieldError("prompt", absl::StrCat("prompt: ", bytes, " bytes of text (not counting whitespace) cannot fit in "
                                                 "max_model_len ", max_model_len, " tokens: this model's tokens hold at most ",
                                                 *bytes_per_token, " bytes each; shorten the prompt"));
      }
    }
    return tokenizer_.Encode(*text, /*add_special_tokens=*/true);
  }
  if (const auto* ids = std::get_if<std::vector<int32_t>>(&prompt)) {
    if (ids->empty()) return FieldError("prompt", "prompt must not be empty");
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer_.vocab_size()) {
        return FieldError("prompt", absl::StrCat("prompt: token id ", id, " is outside the vocabulary [0, ",
                                                 tokenizer_.vocab_size(), ")"));
      }
    }
    return *ids;
  }
  const auto& chat = std::get<ChatPrompt>(prompt);
  if (!chat.messages.is_array() || chat.messages.empty()) {
    return FieldError("messages", "messages must be a non-empty list of messages");
  }
  if (absl::Status roles = CheckChatRoles(chat.messages); !roles.ok()) return roles;
  if (chat_template_ == nullptr) {
    return FieldError("messages",
                      "messages: this model has no chat template (chat_template.jinja or tokenizer_config.json's "
                      "chat_template); send a prompt to the completions API instead");
  }
  const int64_t message_count = static_cast<int64_t>(chat.messages.size());
  if (max_model_len > 0 && message_count > max_model_len) {
    return FieldError("messages", absl::StrCat("messages: ", message_count, " messages cannot fit in max_model_len ",
                                               max_model_len, ": every message takes at least one token; send at most ",
                                               max_model_len, " messages (drop or summarize earlier turns)"));
  }
  if (max_text_bytes > 0) {
    const int64_t bytes = ChatContentBytes(chat.messages);
    if (bytes > max_text_bytes) {
      return FieldError("messages",
                        absl::StrCat("messages: the message contents hold ", bytes,
                                     " bytes of text (not counting whitespace), which cannot fit in max_model_len ",
                                     max_model_len, " tokens: this model's tokens hold at most ", *bytes_per_token,
                                     " bytes each; shorten the conversation"));
    }
  }
  ApplyChatTemplateOptions options;
  options.add_generation_prompt = chat.add_generation_prompt;
  options.extra_context = chat.template_kwargs;
  options.tools = chat.tools;
  absl::StatusOr<std::string> text = chat_template_->Apply(chat.messages, options);
  if (!text.ok()) return FieldError("messages", absl::StrCat("messages: ", text.status().message()));
  // The template writes the special tokens (BOS) itself.
  return tokenizer_.Encode(*text, /*add_special_tokens=*/false);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> RequestBuilder::CompileResponseFormat(
    const ResponseFormat& format) const {
  absl::call_once(grammar_once_, [this] {
    absl::StatusOr<VocabularyBytes> table = TokenBytesTable(tokenizer_);
    if (!table.ok()) {
      grammar_compiler_ = absl::FailedPreconditionError(
          absl::StrCat("response_format: structured output is not available for this tokenizer: ", table.status().message()));
      return;
    }
    grammar_compiler_ = std::make_unique<GrammarCompiler>(TokenVocabulary::Create(*std::move(table)));
  });
  if (!grammar_compiler_.ok()) return FieldError("response_format", grammar_compiler_.status().message());
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
      format.type == ResponseFormat::Type::kJsonObject ? (*grammar_compiler_)->CompileJsonObject()
                                                       : (*grammar_compiler_)->CompileJsonSchema(format.schema);
  if (!grammar.ok()) return FieldError("response_format", grammar.status().message());
  return grammar;
}

absl::StatusOr<ServeRequest> RequestBuilder::Build(GenerateInput input, absl::string_view id_prefix) const {
  if (absl::Status s = CheckModel(input.model); !s.ok()) return s;
  if (absl::Status s = ApplyToolUse(input); !s.ok()) return s;
  if (input.n < 1 || input.n > kMaxChoices) {
    return FieldError("n", absl::StrCat("'n' must be between 1 and ", kMaxChoices, ", got ", input.n));
  }
  absl::StatusOr<std::vector<int32_t>> ids = Tokenize(input.prompt);
  if (!ids.ok()) return ids.status();
  const char* prompt_field = PromptField(input.prompt);
  if (ids->empty()) return FieldError(prompt_field, absl::StrCat(prompt_field, " tokenizes to no tokens"));

  const int64_t max_model_len = engine_.Info().max_model_len;
  const int64_t prompt_len = static_cast<int64_t>(ids->size());
  if (max_model_len > 0 && prompt_len >= max_model_len) {
    return FieldError(prompt_field, absl::StrCat(prompt_field, " is ", prompt_len, " tokens, but max_model_len is ",
                                                 max_model_len, ": shorten it"));
  }
  SamplingParams& params = input.params;
  ApplyGenerationDefaults(generation_defaults_, input.explicit_sampling, params);
  if (!input.max_tokens_set) {
    const bool chat = std::holds_alternative<ChatPrompt>(input.prompt);
    int64_t n = chat && max_model_len > 0 ? max_model_len - prompt_len : kDefaultCompletionTokens;
    if (max_model_len > 0) n = std::min(n, max_model_len - prompt_len);
    params.max_tokens = static_cast<int32_t>(n);
  } else if (max_model_len > 0 && params.max_tokens > 0 && prompt_len + params.max_tokens > max_model_len) {
    return FieldError("max_tokens",
                      absl::StrCat("max_tokens: the prompt (", prompt_len, " tokens) plus max_tokens (",
                                   params.max_tokens, ") exceeds max_model_len (", max_model_len,
                                   "); ask for at most ", max_model_len - prompt_len, " tokens"));
  }

  if (input.response_format.has_value()) {
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar = CompileResponseFormat(*input.response_format);
    if (!grammar.ok()) return grammar.status();
    params.grammar = *std::move(grammar);
  }

  ServeRequest request;
  request.request_id = absl::StrFormat("%s%016x%06x", id_prefix, id_base_, next_id_.fetch_add(1));
  request.prompt_ids = *std::move(ids);
  request.params = std::move(params);
  return request;
}

}  // namespace tpserve
