// The tool-call formats' syntax (tool_call_syntax.h). Tested through tests/tool_call_test.cc.
#include "coordinator/text/tool_call_syntax.h"

#include <algorithm>
#include <utility>

namespace tpserve::tool_call_internal {
namespace {

using Json = nlohmann::ordered_json;

// Deeper JSON than any tool's arguments plausibly need; refused (dumping recurses).
constexpr int kMaxJsonDepth = 64;
constexpr std::string_view kSpace = " \t\r\n";

const Json* Member(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool ConsumePrefix(std::string_view& text, std::string_view prefix) {
  if (!text.starts_with(prefix)) return false;
  text.remove_prefix(prefix.size());
  return true;
}

bool ConsumeSuffix(std::string_view& text, std::string_view suffix) {
  if (!text.ends_with(suffix)) return false;
  text.remove_suffix(suffix.size());
  return true;
}

std::string_view StripLeadingSpace(std::string_view text) {
  return text.substr(std::min(text.find_first_not_of(kSpace), text.size()));
}

std::string_view StripSpace(std::string_view text) {
  text = StripLeadingSpace(text);
  return text.substr(0, text.find_last_not_of(kSpace) + 1);
}

// Where `marker` starts in `text`: complete at its first occurrence, else partial at the
// longest tail of `text` that begins it.
BlockStart FindMarker(std::string_view text, std::string_view marker) {
  if (size_t pos = text.find(marker); pos != kNoPos) return {pos, true};
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.ends_with(marker.substr(0, n))) return {text.size() - n, false};
  }
  return {};
}

// Just past the bracket that closes the one at text[start + scan.resume], over JSON strings;
// kNoPos when it does not close in `text` (scan records how far it got).
size_t JsonValueEnd(std::string_view text, size_t start, EndScan& scan) {
  for (size_t i = start + scan.resume; i < text.size(); ++i) {
    const char c = text[i];
    if (scan.escaped) {
      scan.escaped = false;
    } else if (scan.in_string) {
      scan.escaped = c == '\\';
      scan.in_string = c != '"';
    } else if (c == '"') {
      scan.in_string = true;
    } else if (c == '{' || c == '[') {
      ++scan.depth;
    } else if ((c == '}' || c == ']') && --scan.depth == 0) {
      return i + 1;
    }
  }
  scan.resume = text.size() - start;
  return kNoPos;
}

// ---- Formats whose calls sit between an opening and a closing marker.
class TaggedSyntax : public ToolCallSyntax {
 public:
  TaggedSyntax(std::string_view open, std::string_view close) : open_(open), close_(close) {}

  BlockStart FindStart(std::string_view text, bool at_boundary) const override { return FindMarker(text, open_); }
  // The first closing marker ends the block, even one inside an argument's text: such a call
  // is cut short there, and reads as content.
  size_t FindEnd(std::string_view text, size_t start, EndScan& scan) const override {
    size_t pos = text.find(close_, start + std::max(scan.resume, open_.size()));
    if (pos != kNoPos) return pos + close_.size();
    scan.resume = text.size() - start - std::min(text.size() - start, close_.size() - 1);
    return kNoPos;
  }
  std::optional<ParsedCall> ParseBlock(std::string_view block) const override {
    ConsumePrefix(block, open_);
    ConsumeSuffix(block, close_);
    return ParseBody(StripSpace(block));
  }

 protected:
  // The text between the markers, whitespace stripped.
  virtual std::optional<ParsedCall> ParseBody(std::string_view body) const = 0;

 private:
  std::string_view open_;
  std::string_view close_;
};

// Gemma 4's argument syntax: JSON's structure, with <|"|> around strings (no escapes inside),
// bare keys, and bare words for other values (true, false, None or null, numbers).
class Gemma4ValueReader {
 public:
  explicit Gemma4ValueReader(std::string_view text) : text_(text) {}

