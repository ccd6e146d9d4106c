// API request (text, token ids or chat messages) -> the engine's ServeRequest: model routing,
// chat template, tokenization, length checks. Shared by both front ends; tests/frontend_test.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/generation_defaults.h"
#include "coordinator/engine/request.h"
#include "coordinator/structured/grammar_compiler.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// The most choices (OpenAI's `n`) one request may ask for; RequestBuilder::Build refuses more.
inline constexpr int32_t kMaxChoices = 64;

struct ChatPrompt {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // message objects
  bool add_generation_prompt = true;
  // Extra template variables, e.g. {"enable_thinking": false}.
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  // The tools the template offers the model (OpenAI's `tools`); null: none.
  nlohmann::ordered_json tools = nullptr;
};

// Text is tokenized with special tokens (BOS) added; token ids are used as they are.
using Prompt = std::variant<std::string, std::vector<int32_t>, ChatPrompt>;

// response_format beyond free text (structured output, docs/structured_output.md).
struct ResponseFormat {
  enum class Type { kJsonObject, kJsonSchema };
  Type type = Type::kJsonObject;
  std::string schema;  // kJsonSchema: the JSON schema, as JSON text
};

// A chat request's `tools` and `tool_choice` (docs/tool_calls.md). The front ends parse it
// (ParseToolUse); RequestBuilder::Build applies it: the tools go to the chat template, "auto"
// keeps special tokens in the text (call markers), "required" and a named function become a
// JSON schema the output must follow.
struct ToolUse {
  enum class Choice {
    kNone,      // no tools offered: none sent, or tool_choice "none"
    kAuto,      // the model may call them; its output is parsed for calls
    kRequired,  // it must call one or more: the output is constrained to a JSON list of calls
    kNamed,     // it must call `function`: the output is constrained to that function's arguments
  };
  Choice choice = Choice::kNone;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  std::string function;  // kNamed
};

// OpenAI's `tools` (null: none) and `tool_choice` (null: absent; "none", "auto",
// "required" or {"type": "function", "function": {"name": ...}}). Errors are
// INVALID_ARGUMENT tagged with the field.
absl::StatusOr<ToolUse> ParseToolUse(const nlohmann::ordered_json& tools, const nlohmann::ordered_json& tool_choice);

struct GenerateInput {
  std::string model;  // empty: the default (first) served name
  Prompt prompt;
  SamplingParams params;
  // Unset max_tokens: 16 for text and token prompts (as OpenAI's completions), the rest
  // of the context (max_model_len - prompt) for chat.
  bool max_tokens_set = false;
  // The sampling fields the request set; Build gives the others the model's defaults.
  ExplicitSamplingFields explicit_sampling;
  // Unset: free text. Build compiles it into params.grammar.
  std::optional<ResponseFormat> response_format;
  ToolUse tool_use;  // chat prompts only
  // Choices (OpenAI's n), 1..64: Build makes choice 0; the front end makes the others from
  // it (MoreChoices) and submits them once choice 0 has computed the prompt.
  int32_t n = 1;
};

// Choices 1..n-1 of a request: the same prompt and parameters under ids "<id>-<i>"; a
// seeded request's choice i draws with seed + i (vLLM's rule), so choices differ and repeat.
std::vector<ServeRequest> MoreChoices(const ServeRequest& first, int32_t n);

// Thread-safe (const, plus an atomic request counter).
class RequestBuilder {
 public:
  // `chat_template` may be null: chat requests then fail with INVALID_ARGUMENT.
  // `served_model_names` empty: the engine's Info().served_model_name. `generation_defaults`:
  // what requests that leave a sampling field unset get (--generation-config). Referenced
  // objects must outlive this one.
  // `tool_call_parser`: how the model writes tool calls (--tool-call-parser); unset: the
  // syntax the chat template writes (DetectToolCallFormat).
  RequestBuilder(const EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
                 std::vector<std::string> served_model_names, GenerationDefaults generation_defaults = {},
                 std::optional<ToolCallFormat> tool_call_parser = std::nullopt);

  const std::vector<std::string>& served_model_names() const { return served_model_names_; }
  // OK for "" and the served names; NOT_FOUND listing the served names otherwise.
  absl::Status CheckModel(absl::string_view model) const;
  // The served name a request for `model` is answered as.
  const std::string& ResolveModel(absl::string_view model) const;

  // request_id is `id_prefix` plus a process-unique suffix. Errors are INVALID_ARGUMENT
  // tagged with the field (coordinator/engine/field_error.h) or NOT_FOUND for the model.
  absl::StatusOr<ServeRequest> Build(GenerateInput input, absl::string_view id_prefix) const;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const GenerationDefaults& generation_defaults() const { return generation_defaults_; }
  // How tool_choice "auto" outputs are read back; kNone refuses "auto".
  ToolCallFormat tool_call_format() const { return tool_call_format_; }

 private:
  absl::StatusOr<std::vector<int32_t>> Tokenize(const Prompt& prompt) const;
  // input.tool_use -> the chat's tools, skip_special_tokens, response_format.
  absl::Status ApplyToolUse(GenerateInput& input) const;
  // The grammar of a response_format, from the cache of compiled ones. The first call
  // builds the tokenizer's byte vocabulary (a few hundred ms at 262k tokens).
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileResponseFormat(const ResponseFormat& format) const;

  const EngineApi& engine_;
  const Tokenizer& tokenizer_;
  const ModelChatTemplate* const chat_template_;
  std::vector<std::string> served_model_names_;
  const GenerationDefaults generation_defaults_;
  const ToolCallFormat tool_call_format_;
  const uint64_t id_base_;
  mutable std::atomic<uint64_t> next_id_{0};
  mutable absl::once_flag grammar_once_;
  mutable absl::StatusOr<std::unique_ptr<GrammarCompiler>> grammar_compiler_;
};

}  // namespace tpserve
