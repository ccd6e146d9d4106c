// The JSON Schema compiler (json_schema.h): one walk over the schema that emits a
// GrammarBuilder rule per object, array, bounded string and enum, and calls the shared
// JsonRules for the rest. Tested by tests/structured_output_test.cc.
#include "coordinator/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/structured/grammar_builder.h"
#include "coordinator/structured/regex_subset.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;
using Rule = GrammarBuilder::Rule;
using Node = GrammarBuilder::Node;

constexpr int kMaxSchemaDepth = 128;

bool IsAnnotation(std::string_view key) {
  return key == "title" || key == "description" || key == "examples" || key == "default" || key == "$schema" ||
         key == "$id" || key == "$comment" || key == "deprecated" || key == "readOnly" || key == "writeOnly";
}
// Keywords that hold definitions rather than constrain the value.
bool IsContainer(std::string_view key) { return key == "$defs" || key == "definitions"; }
bool IsSupported(std::string_view key) {
  static constexpr std::string_view kKeywords[] = {
      "type",  "enum",     "const",     "properties", "required", "additionalProperties",
      "items", "minItems", "maxItems",  "anyOf",      "oneOf",    "allOf",
      "$ref",  "pattern",  "minLength", "maxLength"};
  for (const std::string_view k : kKeywords) {
    if (key == k) return true;
  }
  return IsAnnotation(key) || IsContainer(key);
}