  // The whole text as one value.
  std::optional<Json> ReadAll() {
    std::optional<Json> value = Value(0);
    SkipSpace();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  static constexpr std::string_view kQuote = "<|\"|>";

  std::optional<Json> Value(int depth) {
    if (depth > kMaxJsonDepth) return std::nullopt;
    if (Consume("{")) return Object(depth + 1);
    if (Consume("[")) return Array(depth + 1);
    if (Rest().starts_with(kQuote)) return Quoted();
    return Bare();
  }

  std::optional<Json> Object(int depth) {
    Json object = Json::object();
    if (Consume("}")) return object;
    do {
      std::optional<Json> key = Rest().starts_with(kQuote) ? Quoted() : BareKey();
      if (!key || !Consume(":")) return std::nullopt;
      std::optional<Json> value = Value(depth);
      if (!value) return std::nullopt;
      object[key->get<std::string>()] = std::move(*value);
    } while (Consume(","));
    if (!Consume("}")) return std::nullopt;
    return object;
  }

  std::optional<Json> Array(int depth) {
    Json array = Json::array();
    if (Consume("]")) return array;
    do {
      std::optional<Json> value = Value(depth);
      if (!value) return std::nullopt;
      array.push_back(std::move(*value));
    } while (Consume(","));
    if (!Consume("]")) return std::nullopt;
    return array;
  }

  std::optional<Json> Quoted() {
    SkipSpace();
    pos_ += kQuote.size();
    size_t end = text_.find(kQuote, pos_);
    if (end == kNoPos) return std::nullopt;
    Json text = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + kQuote.size();
    return text;
  }

  std::optional<Json> BareKey() {
    std::string_view key = StripSpace(Until(":{}[],"));
    if (key.empty()) return std::nullopt;
    return Json(std::string(key));
  }

  // A word that is not JSON is taken as a string, as a model that forgot the quotes meant it.
  std::optional<Json> Bare() {
    std::string_view word = StripSpace(Until(",}]"));
    if (word.empty() || word.find(kQuote) != kNoPos) return std::nullopt;
    if (word == "None") return Json(nullptr);
    std::optional<Json> json = ParseJson(word);
    if (json && json->is_primitive()) return json;
    return Json(std::string(word));
  }

  std::string_view Until(std::string_view stops) {
    size_t end = std::min(text_.find_first_of(stops, pos_), text_.size());
    std::string_view word = text_.substr(pos_, end - pos_);
    pos_ = end;
    return word;
  }

  bool Consume(std::string_view token) {
    SkipSpace();
    if (!Rest().starts_with(token)) return false;
    pos_ += token.size();
    return true;
  }

  void SkipSpace() { pos_ = std::min(text_.find_first_not_of(kSpace, pos_), text_.size()); }

  std::string_view Rest() const { return text_.substr(pos_); }

  std::string_view text_;
  size_t pos_ = 0;
};

// <|tool_call>call:NAME{ARGUMENTS}<tool_call|>
class Gemma4Syntax : public TaggedSyntax {
 public:
  Gemma4Syntax() : TaggedSyntax("<|tool_call>", "<tool_call|>") {}

 protected:
  std::optional<ParsedCall> ParseBody(std::string_view body) const override {
    if (!ConsumePrefix(body, "call:")) return std::nullopt;
    size_t brace = body.find('{');
    if (brace == kNoPos || brace == 0) return std::nullopt;
    std::string_view name = body.substr(0, brace);
    std::string_view braced = body.substr(brace);
    std::optional<Json> arguments = Gemma4ValueReader(braced).ReadAll();
    // The template writes arguments that a client sent as a JSON string inside the braces.
    if (!arguments && braced.ends_with('}')) arguments = ParseJson(braced.substr(1, braced.size() - 2));
    if (!arguments || !arguments->is_object() || name.find_first_of(kSpace) != kNoPos) return std::nullopt;
    return ParsedCall{std::string(name), DumpJson(*arguments)};
  }
};

// <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
class HermesSyntax : public TaggedSyntax {
 public:
  HermesSyntax() : TaggedSyntax("<tool_call>", "</tool_call>") {}

