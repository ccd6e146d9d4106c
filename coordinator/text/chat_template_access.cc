// Attribute, item and slice access plus the str/list/dict methods of Jinja's
// ImmutableSandboxedEnvironment. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_access.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_filters.h"
#include "coordinator/text/chat_template_text.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

std::string ObjectTypeRepr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.TypeName() + " object";
}

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// Methods that would modify a list or dict: the sandbox refuses them.
bool IsUnsafeMethod(const Value& obj, std::string_view name) {
  static const auto* list_methods = new absl::flat_hash_set<std::string_view>{
      "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  static const auto* dict_methods =
      new absl::flat_hash_set<std::string_view>{"pop", "popitem", "setdefault", "update", "clear"};
  if (obj.kind() == Value::Kind::kList) return list_methods->contains(name);
  if (obj.is_dict()) return dict_methods->contains(name);
  return false;
}

bool IsStrMethod(std::string_view name) {
  static const auto* methods = new absl::flat_hash_set<std::string_view>{
      "startswith", "endswith",   "strip",     "lstrip",       "rstrip",       "split",
      "rsplit",     "splitlines", "upper",     "lower",        "title",        "capitalize",
      "replace",    "find",       "rfind",     "index",        "rindex",       "count",
      "join",       "isdigit",    "isdecimal", "isnumeric",    "isalpha",      "isalnum",
      "isspace",    "isupper",    "islower",   "removeprefix", "removesuffix", "partition",
      "rpartition", "zfill",      "ljust",     "rjust",        "center",       "format"};
  return methods->contains(name);
}

bool IsListMethod(std::string_view name) { return name == "index" || name == "count"; }

bool IsDictMethod(std::string_view name) {
  return name == "get" || name == "items" || name == "keys" || name == "values" || name == "copy";
}

absl::StatusOr<std::string> StringArg(const ArgParser& p, const std::optional<Value>& v,
                                      std::string_view what) {
  if (!v || !v->is_string()) {
    return TypeError(absl::StrCat(p.name(), "() argument ", std::string(what), " must be str, not ",
                                  v ? v->TypeName() : "missing"));
  }
  return v->string_value();
}

// Optional str argument where None means "absent" (strip's chars, split's sep).
absl::StatusOr<std::optional<std::string>> OptionalStringArg(const ArgParser& p,
                                                             const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::optional<std::string>();
  if (!v->is_string()) {
    return TypeError(
        absl::StrCat(p.name(), "() argument must be str or None, not ", v->TypeName()));
  }
  return std::optional<std::string>(v->string_value());
}

absl::StatusOr<int64_t> IntArg(const ArgParser& p, const std::optional<Value>& v,
                               int64_t default_value) {
  if (!v) return default_value;
  if (!v->is_integral()) {
    return TypeError(
        absl::StrCat(p.name(), "() expected an integer argument, got ", v->TypeName()));
  }
  return v->int_value();
}

Value StringList(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.push_back(Value::String(std::move(part)));
  return Value::List(std::move(items));
}

std::string Pad(std::string_view text, int64_t width, char32_t fill, int align) {
  int64_t len = CodePointCount(text);
  if (width <= len) return std::string(text);
  int64_t margin = width - len;
  int64_t left = align < 0 ? 0 : align > 0 ? margin : margin / 2 + (margin & width & 1);
  std::string f;
  AppendUtf8(fill, &f);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out += text;
  for (int64_t i = 0; i < margin - left; ++i) out += f;
  return out;
}

// str.format with "{}", "{0}" and "{name}" fields (no conversions or format specs).
absl::StatusOr<Value> StrFormat(const std::string& self, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < self.size(); ++i) {
    char c = self[i];
    if ((c == '{' || c == '}') && i + 1 < self.size() && self[i + 1] == c) {
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '}') return TypeError("Single '}' encountered in format string");
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    size_t close = self.find('}', i);
    if (close == std::string::npos) return TypeError("Single '{' encountered in format string");
    std::string field = self.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return TypeError(
          "str.format() conversions, attributes and format specs are not supported "
          "in chat templates");
    }
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t n = field.empty() ? auto_index++ : std::stoul(field);
      if (n < args.positional.size()) v = &args.positional[n];
      if (v == nullptr)
        return TypeError("Replacement index " + std::to_string(n) + " out of range");
    } else {
      for (const auto& [key, value] : args.keyword) {
        if (key == field) v = &value;
      }
      if (v == nullptr) return TypeError("KeyError: '" + field + "'");
    }
    out += v->Str();
    i = close;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> CallStrMethod(const std::string& self, const std::string& name,
                                    CallArgs args) {
  if (name == "format") return StrFormat(self, args);
  ArgParser p("str." + name, std::move(args));
  if (name == "startswith" || name == "endswith") {
    auto what = p.Get("prefix");
    TP_RETURN_IF_ERROR(p.Finish());
    std::vector<std::string> options;
    if (what && what->is_string()) {
      options.push_back(what->string_value());
    } else if (what && what->kind() == Value::Kind::kTuple) {
      for (const Value& v : what->items()) {
        if (!v.is_string()) return TypeError("tuple for " + name + " must only contain str");
        options.push_back(v.string_value());
      }
    } else {
      return TypeError(absl::StrCat(name, " first arg must be str or a tuple of str, not ",
                                    what ? what->TypeName() : "missing"));
    }
    for (const auto& o : options) {
      bool hit = name == "startswith" ? self.compare(0, o.size(), o) == 0
                                      : self.size() >= o.size() &&
                                            self.compare(self.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto chars_arg = p.Get("chars");
    TP_RETURN_IF_ERROR(p.Finish());
    auto chars = OptionalStringArg(p, chars_arg);
    if (!chars.ok()) return chars.status();
    return Value::String(PyStrip(self, *chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    auto sep_arg = p.Get("sep");
    auto max_arg = p.Get("maxsplit");
    TP_RETURN_IF_ERROR(p.Finish());
    auto sep = OptionalStringArg(p, sep_arg);
    if (!sep.ok()) return sep.status();
    if (*sep && (*sep)->empty()) return TypeError("empty separator");
    auto maxsplit = IntArg(p, max_arg, -1);
    if (!maxsplit.ok()) return maxsplit.status();
    return StringList(name == "split" ? PySplit(self, *sep, *maxsplit)
                                      : PyRSplit(self, *sep, *maxsplit));
  }
  if (name == "splitlines") {
    auto keep = p.Get("keepends");
    TP_RETURN_IF_ERROR(p.Finish());
    return StringList(PySplitLines(self, keep && keep->Truthy()));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    TP_RETURN_IF_ERROR(p.Finish());
    if (name == "upper") return Value::String(PyUpper(self));
    if (name == "lower") return Value::String(PyLower(self));
    if (name == "title") return Value::String(PyTitle(self));
    return Value::String(PyCapitalize(self));
  }
  if (name == "replace") {
    auto old_arg = p.Get("old");
    auto new_arg = p.Get("new");
    auto count_arg = p.Get("count");
    TP_RETURN_IF_ERROR(p.Finish());
    auto old_s = StringArg(p, old_arg, "1");
    if (!old_s.ok()) return old_s.status();
    auto new_s = StringArg(p, new_arg, "2");
    if (!new_s.ok()) return new_s.status();
    auto count = IntArg(p, count_arg, -1);
    if (!count.ok()) return count.status();
    return Value::String(PyReplace(self, *old_s, *new_s, *count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    auto sub_arg = p.Get("sub");
    TP_RETURN_IF_ERROR(p.Finish());
    auto sub = StringArg(p, sub_arg, "1");
    if (!sub.ok()) return sub.status();
    if (name == "count") return Value::Int(PyCount(self, *sub));
    int64_t at = PyFind(self, *sub, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) {
      return absl::InvalidArgumentError("substring not found");
    }
    return Value::Int(at);
  }
  if (name == "join") {
    auto iterable = p.Get("iterable");
    TP_RETURN_IF_ERROR(p.Finish());
    if (!iterable) return TypeError("join() takes exactly one argument (0 given)");
    auto items_or = IterateValue(*iterable);
    if (!items_or.ok() || iterable->is_undefined()) return TypeError("can only join an iterable");
    const std::vector<Value>& items = *items_or;
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i, ": expected str instance, ",
                                      items[i].TypeName(), " found"));
      }
      if (i > 0) out += self;
      out += items[i].string_value();
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
    TP_RETURN_IF_ERROR(p.Finish());
    return Value::Bool(PyIsClass(self, CharClass::kDigit));
  }
  if (name == "isalpha" || name == "isalnum" || name == "isspace") {
    TP_RETURN_IF_ERROR(p.Finish());
    CharClass cls = name == "isalpha"   ? CharClass::kAlpha
                    : name == "isalnum" ? CharClass::kAlnum
                                        : CharClass::kSpace;
    return Value::Bool(PyIsClass(self, cls));
  }
  if (name == "isupper" || name == "islower") {
    TP_RETURN_IF_ERROR(p.Finish());
    return Value::Bool(name == "isupper" ? PyIsUpper(self) : PyIsLower(self));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    auto arg = p.Get("affix");
    TP_RETURN_IF_ERROR(p.Finish());
    auto affix = StringArg(p, arg, "1");
    if (!affix.ok()) return affix.status();
    if (name == "removeprefix" && self.compare(0, affix->size(), *affix) == 0) {
      return Value::String(self.substr(affix->size()));
    }
    if (name == "removesuffix" && !affix->empty() && self.size() >= affix->size() &&
        self.compare(self.size() - affix->size(), affix->size(), *affix) == 0) {
      return Value::String(self.substr(0, self.size() - affix->size()));
    }
    return Value::String(self);
  }
  if (name == "partition" || name == "rpartition") {
    auto arg = p.Get("sep");
    TP_RETURN_IF_ERROR(p.Finish());
    auto sep = StringArg(p, arg, "1");
    if (!sep.ok()) return sep.status();
    if (sep->empty()) return TypeError("empty separator");
    size_t at = name == "partition" ? self.find(*sep) : self.rfind(*sep);
    if (at == std::string::npos) {
      return name == "partition"
                 ? Value::Tuple({Value::String(self), Value::String(""), Value::String("")})
                 : Value::Tuple({Value::String(""), Value::String(""), Value::String(self)});
    }
    return Value::Tuple({Value::String(self.substr(0, at)), Value::String(*sep),
                         Value::String(self.substr(at + sep->size()))});
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    auto width_arg = p.Get("width");
    std::optional<Value> fill_arg;
    if (name != "zfill") fill_arg = p.Get("fillchar");
    TP_RETURN_IF_ERROR(p.Finish());
    auto width = IntArg(p, width_arg, 0);
    if (!width.ok()) return width.status();
    // A fill character is at most 4 bytes of UTF-8.
    if (*width > static_cast<int64_t>(kMaxStringBytes / 4)) {
      return StringTooLarge(absl::StrCat(name, "()"));
    }
    char32_t fill = ' ';
    if (fill_arg) {
      std::u32string f = fill_arg->is_string() ? DecodeUtf8(fill_arg->string_value()) : U"";
      if (f.size() != 1) return TypeError("The fill character must be exactly one character long");
      fill = f[0];
    }
    if (name == "zfill") {
      int64_t len = CodePointCount(self);
      if (*width <= len) return Value::String(self);
      size_t sign = !self.empty() && (self[0] == '+' || self[0] == '-') ? 1 : 0;
      return Value::String(self.substr(0, sign) + std::string(*width - len, '0') +
                           self.substr(sign));
    }
    int align = name == "ljust" ? -1 : name == "rjust" ? 1 : 0;
    return Value::String(Pad(self, *width, fill, align));
  }
  return TypeError(absl::StrCat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> CallListMethod(const Value& self, const std::string& name, CallArgs args) {
  ArgParser p("list." + name, std::move(args));
  auto x = p.Get("value");
  TP_RETURN_IF_ERROR(p.Finish());
  if (!x) return TypeError(absl::StrCat(name, "() takes exactly one argument (0 given)"));
  int64_t count = 0;
  const auto& items = self.items();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!PyEquals(items[i], *x)) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return absl::InvalidArgumentError(x->Repr() + " is not in list");
  return Value::Int(count);
}

absl::StatusOr<Value> CallDictMethod(const Value& self, const std::string& name, CallArgs args) {
  ArgParser p("dict." + name, std::move(args));
  const Object& dict = self.dict();
  if (name == "get") {
    auto key = p.Get("key");
    auto fallback = p.Get("default");
    TP_RETURN_IF_ERROR(p.Finish());
    if (!key) return TypeError("get expected at least 1 argument, got 0");
    if (IsHashable(*key)) {
      if (const Value* v = dict.Find(*key)) return *v;
    }
    return fallback ? *fallback : Value::None();
  }
  TP_RETURN_IF_ERROR(p.Finish());
  if (name == "copy") return self;
  std::vector<Value> out;
  for (const auto& [key, value] : dict.entries()) {
    if (name == "items") {
      out.push_back(Value::Tuple({key, value}));
    } else if (name == "keys") {
      out.push_back(key);
    } else {
      out.push_back(value);
    }
  }
  return Value::List(std::move(out));
}

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string name() const override { return self_.TypeName() + "." + name_; }
  absl::StatusOr<Value> Call(CallArgs args) const override {
    if (self_.is_string()) return CallStrMethod(self_.string_value(), name_, std::move(args));
    if (self_.is_dict()) return CallDictMethod(self_, name_, std::move(args));
    return CallListMethod(self_, name_, std::move(args));
  }

 private:
  Value self_;
  std::string name_;
};

Value Method(const Value& self, std::string_view name) {
  return Value::Function(std::make_shared<BoundMethod>(self, std::string(name)));
}

}  // namespace

std::string NoAttributeHint(const Value& obj, std::string_view name) {
  return absl::StrCat("'", ObjectTypeRepr(obj), "' has no attribute '", std::string(name), "'");
}

absl::StatusOr<Value> GetAttribute(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_hint());
  if (IsUnsafeMethod(obj, name)) {
    return Value::Undefined(absl::StrCat(
        "access to attribute '", std::string(name), "' of '", obj.TypeName(),
        "' object is unsafe: chat templates run in an immutable sandbox and cannot modify "
        "lists or dicts"));
  }
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (IsStrMethod(name)) return Method(obj, name);
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (IsListMethod(name)) return Method(obj, name);
      break;
    case Value::Kind::kDict:
      if (IsDictMethod(name)) return Method(obj, name);
      if (const Value* v = obj.dict().Find(name)) return *v;
      break;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.namespace_object().Find(name)) return *v;
      break;
    default:
      break;
  }
  return Value::Undefined(NoAttributeHint(obj, name));
}

