// Jinja2's built-in filters (jinja2/filters.py) for chat templates, with transformers'
// `tojson` override. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/text/chat_template_access.h"
#include "coordinator/text/chat_template_json.h"
#include "coordinator/text/chat_template_operators.h"
#include "coordinator/text/chat_template_sequence_filters.h"
#include "coordinator/text/chat_template_text.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

bool Flag(const std::optional<Value>& v, bool fallback) { return v ? v->Truthy() : fallback; }

absl::StatusOr<Value> FilterTojson(const Value& v, CallArgs args) {
  ArgParser p("tojson", std::move(args));
  auto ensure_ascii = p.Get("ensure_ascii");
  auto indent = p.Get("indent");
  auto separators = p.Get("separators");
  auto sort_keys = p.Get("sort_keys");
  TP_RETURN_IF_ERROR(p.Finish());
  JsonDumpOptions options;
  options.ensure_ascii = Flag(ensure_ascii, false);
  options.sort_keys = Flag(sort_keys, false);
  if (indent && !indent->is_none()) {
    if (indent->is_string()) {
      options.indent = indent->string_value();
    } else if (indent->is_integral()) {
      if (indent->int_value() > static_cast<int64_t>(kMaxStringBytes)) {
        return StringTooLarge("tojson()");
      }
      options.indent = std::string(std::max<int64_t>(0, indent->int_value()), ' ');
    } else {
      return TypeError("tojson() indent must be an int, a str or None");
    }
    options.item_separator.assign(1, ',');  // json.dumps drops the space with indent
  }
  if (separators && !separators->is_none()) {
    if (!separators->is_sequence() || separators->items().size() != 2 ||
        !separators->items()[0].is_string() || !separators->items()[1].is_string()) {
      return TypeError("tojson() separators must be a pair of strings");
    }
    options.item_separator = separators->items()[0].string_value();
    options.key_separator = separators->items()[1].string_value();
  }
  TP_ASSIGN_OR_RETURN(auto text, PyJsonDumps(v, options));
  return Value::String(std::move(text));
}

absl::StatusOr<Value> FilterLength(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("length", std::move(args)).Finish());
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::Int(0);
    case Value::Kind::kString:
      return Value::Int(CodePointCount(v.string_value()));
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return Value::Int(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict:
      return Value::Int(static_cast<int64_t>(v.dict().size()));
    default:
      return TypeError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
  }
}

// Filters of the form f(str(value)); as with markupsafe, a Markup stays Markup.
template <std::string (*kFn)(std::string_view)>
absl::StatusOr<Value> StringFilter(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("filter", std::move(args)).Finish());
  std::string out = kFn(v.Str());
  return v.is_markup() ? Value::Markup(std::move(out)) : Value::String(std::move(out));
}

absl::StatusOr<Value> FilterSafe(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("safe", std::move(args)).Finish());
  return Value::Markup(v.Str());
}

absl::StatusOr<Value> FilterEscape(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("escape", std::move(args)).Finish());
  if (v.is_markup()) return v;
  return Value::Markup(HtmlEscape(v.Str()));
}

absl::StatusOr<Value> FilterTrim(const Value& v, CallArgs args) {
  ArgParser p("trim", std::move(args));
  auto chars = p.Get("chars");
  TP_RETURN_IF_ERROR(p.Finish());
  std::optional<std::string> set;
  if (chars && !chars->is_none()) set = chars->Str();
  std::string out = PyStrip(v.Str(), set, true, true);
  return v.is_markup() ? Value::Markup(std::move(out)) : Value::String(std::move(out));
}

absl::StatusOr<Value> FilterDefault(const Value& v, CallArgs args) {
  ArgParser p("default", std::move(args));
  auto fallback = p.Get("default_value");
  auto boolean = p.Get("boolean");
  TP_RETURN_IF_ERROR(p.Finish());
  if (v.is_undefined() || (Flag(boolean, false) && !v.Truthy())) {
    return fallback ? *fallback : Value::String("");
  }
  return v;
}

absl::StatusOr<Value> FilterReplace(const Value& v, CallArgs args) {
  ArgParser p("replace", std::move(args));
  auto old_s = p.Get("old");
  auto new_s = p.Get("new");
  auto count = p.Get("count");
  TP_RETURN_IF_ERROR(p.Finish());
  if (!old_s || !new_s) return TypeError("replace() needs the old and new strings");
  int64_t n = count && count->is_integral() ? count->int_value() : -1;
  return Value::String(PyReplace(v.Str(), old_s->Str(), new_s->Str(), n));
}

// Python's int(str) / float(str): surrounding whitespace and '_' between digits allowed.
std::optional<double> ParsePyFloat(std::string text) {
  text = PyStrip(text, std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return d;
}

// int(x) for a finite float: truncation, an error where Python's unbounded int would
// not fit in 64 bits (the conversion itself would be undefined behaviour).
absl::StatusOr<Value> TruncateToInt(double x) {
  const double t = std::trunc(x);
  if (!(t >= -0x1p63 && t < 0x1p63)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "int: ", x, " does not fit a 64-bit integer (chat template integers are 64-bit; Python's are unbounded)"));
  }
  return Value::Int(static_cast<int64_t>(t));
}