 protected:
  std::optional<ParsedCall> ParseBody(std::string_view body) const override {
    std::optional<Json> call = ParseJson(body);
    return call ? CallFromJson(*call) : std::nullopt;
  }
};

// <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Values are bare text, typed by the parameter's schema in the request's tools.
class Qwen3CoderSyntax : public TaggedSyntax {
 public:
  explicit Qwen3CoderSyntax(Json tools) : TaggedSyntax("<tool_call>", "</tool_call>"), tools_(std::move(tools)) {}

 protected:
  std::optional<ParsedCall> ParseBody(std::string_view body) const override {
    std::optional<std::string_view> name = Tag(body, "<function=");
    if (!name) return std::nullopt;
    const Json* properties = Properties(*name);
    Json arguments = Json::object();
    body = StripLeadingSpace(body);
    while (!ConsumePrefix(body, "</function>")) {
      std::optional<std::string_view> key = Tag(body, "<parameter=");
      size_t end = body.find("</parameter>");
      if (!key || end == kNoPos) return std::nullopt;
      std::string_view value = body.substr(0, end);
      ConsumePrefix(value, "\n");
      ConsumeSuffix(value, "\n");
      arguments[std::string(*key)] = TypedValue(value, properties ? Member(*properties, *key) : nullptr);
      body = StripLeadingSpace(body.substr(end + std::string_view("</parameter>").size()));
    }
    if (!StripSpace(body).empty()) return std::nullopt;
    return ParsedCall{std::string(*name), DumpJson(arguments)};
  }

 private:
  // "<function=NAME>" at the front of *text: NAME, consumed.
  static std::optional<std::string_view> Tag(std::string_view& text, std::string_view open) {
    if (!ConsumePrefix(text, open)) return std::nullopt;
    size_t close = text.find('>');
    if (close == kNoPos || close == 0) return std::nullopt;
    std::string_view name = text.substr(0, close);
    text.remove_prefix(close + 1);
    return name;
  }

  // The named function's parameters' "properties" schema, if the tools give one.
  const Json* Properties(std::string_view name) const {
    if (!tools_.is_array()) return nullptr;
    for (const Json& tool : tools_) {
      const Json* function = Member(tool, "function");
      const Json* function_name = function ? Member(*function, "name") : nullptr;
      if (!function_name || !function_name->is_string() || function_name->get_ref<const std::string&>() != name) {
        continue;
      }
      const Json* parameters = Member(*function, "parameters");
      return parameters ? Member(*parameters, "properties") : nullptr;
    }
    return nullptr;
  }

  // As vLLM's qwen3_coder parser reads a value: text for a string parameter; null, a number, a
  // boolean, an object or an array where the schema asks for one and the text is one (Python's
  // True, False and None too, as the template writes them); text where it is not. A parameter
  // the schema does not type is read as JSON where the text is JSON.
  static Json TypedValue(std::string_view text, const Json* schema) {
    auto [type, nullable] = TypeOf(schema);
    if ((text == "null" || text == "None") && (nullable || type != "string")) return nullptr;
    if (type == "string") return std::string(text);
    if ((text == "True" || text == "False") && (type.empty() || type == "boolean")) return text == "True";
    std::optional<Json> value = ParseJson(text);
    if (value && HasType(*value, type)) return *value;
    return std::string(text);
  }

  // The first non-null JSON type a schema names ("" when none), and whether it admits null.
  static std::pair<std::string, bool> TypeOf(const Json* schema) {
    std::pair<std::string, bool> type_and_nullable;
    if (!schema) return type_and_nullable;
    AddType(Member(*schema, "type"), type_and_nullable);
    if (const Json* any_of = Member(*schema, "anyOf"); any_of && any_of->is_array()) {
      for (const Json& option : *any_of) AddType(Member(option, "type"), type_and_nullable);
    }
    if (const Json* flag = Member(*schema, "nullable"); flag && *flag == true) type_and_nullable.second = true;
    return type_and_nullable;
  }