absl::StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_hint());
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (IsHashable(key)) {
        if (const Value* v = obj.dict().Find(key)) return *v;
      }
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kString:
      if (key.is_integral()) {
        int64_t n = obj.is_string() ? CodePointCount(obj.string_value())
                                    : static_cast<int64_t>(obj.items().size());
        int64_t i = key.int_value();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          if (!obj.is_string()) return obj.items()[i];
          std::u32string s = DecodeUtf8(obj.string_value());
          return Value::String(EncodeUtf8(std::u32string_view(s).substr(i, 1)));
        }
        return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element ", key.Repr()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return GetAttribute(obj, key.string_value());
  return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " has no element ", key.Repr()));
}

absl::StatusOr<Value> GetSlice(const Value& obj, const Value& start_v, const Value& stop_v,
                               const Value& step_v) {
  if (obj.is_undefined()) return absl::InvalidArgumentError(obj.undefined_hint());
  if (!obj.is_string() && !obj.is_sequence()) {
    return Value::Undefined(absl::StrCat(ObjectTypeRepr(obj), " cannot be sliced"));
  }
  auto index = [](const Value& v, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (v.is_none() || v.is_undefined()) return std::optional<int64_t>();
    if (!v.is_integral()) {
      return TypeError(
          absl::StrCat("slice ", what, " must be an integer or None, not ", v.TypeName()));
    }
    return std::optional<int64_t>(v.int_value());
  };
  auto start = index(start_v, "start");
  if (!start.ok()) return start.status();
  auto stop = index(stop_v, "stop");
  if (!stop.ok()) return stop.status();
  auto step_opt = index(step_v, "step");
  if (!step_opt.ok()) return step_opt.status();
  int64_t step = step_opt->value_or(1);
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");

  std::u32string chars;
  if (obj.is_string()) chars = DecodeUtf8(obj.string_value());
  int64_t n = obj.is_string() ? static_cast<int64_t>(chars.size())
                              : static_cast<int64_t>(obj.items().size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t lo = adjust(*start, step < 0 ? n - 1 : 0);
  int64_t hi = adjust(*stop, step < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) picks.push_back(i);
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : picks) out.push_back(chars[i]);
    return Value::String(EncodeUtf8(out));
  }
  std::vector<Value> out;
  for (int64_t i : picks) out.push_back(obj.items()[i]);
  return obj.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                           : Value::List(std::move(out));
}

}  // namespace tpserve::chat_template_internal
