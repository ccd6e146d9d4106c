// `tools` checked, and the JSON schemas and calls of tool_choice "required" or a named function
// (tool_calls.h). Tested by tests/tool_call_test.cc.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/tool_call_syntax.h"
#include "coordinator/text/tool_calls.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;
using tool_call_internal::DumpJson;
using tool_call_internal::ParseJson;

absl::Status ToolError(size_t index, std::string_view field, std::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("tools[", index, "]", std::string(field), ": ", std::string(problem)));
}

// tools[index].function's `key`, where present and not null, must be of type `kind`.
absl::Status CheckOptional(const Json& function, const char* key, Json::value_t kind, size_t index,
                           std::string_view problem) {
  auto it = function.find(key);
  if (it == function.end() || it->is_null() || it->type() == kind) return absl::OkStatus();
  return ToolError(index, absl::StrCat(".function.", key), problem);
}

absl::Status ValidateTool(const Json& tool, size_t index) {
  if (!tool.is_object()) return ToolError(index, "", "must be an object {\"type\": \"function\", \"function\": {...}}");
  if (auto type = tool.find("type"); type != tool.end() && *type != "function") {
    return ToolError(index, ".type", "must be \"function\", the only kind of tool served");
  }
  auto function = tool.find("function");
  if (function == tool.end() || !function->is_object()) {
    return ToolError(index, ".function", "must be an object with the function's name, description and parameters");
  }
  auto name = function->find("name");
  if (name == function->end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return ToolError(index, ".function.name", "must be a non-empty string");
  }
  if (absl::Status s = CheckOptional(*function, "description", Json::value_t::string, index, "must be a string");
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckOptional(*function, "parameters", Json::value_t::object, index,
                        "must be a JSON Schema object, e.g. {\"type\": \"object\", \"properties\": {...}}");
      !s.ok()) {
    return s;
  }
  return CheckOptional(*function, "strict", Json::value_t::boolean, index, "must be true or false");
}

// Of a validated tool.
const std::string& FunctionName(const Json& tool) {
  return tool.at("function").at("name").get_ref<const std::string&>();
}

// A function's parameters schema; an object with no properties when it has none.
Json ParametersOf(const Json& tool) {
  const Json& function = tool.at("function");
  auto parameters = function.find("parameters");
  if (parameters == function.end() || parameters->is_null())
    return {{"type", "object"}, {"properties", Json::object()}};
  return *parameters;
}

}  // namespace

absl::Status ValidateTools(const Json& tools) {
  if (!tools.is_array()) {
    return absl::InvalidArgumentError("tools: must be an array of {\"type\": \"function\", \"function\": {...}}");
  }
  absl::flat_hash_map<std::string, size_t> first_index;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (absl::Status s = ValidateTool(tools[i], i); !s.ok()) return s;
    auto [it, inserted] = first_index.emplace(FunctionName(tools[i]), i);
    if (!inserted) {
      return ToolError(i, ".function.name",
                       absl::StrCat("\"", it->first, "\" is also tools[", it->second, "]'s; names must be unique"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NamedToolSchema(const Json& tools, std::string_view name) {
  if (absl::Status s = ValidateTools(tools); !s.ok()) return s;
  for (const Json& tool : tools) {
    if (FunctionName(tool) == name) return DumpJson(ParametersOf(tool));
  }
  return absl::InvalidArgumentError(absl::StrCat("tool_choice: function \"", std::string(name),
                                                 "\" is not in tools; name one of the request's functions"));
}

absl::StatusOr<std::string> RequiredToolsSchema(const Json& tools) {
  if (absl::Status s = ValidateTools(tools); !s.ok()) return s;
  if (tools.empty()) return absl::InvalidArgumentError("tool_choice: \"required\" needs at least one tool in tools");
  Json any_of = Json::array();
  for (const Json& tool : tools) {
    any_of.push_back({{"type", "object"},
                      {"properties", {{"name", {{"const", FunctionName(tool)}}}, {"parameters", ParametersOf(tool)}}},
                      {"required", {"name", "parameters"}}});
  }
  return DumpJson({{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(any_of)}}}});
}

absl::StatusOr<std::vector<ToolCall>> ToolCallsFromConstrainedOutput(std::string_view output,
                                                                     std::string_view named_function,
                                                                     uint64_t id_seed) {
  ToolCallIdGenerator ids(id_seed);
  std::optional<Json> json = ParseJson(output);
  if (!named_function.empty()) {
    if (!json || !json->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the arguments of \"", std::string(named_function), "\" are not a JSON object"));
    }
    return std::vector<ToolCall>{{ids.Next(), std::string(named_function), DumpJson(*json)}};
  }
  if (!json || !json->is_array() || json->empty()) {
    return absl::InvalidArgumentError("the tool calls are not a JSON array of {\"name\": ..., \"parameters\": {...}}");
  }
  std::vector<ToolCall> calls;
  for (const Json& each : *json) {
    std::optional<tool_call_internal::ParsedCall> call = tool_call_internal::CallFromJson(each);
    if (!call)
      return absl::InvalidArgumentError(
          absl::StrCat("tool call ", calls.size(), " is not {\"name\": ..., \"parameters\": {...}}"));
    calls.push_back({ids.Next(), std::move(call->name), std::move(call->arguments)});
  }
  return calls;
}

}  // namespace tpserve