  // A schema's "type": a name or a list of names.
  static void AddType(const Json* names, std::pair<std::string, bool>& type_and_nullable) {
    if (names && names->is_array()) {
      for (const Json& name : *names) AddType(&name, type_and_nullable);
    } else if (names && *names == "null") {
      type_and_nullable.second = true;
    } else if (names && names->is_string() && type_and_nullable.first.empty()) {
      type_and_nullable.first = names->get<std::string>();
    }
  }

  static bool HasType(const Json& value, std::string_view type) {
    if (type == "integer") return value.is_number_integer();
    if (type == "number") return value.is_number();
    if (type == "boolean") return value.is_boolean();
    if (type == "object") return value.is_object();
    if (type == "array") return value.is_array();
    return true;
  }

  Json tools_;
};

// {"name": NAME, "parameters": {...}} as the whole output, perhaps after <|python_tag|>; more
// calls may follow, each after a ';'.
class Llama3JsonSyntax : public ToolCallSyntax {
 public:
  BlockStart FindStart(std::string_view text, bool at_boundary) const override {
    size_t pos = text.find_first_not_of(separators());
    if (!at_boundary || pos == kNoPos) return {};
    if (text[pos] == '{') return {pos, true};
    BlockStart tag = FindMarker(text.substr(pos), kPythonTag);
    if (tag.pos != 0) return {};
    return {pos, tag.complete};
  }
  size_t FindEnd(std::string_view text, size_t start, EndScan& scan) const override {
    if (scan.resume == 0) {
      const size_t tag = text.substr(start).starts_with(kPythonTag) ? kPythonTag.size() : 0;
      const size_t brace = text.find_first_not_of(kSpace, start + tag);
      if (brace == kNoPos || text[brace] != '{') return kNoPos;
      scan.resume = brace - start;
    }
    return JsonValueEnd(text, start, scan);
  }
  std::optional<ParsedCall> ParseBlock(std::string_view block) const override {
    ConsumePrefix(block, kPythonTag);
    std::optional<Json> call = ParseJson(block);
    return call ? CallFromJson(*call) : std::nullopt;
  }
  std::string_view separators() const override { return " \t\r\n;"; }

 private:
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
};

}  // namespace

std::unique_ptr<ToolCallSyntax> MakeToolCallSyntax(ToolCallFormat format, const nlohmann::ordered_json& tools) {
  switch (format) {
    case ToolCallFormat::kNone:
      return nullptr;
    case ToolCallFormat::kGemma4:
      return std::make_unique<Gemma4Syntax>();
    case ToolCallFormat::kLlama3Json:
      return std::make_unique<Llama3JsonSyntax>();
    case ToolCallFormat::kHermes:
      return std::make_unique<HermesSyntax>();
    case ToolCallFormat::kQwen3Coder:
      return std::make_unique<Qwen3CoderSyntax>(tools);
  }
  return nullptr;
}

std::optional<Json> ParseJson(std::string_view text) {
  bool too_deep = false;
  auto limit = [&too_deep](int depth, Json::parse_event_t, Json&) {
    too_deep = too_deep || depth > kMaxJsonDepth;
    return !too_deep;
  };
  try {
    Json value = Json::parse(text, limit, /*allow_exceptions=*/false);
    if (too_deep || value.is_discarded()) return std::nullopt;
    return value;
  } catch (const Json::exception&) {
    return std::nullopt;
  }
}

std::string DumpJson(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::optional<ParsedCall> CallFromJson(const Json& call) {
  const Json* name = Member(call, "name");
  if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  const Json* arguments = Member(call, "arguments");
  if (!arguments) arguments = Member(call, "parameters");
  std::optional<Json> object = arguments ? *arguments : Json::object();
  if (object->is_string()) object = ParseJson(object->get_ref<const std::string&>());
  if (!object || !object->is_object()) return std::nullopt;
  return ParsedCall{name->get<std::string>(), DumpJson(*object)};
}

}  // namespace tpserve::tool_call_internal