absl::StatusOr<Value> FilterInt(const Value& v, CallArgs args) {
  ArgParser p("int", std::move(args));
  auto fallback = p.Get("default");
  auto base = p.Get("base");
  TP_RETURN_IF_ERROR(p.Finish());
  if (v.is_undefined()) return absl::InvalidArgumentError(v.undefined_hint());
  Value dflt = fallback ? *fallback : Value::Int(0);
  if (v.is_integral()) return Value::Int(v.int_value());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.float_value())) return dflt;
    return TruncateToInt(v.float_value());
  }
  if (!v.is_string()) return dflt;
  std::string text = PyStrip(v.string_value(), std::nullopt, true, true);
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  int b = base && base->is_integral() ? static_cast<int>(base->int_value()) : 10;
  if (!text.empty()) {
    char* end = nullptr;
    errno = 0;
    long long n = std::strtoll(text.c_str(), &end, b);
    if (end == text.c_str() + text.size() && errno == 0) return Value::Int(n);
  }
  if (auto d = ParsePyFloat(v.string_value()); d && std::isfinite(*d)) {
    return TruncateToInt(*d);
  }
  return dflt;
}

absl::StatusOr<Value> FilterFloat(const Value& v, CallArgs args) {
  ArgParser p("float", std::move(args));
  auto fallback = p.Get("default");
  TP_RETURN_IF_ERROR(p.Finish());
  if (v.is_undefined()) return absl::InvalidArgumentError(v.undefined_hint());
  if (v.is_number()) return Value::Float(v.float_value());
  if (v.is_string()) {
    if (auto d = ParsePyFloat(v.string_value())) return Value::Float(*d);
  }
  return fallback ? *fallback : Value::Float(0.0);
}

absl::StatusOr<Value> FilterAbs(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("abs", std::move(args)).Finish());
  if (v.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(v.float_value()));
  if (v.is_integral()) return Value::Int(std::llabs(v.int_value()));
  return TypeError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
}

absl::StatusOr<Value> FilterRound(const Value& v, CallArgs args) {
  ArgParser p("round", std::move(args));
  auto precision_arg = p.Get("precision");
  auto method_arg = p.Get("method");
  TP_RETURN_IF_ERROR(p.Finish());
  int64_t precision =
      precision_arg && precision_arg->is_integral() ? precision_arg->int_value() : 0;
  std::string method = method_arg ? method_arg->Str() : "common";
  if (method != "common" && method != "floor" && method != "ceil") {
    return TypeError("method must be 'common', 'ceil' or 'floor'");
  }
  if (!v.is_number()) {
    return TypeError(absl::StrCat("type ", v.TypeName(), " doesn't define __round__ method"));
  }
  if (method == "common") {
    if (v.is_integral()) return Value::Int(v.int_value());
    // printf rounds the exact binary value half-to-even, as Python's round() does.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f",
                  static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), v.float_value());
    return Value::Float(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.float_value() * scale;
  return Value::Float((method == "floor" ? std::floor(x) : std::ceil(x)) / scale);
}