// JSON pointer escaping of one key (RFC 6901).
std::string PointerToken(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

bool TypeMatches(const Json& value, std::string_view type) {
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    return value.is_number_float() && std::isfinite(value.get<double>()) &&
           value.get<double>() == std::floor(value.get<double>());
  }
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), b_(options.max_states), json_(&b_, options.text) {}

  // The document: optional whitespace, a value of `root_`, optional whitespace.
  absl::StatusOr<std::shared_ptr<const Grammar>> CompileDocument(bool any_object) {
    std::vector<Rule> value;
    if (any_object) {
      value = {json_.AnyObject()};
    } else {
      TP_ASSIGN_OR_RETURN(value, Value(root_, "#", 0));
    }
    const Rule document = b_.DeclareRule("the document");
    const Node start = b_.NewNode();
    b_.DefineRule(document, start, json_.Whitespace(b_.CallAny(json_.Whitespace(start), value)));
    auto grammar = b_.Build(document);
    if (!grammar.ok()) {
      std::string message(grammar.status().message());
      if (absl::IsResourceExhausted(grammar.status())) {
        absl::StrAppend(&message,
                        ": lower maxItems, maxLength, 'pattern' repetition counts or the number of enum values");
      }
      return absl::InvalidArgumentError(absl::StrCat(options_.error_prefix, ": ", message));
    }
    return grammar;
  }

 private:
  // "<prefix>: <subject> at <path> <predicate>[; <hint>]".
  absl::Status Error(absl::string_view path, absl::string_view subject, absl::string_view predicate,
                     absl::string_view hint = "") const {
    return absl::InvalidArgumentError(absl::StrCat(options_.error_prefix, ": ", subject, " at ", path, " ", predicate,
                                                   hint.empty() ? "" : "; ", hint));
  }
  absl::Status TooLarge(absl::string_view path) const {
    return Error(path, "the schema", absl::StrCat("needs more than ", options_.max_states, " automaton states"),
                 "lower maxItems, maxLength or the counts in 'pattern'");
  }

  // The rules any of which a value of `schema` matches.
  absl::StatusOr<std::vector<Rule>> Value(const Json& schema, const std::string& path, int depth) {
    if (depth > kMaxSchemaDepth)
      return Error(path, "the schema", absl::StrCat("is nested deeper than ", kMaxSchemaDepth, " levels"));
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::vector<Rule>{json_.AnyValue()};
      return Error(path, "the schema false", "admits no value");
    }
    if (!schema.is_object()) return Error(path, "the schema", "must be an object or a boolean");
    std::vector<std::string> constraints;  // keywords other than annotations and containers
    for (const auto& [key, unused] : schema.items()) {
      if (!IsSupported(key)) {
        return Error(path, absl::StrCat("keyword '", key, "'"), "is not supported");
      }
      if (!IsAnnotation(key) && !IsContainer(key)) constraints.push_back(key);
    }
    std::string memo_key = schema.dump();
    if (const auto it = memo_.find(memo_key); it != memo_.end()) return it->second;
    std::vector<Rule> rules;
    TP_ASSIGN_OR_RETURN(rules, Dispatch(schema, path, depth, constraints));
    memo_.emplace(std::move(memo_key), rules);
    return rules;
  }

  absl::Status OnlyKeyword(absl::string_view keyword, const std::vector<std::string>& constraints,
                           absl::string_view path) const {
    for (const std::string& k : constraints) {
      if (k != keyword)
        return Error(path, absl::StrCat("keyword '", k, "' beside '", keyword, "'"), "is not supported");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Rule>> Dispatch(const Json& schema, const std::string& path, int depth,
                                             const std::vector<std::string>& constraints) {
    if (schema.contains("$ref")) {
      TP_RETURN_IF_ERROR(OnlyKeyword("$ref", constraints, path));
      TP_ASSIGN_OR_RETURN(const Rule rule, Ref(schema["$ref"], path + "/$ref", depth));
      return std::vector<Rule>{rule};
    }
    if (schema.contains("allOf")) {
      TP_RETURN_IF_ERROR(OnlyKeyword("allOf", constraints, path));
      const Json& all = schema["allOf"];
      if (!all.is_array() || all.size() != 1)
        return Error(path + "/allOf", "'allOf' with other than one schema", "is not supported");
      return Value(all[0], path + "/allOf/0", depth + 1);
    }
    for (const char* keyword : {"anyOf", "oneOf"}) {
      if (!schema.contains(keyword)) continue;
      TP_RETURN_IF_ERROR(OnlyKeyword(keyword, constraints, path));
      const Json& branches = schema[keyword];
      const std::string at = absl::StrCat(path, "/", keyword);
      if (!branches.is_array() || branches.empty())
        return Error(at, absl::StrCat("'", keyword, "'"), "must be a non-empty array");
      std::vector<Rule> rules;
      for (size_t i = 0; i < branches.size(); ++i) {
        TP_ASSIGN_OR_RETURN(const std::vector<Rule> branch, Value(branches[i], absl::StrCat(at, "/", i), depth + 1));
        rules.insert(rules.end(), branch.begin(), branch.end());
      }
      return rules;
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      if (type.is_string()) {
        types.push_back(type.get<std::string>());
      } else if (type.is_array() && !type.empty() &&
                 std::all_of(type.begin(), type.end(), [](const Json& t) { return t.is_string(); })) {
        for (const Json& t : type) types.push_back(t.get<std::string>());
      } else {
        return Error(path + "/type", "'type'", "must be a string or a non-empty array of strings");
      }
    }
    if (schema.contains("enum") || schema.contains("const")) {
      TP_ASSIGN_OR_RETURN(const Rule rule, Enum(schema, path, types, constraints));
      return std::vector<Rule>{rule};
    }
    if (types.empty()) {  // the types the keywords imply
      const auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (schema.contains(k)) return true;
        }
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "minItems", "maxItems"})) types.push_back("array");
      if (has({"pattern", "minLength", "maxLength"})) types.push_back("string");
      if (types.empty()) return std::vector<Rule>{json_.AnyValue()};
    }
    std::vector<Rule> rules;
    for (const std::string& type : types) {
      if (type == "string") {
        TP_ASSIGN_OR_RETURN(const Rule rule, String(schema, path));
        rules.push_back(rule);
      } else if (type == "number") {
        rules.push_back(json_.Number());
      } else if (type == "integer") {
        rules.push_back(json_.Integer());
      } else if (type == "boolean") {
        rules.push_back(json_.Boolean());
      } else if (type == "null") {
        rules.push_back(json_.Null());
      } else if (type == "object") {
        TP_ASSIGN_OR_RETURN(const Rule rule, Object(schema, path, depth));
        rules.push_back(rule);
      } else if (type == "array") {
        TP_ASSIGN_OR_RETURN(const Rule rule, Array(schema, path, depth));
        rules.push_back(rule);
      } else if (type == "json_object" && path == "#") {
        rules.push_back(json_.AnyObject());
      } else {
        return Error(path + "/type", absl::StrCat("type '", type, "'"), "is not supported");
      }
    }
    return rules;
  }

  // A rule for the local reference `ref` (recursion reaches the rule being defined).
  absl::StatusOr<Rule> Ref(const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Error(path, "'$ref'", "must be a string");
    const std::string pointer = ref.get<std::string>();
    if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    if (pointer.empty() || pointer[0] != '#') {
      return Error(path, absl::StrCat("'$ref' \"", pointer, "\""), "is not supported",
                   "only references into this schema (\"#/$defs/...\") are");
    }
    const Json* target = &root_;
    size_t pos = 1;
    while (pos < pointer.size()) {
      if (pointer[pos] != '/') return Error(path, absl::StrCat("'$ref' \"", pointer, "\""), "is not a JSON pointer");
      const size_t end = std::min(pointer.find('/', pos + 1), pointer.size());
      std::string token;
      for (size_t i = pos + 1; i < end; ++i) {
        if (pointer[i] == '~' && i + 1 < end && (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
          token.push_back(pointer[++i] == '0' ? '~' : '/');
        } else {
          token.push_back(pointer[i]);
        }
      }
      if (target->is_object() && target->contains(token)) {
        target = &(*target)[token];
      } else if (target->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(token) < target->size()) {
        target = &(*target)[std::stoull(token)];
      } else {
        return Error(path, absl::StrCat("'$ref' \"", pointer, "\""), "does not exist");
      }
      pos = end;
    }
    const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", pointer));
    refs_.emplace(pointer, rule);
    TP_ASSIGN_OR_RETURN(const std::vector<Rule> alternatives, Value(*target, pointer, depth + 1));
    const Node start = b_.NewNode();
    b_.DefineRule(rule, start, b_.CallAny(start, alternatives));
    return rule;
  }

  absl::StatusOr<Rule> Enum(const Json& schema, const std::string& path, const std::vector<std::string>& types,
                            const std::vector<std::string>& constraints) {
    for (const std::string& k : constraints) {
      if (k != "enum" && k != "const" && k != "type") {
        return Error(path, absl::StrCat("keyword '", k, "' beside 'enum'/'const'"), "is not supported");
      }
    }
    std::vector<const Json*> values;
    if (schema.contains("enum")) {
      const Json& list = schema["enum"];
      if (!list.is_array() || list.empty()) return Error(path + "/enum", "'enum'", "must be a non-empty array");
      for (const Json& v : list) values.push_back(&v);
    }
    if (schema.contains("const")) {
      const Json& c = schema["const"];
      if (values.empty() && !schema.contains("enum")) {
        values.push_back(&c);
      } else {
        std::erase_if(values, [&](const Json* v) { return *v != c; });
      }
    }
    std::erase_if(values, [&](const Json* v) {
      return !types.empty() &&
             std::none_of(types.begin(), types.end(), [&](const std::string& t) { return TypeMatches(*v, t); });
    });
    if (values.empty()) return Error(path, "'enum'/'const'", "leaves no value of the allowed types");
    const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", path));
    const Node start = b_.NewNode();
    const Node accept = b_.NewNode();
    for (const Json* v : values) b_.Epsilon(b_.Literal(start, v->dump()), accept);
    if (b_.TooLarge()) return TooLarge(path);
    b_.DefineRule(rule, start, accept);
    return rule;
  }

  // A non-negative integer keyword, or `absent`.
  absl::StatusOr<int64_t> Count(const Json& schema, const char* keyword, const std::string& path, int64_t absent) {
    if (!schema.contains(keyword)) return absent;
    const Json& v = schema[keyword];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Error(absl::StrCat(path, "/", keyword), absl::StrCat("'", keyword, "'"), "must be a non-negative integer");
    }
    return v.get<int64_t>();
  }
  absl::Status CheckUnrollable(int64_t n, const char* keyword, const std::string& path) const {
    if (n <= options_.max_repetition) return absl::OkStatus();
    return Error(absl::StrCat(path, "/", keyword), absl::StrCat("'", keyword, "' ", n),
                 absl::StrCat("is above ", options_.max_repetition, ", the largest count supported"));
  }

  absl::StatusOr<Rule> String(const Json& schema, const std::string& path) {
    const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("pattern")) {
      if (has_length) return Error(path, "'pattern' together with 'minLength'/'maxLength'", "is not supported");
      const Json& pattern = schema["pattern"];
      if (!pattern.is_string()) return Error(path + "/pattern", "'pattern'", "must be a string");
      const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", path));
      const Node start = b_.NewNode();
      auto contents =
          BuildPatternContents(b_, b_.Range(start, '"', '"'), pattern.get<std::string>(), options_.max_repetition);
      if (!contents.ok()) {
        if (absl::IsResourceExhausted(contents.status())) return TooLarge(path + "/pattern");
        return Error(path + "/pattern", absl::StrCat("'pattern' ", Json(pattern).dump()),
                     absl::StrCat("cannot be compiled: ", contents.status().message()));
      }
      b_.DefineRule(rule, start, b_.Range(*contents, '"', '"'));
      return rule;
    }
    if (!has_length) return json_.String();
    TP_ASSIGN_OR_RETURN(const int64_t min, Count(schema, "minLength", path, 0));
    TP_ASSIGN_OR_RETURN(const int64_t max, Count(schema, "maxLength", path, -1));
    if (max >= 0 && max < min) return Error(path, "'maxLength' below 'minLength'", "admits no value");
    TP_RETURN_IF_ERROR(CheckUnrollable(min, "minLength", path));
    TP_RETURN_IF_ERROR(CheckUnrollable(max, "maxLength", path));
    if (min == 0 && max < 0) return json_.String();
    const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", path));
    const Node start = b_.NewNode();
    Node at = b_.Range(start, '"', '"');
    for (int64_t i = 0; i < min; ++i) at = AnyEncodedChar(b_, at);
    const Node end = b_.NewNode();
    if (max < 0) {
      const Node loop = b_.NewNode();
      b_.Epsilon(at, loop);
      AnyEncodedCharInto(b_, loop, loop);
      b_.Epsilon(loop, end);
    } else {
      b_.Epsilon(at, end);
      for (int64_t i = min; i < max && !b_.TooLarge(); ++i) {
        at = AnyEncodedChar(b_, at);
        b_.Epsilon(at, end);
      }
    }
    if (b_.TooLarge()) return TooLarge(path);
    b_.DefineRule(rule, start, b_.Range(end, '"', '"'));
    return rule;
  }

  absl::StatusOr<Rule> Object(const Json& schema, const std::string& path, int depth) {
    const Json empty = Json::object();
    const Json& properties = schema.contains("properties") ? schema["properties"] : empty;
    if (!properties.is_object()) return Error(path + "/properties", "'properties'", "must be an object");
    if (schema.contains("additionalProperties")) {
      const Json& extra = schema["additionalProperties"];
      const bool allows_any = (extra.is_boolean() && extra.get<bool>()) || (extra.is_object() && extra.empty());
      if (allows_any && properties.empty() && !schema.contains("required")) return json_.AnyObject();
      if (!extra.is_boolean() || extra.get<bool>()) {
        return Error(path + "/additionalProperties", "'additionalProperties' other than false",
                     "is not supported beside 'properties' or 'required', or as a schema",
                     "list every property under 'properties'");
      }
    } else if (!schema.contains("properties") && !schema.contains("required")) {
      return json_.AnyObject();
    }
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const Json& list = schema["required"];
      if (!list.is_array()) return Error(path + "/required", "'required'", "must be an array of strings");
      for (const Json& name : list) {
        if (!name.is_string()) return Error(path + "/required", "'required'", "must be an array of strings");
        if (!properties.contains(name.get<std::string>())) {
          return Error(path + "/required", absl::StrCat("required property '", name.get<std::string>(), "'"),
                       "is not in 'properties'", "no other properties are allowed");
        }
        required.insert(name.get<std::string>());
      }
    }
    struct Property {
      std::string key_json;  // the key as JSON text, quotes included
      std::vector<Rule> value;
      bool required;
    };
    std::vector<Property> props;
    for (const auto& [key, sub] : properties.items()) {
      const std::string at = absl::StrCat(path, "/properties/", PointerToken(key));
      if (sub.is_boolean() && !sub.get<bool>()) {  // the property must not appear
        if (required.contains(key)) return Error(at, "a required property with the schema false", "admits no value");
        continue;
      }
      TP_ASSIGN_OR_RETURN(std::vector<Rule> value, Value(sub, at, depth + 1));
      props.push_back({Json(key).dump(), std::move(value), required.contains(key)});
    }
    const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", path));
    const Node start = b_.NewNode();
    const Node accept = b_.NewNode();
    const Node open = json_.Whitespace(b_.Range(start, '{', '{'));
    // at[e]: before property i, e = whether one was written (a comma comes first).
    Node at[2] = {open, b_.NewNode()};
    bool reachable[2] = {true, false};
    for (const Property& p : props) {
      Node next[2] = {b_.NewNode(), b_.NewNode()};
      bool next_reachable[2] = {false, false};
      for (int e = 0; e < 2; ++e) {
        if (!reachable[e]) continue;
        Node from = at[e];
        if (e == 1) from = json_.Whitespace(b_.Range(json_.Whitespace(from), ',', ','));
        const Node colon = b_.Range(json_.Whitespace(b_.Literal(from, p.key_json)), ':', ':');
        b_.Epsilon(b_.CallAny(json_.Whitespace(colon), p.value), next[1]);
        next_reachable[1] = true;
        if (!p.required) {
          b_.Epsilon(at[e], next[e]);
          next_reachable[e] = true;
        }
      }
      at[0] = next[0];
      at[1] = next[1];
      reachable[0] = next_reachable[0];
      reachable[1] = next_reachable[1];
    }
    if (reachable[0]) b_.Bytes(at[0], accept, '}', '}');
    if (reachable[1]) b_.Bytes(json_.Whitespace(at[1]), accept, '}', '}');
    if (b_.TooLarge()) return TooLarge(path);
    b_.DefineRule(rule, start, accept);
    return rule;
  }

  absl::StatusOr<Rule> Array(const Json& schema, const std::string& path, int depth) {
    TP_ASSIGN_OR_RETURN(const int64_t min, Count(schema, "minItems", path, 0));
    TP_ASSIGN_OR_RETURN(int64_t max, Count(schema, "maxItems", path, -1));
    if (max >= 0 && max < min) return Error(path, "'maxItems' below 'minItems'", "admits no value");
    std::vector<Rule> item;
    if (!schema.contains("items") || (schema["items"].is_boolean() && schema["items"].get<bool>())) {
      item = {json_.AnyValue()};
    } else if (schema["items"].is_boolean()) {  // items: false
      if (min > 0) return Error(path, "'items' false with 'minItems' above 0", "admits no value");
      max = 0;
    } else {
      TP_ASSIGN_OR_RETURN(item, Value(schema["items"], path + "/items", depth + 1));
    }
    TP_RETURN_IF_ERROR(CheckUnrollable(min, "minItems", path));
    TP_RETURN_IF_ERROR(CheckUnrollable(max, "maxItems", path));
    const Rule rule = b_.DeclareRule(absl::StrCat("the schema at ", path));
    const Node start = b_.NewNode();
    const Node accept = b_.NewNode();
    const Node open = json_.Whitespace(b_.Range(start, '[', '['));
    if (min == 0) b_.Bytes(open, accept, ']', ']');
    if (max != 0) {
      Node after = b_.CallAny(open, item);  // after item k (fresh: loops may come back to it)
      for (int64_t k = 1;; ++k) {
        const Node gap = json_.Whitespace(after);
        if (k >= min) b_.Bytes(gap, accept, ']', ']');
        if (k == max) break;
        const Node next_item = json_.Whitespace(b_.Range(gap, ',', ','));
        if (max < 0 && k >= std::max<int64_t>(min, 1)) {
          b_.Epsilon(b_.CallAny(next_item, item), after);
          break;
        }
        after = b_.CallAny(next_item, item);
        if (b_.TooLarge()) return TooLarge(path);
      }
    }
    if (b_.TooLarge()) return TooLarge(path);
    b_.DefineRule(rule, start, accept);
    return rule;
  }

  const Json& root_;
  const JsonSchemaOptions& options_;
  GrammarBuilder b_;
  JsonRules json_;
  absl::flat_hash_map<std::string, std::vector<Rule>> memo_;  // by the subschema's text
  absl::flat_hash_map<std::string, Rule> refs_;               // by JSON pointer
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarFromJsonSchema(const nlohmann::ordered_json& schema,
                                                                     const JsonSchemaOptions& options) {
  const bool json_object_mode =
      schema.is_object() && schema.size() == 1 && schema.contains("type") && schema["type"] == "json_object";
  return SchemaCompiler(schema, options).CompileDocument(json_object_mode);
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarFromJsonSchemaText(std::string_view schema_text,
                                                                         const JsonSchemaOptions& options) {
  Json schema = Json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(options.error_prefix, ": the schema is not valid JSON"));
  }
  return GrammarFromJsonSchema(schema, options);
}

absl::StatusOr<std::shared_ptr<const Grammar>> GrammarForAnyJsonObject(const JsonSchemaOptions& options) {
  return SchemaCompiler(Json::object(), options).CompileDocument(/*any_object=*/true);
}

}  // namespace tpserve
