// Loads a model directory's chat template(s) and special tokens the way transformers'
// AutoTokenizer does, and applies them to a conversation as apply_chat_template(...,
// tokenize=False) does. Tested by tests/chat_template_test.cc.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/text/chat_template.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct ApplyChatTemplateOptions {
  bool add_generation_prompt = false;
  // JSON schemas of the tools the model may call; null when the request has none.
  nlohmann::ordered_json tools = nullptr;
  // RAG documents; null when none.
  nlohmann::ordered_json documents = nullptr;
  // Further template variables, e.g. {"enable_thinking": false}; they override the
  // special tokens of the same name.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
  // A named template ("tool_use", ...); empty picks "tool_use" when tools are given and
  // the model has one, else "default".
  std::string template_name;
  ChatTemplateRenderOptions render;
};

class ModelChatTemplate {
 public:
  // Renders `messages` (a JSON array of message objects) the way
  // tokenizer.apply_chat_template(messages, tokenize=False, ...) does: keys whose value
  // is null are dropped, reasoning given as "reasoning_content", "thinking" or
  // "reasoning" is copied to "thinking" and "reasoning_content", and the special tokens
  // (bos_token, eos_token, ...) are template variables.
  absl::StatusOr<std::string> Apply(const nlohmann::ordered_json& messages,
                                    const ApplyChatTemplateOptions& options = {}) const;

  // {"bos_token": "<bos>", "eos_token": "<eos>", ...}: the named special tokens that
  // transformers passes to templates (bos, eos, unk, sep, pad, cls, mask), where set.
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  // "default" plus any named templates ("tool_use", "rag", ...).
  std::vector<std::string> template_names() const;
  // Null when the model has no template of that name.
  const ChatTemplate* Find(std::string_view name) const;

 private:
  friend absl::StatusOr<ModelChatTemplate> LoadChatTemplate(const std::string& model_dir);

// A model whose one template comes as text (a GGUF file's tokenizer.chat_template, or a
// built-in one), with its special tokens as special_tokens() holds them. `source_name` names
// it in errors.
absl::StatusOr<ModelChatTemplate> MakeChatTemplate(const std::string& source, const std::string& source_name,
                                                   nlohmann::ordered_json special_tokens);
  friend absl::StatusOr<ModelChatTemplate> MakeChatTemplate(const std::string& source, const std::string& source_name,
                                                            nlohmann::ordered_json special_tokens);

  std::map<std::string, ChatTemplate, std::less<>> templates_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// Reads, in transformers' order of precedence: chat_template.jinja (the "default"
// template) and additional_chat_templates/*.jinja; else tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"} objects); else a processor's
// chat_template.json. Special tokens come from tokenizer_config.json (strings or
// {"content": ...} objects) and, for configs without "added_tokens_decoder",
// special_tokens_map.json. Errors name the file and what to fix.
absl::StatusOr<ModelChatTemplate> LoadChatTemplate(const std::string& model_dir);

// A model whose one template comes as text (a GGUF file's tokenizer.chat_template, or a
// built-in one), with its special tokens as special_tokens() holds them. `source_name` names
// it in errors.
absl::StatusOr<ModelChatTemplate> MakeChatTemplate(const std::string& source, const std::string& source_name,
                                                   nlohmann::ordered_json special_tokens);

}  // namespace tpserve
