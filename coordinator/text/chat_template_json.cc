// json.dumps for chat template values: Python's separators, float repr and string
// escapes. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_json.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_text.h"

namespace tpserve::chat_template_internal {
namespace {

void DumpString(std::string_view text, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(text)) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            absl::StrAppend(out, "\\u", absl::Hex(0xD800 | (v >> 10), absl::kZeroPad4), "\\u",
                            absl::Hex(0xDC00 | (v & 0x3FF), absl::kZeroPad4));
          } else {
            absl::StrAppend(out, "\\u", absl::Hex(c, absl::kZeroPad4));
          }
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  out->push_back('"');
}

absl::Status Dump(const Value& value, const JsonDumpOptions& options, int depth, std::string* out) {
  using Kind = Value::Kind;
  if (depth > 512) return absl::InvalidArgumentError("tojson: value is nested too deeply");
  // A large indent times a deep level could exhaust memory before any check below ran.
  auto newline = [&](int level) {
    if (!options.indent) return absl::OkStatus();
    if (out->size() + 1 + static_cast<size_t>(level) * options.indent->size() > kMaxStringBytes) {
      return StringTooLarge("tojson");
    }
    out->push_back('\n');
    for (int i = 0; i < level; ++i) *out += *options.indent;
    return absl::OkStatus();
  };
  if (out->size() > kMaxStringBytes) {
    return StringTooLarge("tojson");
  }
  switch (value.kind()) {
    case Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Kind::kBool:
      *out += value.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Kind::kInt:
      absl::StrAppend(out, value.int_value());
      return absl::OkStatus();
    case Kind::kFloat: {
      double d = value.float_value();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PyFloatRepr(d);
      }
      return absl::OkStatus();
    }
    case Kind::kString:
      DumpString(value.string_value(), options.ensure_ascii, out);
      return absl::OkStatus();
    case Kind::kList:
    case Kind::kTuple: {
      const auto& items = value.items();
      if (items.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) *out += options.item_separator;
        if (absl::Status s = newline(depth + 1); !s.ok()) return s;
        if (auto s = Dump(items[i], options, depth + 1, out); !s.ok()) return s;
      }
      if (absl::Status s = newline(depth); !s.ok()) return s;
      out->push_back(']');
      return absl::OkStatus();
    }
    case Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : value.dict().entries()) entries.push_back(&entry);
      if (entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      if (options.sort_keys) {
        absl::Status error;
        std::stable_sort(entries.begin(), entries.end(), [&error](const auto* x, const auto* y) {
          auto less = PyLess(x->first, y->first);
          if (!less.ok()) error = less.status();
          return less.ok() && *less;
        });
        if (!error.ok()) return error;
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += options.item_separator;
        if (absl::Status s = newline(depth + 1); !s.ok()) return s;
        // json.dumps turns int, float, bool and None keys into strings.
        const Value& key = entries[i]->first;
        std::string key_text;
        switch (key.kind()) {
          case Kind::kString:
            key_text = key.string_value();
            break;
          case Kind::kNone:
            key_text = "null";
            break;
          case Kind::kBool:
            key_text = key.bool_value() ? "true" : "false";
            break;
          case Kind::kInt:
            key_text = absl::StrCat(key.int_value());
            break;
          case Kind::kFloat:
            key_text = PyFloatRepr(key.float_value());
            break;
          default:
            return absl::InvalidArgumentError(
                absl::StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
        }
        DumpString(key_text, options.ensure_ascii, out);
        *out += options.key_separator;
        if (auto s = Dump(entries[i]->second, options, depth + 1, out); !s.ok()) return s;
      }
      if (absl::Status s = newline(depth); !s.ok()) return s;
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("Object of type ", value.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

absl::StatusOr<std::string> PyJsonDumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  if (auto s = Dump(value, options, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace tpserve::chat_template_internal