absl::StatusOr<Value> FilterIndent(const Value& v, CallArgs args) {
  ArgParser p("indent", std::move(args));
  auto width = p.Get("width");
  auto first = p.Get("first");
  auto blank = p.Get("blank");
  TP_RETURN_IF_ERROR(p.Finish());
  // Jinja starts with `s += "\n"`, which only a str survives.
  if (v.is_undefined()) return absl::InvalidArgumentError(v.undefined_hint());
  if (!v.is_string()) {
    return TypeError(
        absl::StrCat("unsupported operand type(s) for +=: '", v.TypeName(), "' and 'str'"));
  }
  if (width && width->is_integral() && width->int_value() > static_cast<int64_t>(kMaxStringBytes)) {
    return StringTooLarge("indent()");
  }
  std::string indention =
      width && width->is_string()
          ? width->string_value()
          : std::string(
                width && width->is_integral() ? std::max<int64_t>(0, width->int_value()) : 4, ' ');
  std::vector<std::string> lines = PySplitLines(v.Str() + "\n", false);
  if (lines.size() * indention.size() > kMaxStringBytes) {
    return StringTooLarge("indent()");
  }
  std::string out;
  if (Flag(blank, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (Flag(first, false)) out = indention + out;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FilterCenter(const Value& v, CallArgs args) {
  ArgParser p("center", std::move(args));
  auto width = p.Get("width");
  TP_RETURN_IF_ERROR(p.Finish());
  CallArgs call;
  call.positional.push_back(width ? *width : Value::Int(80));
  TP_ASSIGN_OR_RETURN(auto center, GetAttribute(Value::String(v.Str()), "center"));
  return center.callable().Call(std::move(call));
}

absl::StatusOr<Value> FilterWordcount(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("wordcount", std::move(args)).Finish());
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(v.Str())) {
    std::string s;
    AppendUtf8(c, &s);
    bool word = c == '_' || PyIsClass(s, CharClass::kAlnum);
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::Int(words);
}

absl::StatusOr<Value> FilterAttr(const Value& v, CallArgs args) {
  ArgParser p("attr", std::move(args));
  auto name = p.Get("name");
  TP_RETURN_IF_ERROR(p.Finish());
  if (!name || !name->is_string()) return TypeError("attr() needs an attribute name");
  // Jinja's attr filter reads attributes only, never dict keys.
  if (v.kind() == Value::Kind::kNamespace) return GetAttribute(v, name->string_value());
  if (v.is_dict()) return Value::Undefined(NoAttributeHint(v, name->string_value()));
  return GetAttribute(v, name->string_value());
}

absl::StatusOr<Value> FilterString(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("string", std::move(args)).Finish());
  return Value::String(v.Str());
}

#define TP_FILTER(name, expr)                                                      \
  {                                                                                \
    name, [](const Value& v, CallArgs a) -> absl::StatusOr<Value> { return expr; } \
  }

const absl::flat_hash_map<std::string_view, FilterDef>& Filters() {
  static const auto* filters = [] {
    auto* m = new absl::flat_hash_map<std::string_view, FilterDef>();
    const FilterDef defs[] = {
        TP_FILTER("abs", FilterAbs(v, std::move(a))),
        TP_FILTER("attr", FilterAttr(v, std::move(a))),
        TP_FILTER("capitalize", StringFilter<PyCapitalize>(v, std::move(a))),
        TP_FILTER("center", FilterCenter(v, std::move(a))),
        TP_FILTER("count", FilterLength(v, std::move(a))),
        TP_FILTER("d", FilterDefault(v, std::move(a))),
        TP_FILTER("default", FilterDefault(v, std::move(a))),
        TP_FILTER("dictsort", FilterDictsort(v, std::move(a))),
        TP_FILTER("e", FilterEscape(v, std::move(a))),
        TP_FILTER("escape", FilterEscape(v, std::move(a))),
        TP_FILTER("first", FilterFirstLast(v, false, std::move(a))),
        TP_FILTER("float", FilterFloat(v, std::move(a))),
        TP_FILTER("format",
                  FormatPercent(v.Str(), a.positional.size() == 1 ? a.positional[0]
                                                                  : Value::Tuple(a.positional))),
        TP_FILTER("indent", FilterIndent(v, std::move(a))),
        TP_FILTER("int", FilterInt(v, std::move(a))),
        TP_FILTER("items", FilterItems(v, std::move(a))),
        TP_FILTER("join", FilterJoin(v, std::move(a))),
        TP_FILTER("last", FilterFirstLast(v, true, std::move(a))),
        TP_FILTER("length", FilterLength(v, std::move(a))),
        TP_FILTER("list", FilterList(v, std::move(a))),
        TP_FILTER("lower", StringFilter<PyLower>(v, std::move(a))),
        TP_FILTER("map", FilterMap(v, std::move(a))),
        TP_FILTER("max", FilterMinMax(v, std::move(a), true)),
        TP_FILTER("min", FilterMinMax(v, std::move(a), false)),
        TP_FILTER("reject", SelectOrReject(v, std::move(a), false, false)),
        TP_FILTER("rejectattr", SelectOrReject(v, std::move(a), false, true)),
        TP_FILTER("replace", FilterReplace(v, std::move(a))),
        TP_FILTER("reverse", FilterReverse(v, std::move(a))),
        TP_FILTER("round", FilterRound(v, std::move(a))),
        TP_FILTER("safe", FilterSafe(v, std::move(a))),
        TP_FILTER("select", SelectOrReject(v, std::move(a), true, false)),
        TP_FILTER("selectattr", SelectOrReject(v, std::move(a), true, true)),
        TP_FILTER("sort", FilterSort(v, std::move(a))),
        TP_FILTER("string", FilterString(v, std::move(a))),
        TP_FILTER("sum", FilterSum(v, std::move(a))),
        TP_FILTER("title", StringFilter<JinjaTitle>(v, std::move(a))),
        TP_FILTER("tojson", FilterTojson(v, std::move(a))),
        TP_FILTER("trim", FilterTrim(v, std::move(a))),
        TP_FILTER("unique", FilterUnique(v, std::move(a))),
        TP_FILTER("upper", StringFilter<PyUpper>(v, std::move(a))),
        TP_FILTER("wordcount", FilterWordcount(v, std::move(a))),
    };
    for (const FilterDef& def : defs) m->emplace(def.name, def);
    return m;
  }();
  return *filters;
}

}  // namespace

const FilterDef* FindFilter(std::string_view name) {
  auto it = Filters().find(name);
  return it == Filters().end() ? nullptr : &it->second;
}

}  // namespace tpserve::chat_template_internal
