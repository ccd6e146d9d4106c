// Model-directory chat template loading and transformers' apply_chat_template input
// handling. Tested by tests/chat_template_test.cc with fixture model directories.
#include "coordinator/text/chat_template_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// The named special tokens transformers passes to templates (SPECIAL_TOKENS_ATTRIBUTES).
constexpr const char* kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                              "pad_token", "cls_token", "mask_token"};

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<Json> ReadJson(const fs::path& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  Json json = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not valid JSON"));
  }
  return json;
}

// A special token value: "<s>" or an AddedToken object {"content": "<s>", ...}.
std::optional<std::string> TokenContent(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

absl::Status AddTemplate(const std::string& name, std::string_view source,
                         const std::string& origin,
                         std::map<std::string, ChatTemplate, std::less<>>* templates) {
  auto parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(), absl::StrCat(origin, " (template '", name,
                                                             "'): ", parsed.status().message()));
  }
  templates->insert_or_assign(name, std::move(*parsed));
  return absl::OkStatus();
}

// tokenizer_config.json's or chat_template.json's "chat_template": a string or a list of
// {"name": ..., "template": ...} objects.
absl::Status AddConfigTemplates(const Json& value, const std::string& origin,
                                std::map<std::string, ChatTemplate, std::less<>>* templates) {
  if (value.is_string()) return AddTemplate("default", value.get<std::string>(), origin, templates);
  if (!value.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin,
        ": \"chat_template\" must be a string or a list of {\"name\", \"template\"} objects"));
  }
  for (const Json& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": each entry of \"chat_template\" needs a string \"name\" and \"template\""));
    }
    auto status = AddTemplate(entry["name"].get<std::string>(),
                              entry["template"].get<std::string>(), origin, templates);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// transformers drops message keys whose value is None, then copies reasoning given under
// any of its names to "thinking" and "reasoning_content"
// (chat_template_utils._alias_reasoning_fields).
absl::StatusOr<Json> NormalizeMessages(const Json& messages) {
  if (!messages.is_array()) {
    return absl::InvalidArgumentError("chat messages must be a JSON array of message objects");
  }
  if (messages.empty()) {
    return absl::InvalidArgumentError(
        "Cannot apply chat template to an empty conversation. Provide at least one message.");
  }
  Json out = Json::array();
  for (const Json& message : messages) {
    if (!message.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat messages must be JSON objects, got ", message.dump()));
    }
    Json cleaned = Json::object();
    for (const auto& [key, value] : message.items()) {
      if (!value.is_null()) cleaned[key] = value;
    }
    const Json* reasoning = nullptr;
    for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
      if (cleaned.contains(field)) {
        reasoning = &cleaned[field];
        break;
      }
    }
    if (reasoning != nullptr) {
      Json value = *reasoning;
      Json aliased = Json::object();
      aliased["thinking"] = value;
      for (const auto& [key, item] : cleaned.items()) aliased[key] = item;
      aliased["reasoning_content"] = value;
      cleaned = std::move(aliased);
    }
    out.push_back(std::move(cleaned));
  }
  return out;
}

}  // namespace

std::vector<std::string> ModelChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : templates_) names.push_back(name);
  return names;
}

const ChatTemplate* ModelChatTemplate::Find(std::string_view name) const {
  auto it = templates_.find(name);
  return it == templates_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::string> ModelChatTemplate::Apply(
    const Json& messages, const ApplyChatTemplateOptions& options) const {
  std::string name = options.template_name;
  if (name.empty()) {
    name = !options.tools.is_null() && Find("tool_use") != nullptr ? "tool_use" : "default";
  }
  const ChatTemplate* chat_template = Find(name);
  if (chat_template == nullptr) {
    return absl::NotFoundError(absl::StrCat("this model has no chat template named '", name,
                                            "'; it has: ", absl::StrJoin(template_names(), ", ")));
  }
  auto normalized = NormalizeMessages(messages);
  if (!normalized.ok()) return normalized.status();
  if (!options.extra_context.is_null() && !options.extra_context.is_object()) {
    return absl::InvalidArgumentError("extra chat template variables must be a JSON object");
  }
  Json context = special_tokens_;
  for (const auto& [key, value] : options.extra_context.items()) {
    if (key == "messages" || key == "tools" || key == "documents" ||
        key == "add_generation_prompt") {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", key, "' cannot be an extra chat template variable; it has its own option"));
    }
    context[key] = value;
  }
  context["messages"] = std::move(*normalized);
  context["tools"] = options.tools;
  context["documents"] = options.documents;
  context["add_generation_prompt"] = options.add_generation_prompt;
  return chat_template->Render(context, options.render);
}

absl::StatusOr<ModelChatTemplate> LoadChatTemplate(const std::string& model_dir) {
  const fs::path dir(model_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " does not exist"));
  }
  ModelChatTemplate result;

  Json config = Json::object();
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    auto parsed = ReadJson(config_path);
    if (!parsed.ok()) return parsed.status();
    if (!parsed->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path.string(), " must hold a JSON object"));
    }
    config = std::move(*parsed);
  }

  // Special tokens: tokenizer_config.json, overridden by special_tokens_map.json only for
  // configs without "added_tokens_decoder" (as transformers' legacy loading path does).
  Json tokens = Json::object();
  for (const char* name : kSpecialTokenNames) {
    if (config.contains(name)) tokens[name] = config[name];
  }
  const fs::path map_path = dir / "special_tokens_map.json";
  if (!config.contains("added_tokens_decoder") && fs::exists(map_path, ec)) {
    auto map = ReadJson(map_path);
    if (!map.ok()) return map.status();
    for (const char* name : kSpecialTokenNames) {
      if (map->is_object() && map->contains(name)) tokens[name] = (*map)[name];
    }
  }
  for (const char* name : kSpecialTokenNames) {
    if (!tokens.contains(name)) continue;
    if (auto content = TokenContent(tokens[name])) result.special_tokens_[name] = *content;
  }

  // Templates: .jinja files take precedence over the JSON configs.
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path, ec)) {
    auto source = ReadFile(jinja_path);
    if (!source.ok()) return source.status();
    auto status = AddTemplate("default", *source, jinja_path.string(), &result.templates_);
    if (!status.ok()) return status;
  }
  const fs::path extra_dir = dir / "additional_chat_templates";
  if (fs::is_directory(extra_dir, ec)) {
    for (const auto& entry : fs::directory_iterator(extra_dir, ec)) {
      if (entry.path().extension() != ".jinja") continue;
      auto source = ReadFile(entry.path());
      if (!source.ok()) return source.status();
      auto status = AddTemplate(entry.path().stem().string(), *source, entry.path().string(),
                                &result.templates_);
      if (!status.ok()) return status;
    }
  }
  if (result.templates_.empty() && config.contains("chat_template") &&
      !config["chat_template"].is_null()) {
    auto status =
        AddConfigTemplates(config["chat_template"], config_path.string(), &result.templates_);
    if (!status.ok()) return status;
  }
  const fs::path processor_path = dir / "chat_template.json";
  if (result.templates_.empty() && fs::exists(processor_path, ec)) {
    auto processor = ReadJson(processor_path);
    if (!processor.ok()) return processor.status();
    if (processor->is_object() && processor->contains("chat_template")) {
      auto status = AddConfigTemplates((*processor)["chat_template"], processor_path.string(),
                                       &result.templates_);
      if (!status.ok()) return status;
    }
  }
  if (result.templates_.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no chat template in ", model_dir,
        ": expected chat_template.jinja, a \"chat_template\" entry in tokenizer_config.json, or "
        "chat_template.json"));
  }
  return result;
}

absl::StatusOr<ModelChatTemplate> MakeChatTemplate(const std::string& source, const std::string& source_name,
                                                   nlohmann::ordered_json special_tokens) {
  ModelChatTemplate result;
  if (absl::Status added = AddTemplate("default", source, source_name, &result.templates_); !added.ok()) return added;
  result.special_tokens_ = std::move(special_tokens);
  return result;
}

}  // namespace tpserve
