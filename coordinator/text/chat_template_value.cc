// The chat template value type: construction, Python truthiness, str/repr, == and <.
// Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_value.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_text.h"

namespace tpserve::chat_template_internal {

Value Value::Undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool value) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = value;
  return v;
}

Value Value::Int(int64_t value) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = value;
  return v;
}

Value Value::Float(double value) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = value;
  return v;
}

Value Value::String(std::string value) {
  Value v;
  v.kind_ = Kind::kString;
  v.data_ = std::move(value);
  return v;
}

Value Value::Markup(std::string value) {
  Value v = String(std::move(value));
  v.markup_ = true;
  return v;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.data_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}

Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::Generator(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kGenerator;
  return v;
}

Value Value::Dict(Object object) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::make_shared<const Object>(std::move(object));
  return v;
}

Value Value::Namespace(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = std::move(object);
  return v;
}

Value Value::Function(std::shared_ptr<const Callable> callable) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(callable);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(u));
      return Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object object;
      object.Reserve(json.size());
      // An ordered_json object holds each key once.
      for (const auto& [key, item] : json.items()) object.Append(String(key), FromJson(item));
      return Dict(std::move(object));
    }
    default:  // binary, discarded
      return None();
  }
}

int64_t Value::int_value() const {
  if (kind_ == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::float_value() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(int_value());
}

const std::vector<Value>& Value::items() const { return *std::get<ListPtr>(data_); }

const Object& Value::dict() const { return *std::get<DictPtr>(data_); }

Object& Value::namespace_object() const { return *std::get<NamespacePtr>(data_); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_value();
    case Kind::kInt:
      return int_value() != 0;
    case Kind::kFloat:
      return float_value() != 0.0;
    case Kind::kString:
      return !string_value().empty();
    case Kind::kList:
    case Kind::kTuple:
      return !items().empty();
    case Kind::kDict:
      return !dict().empty();
    case Kind::kGenerator:  // Python generators are always true, even when empty
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

std::string ReprObject(const Object& object) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, item] : object.entries()) {
    if (!first) out += ", ";
    first = false;
    absl::StrAppend(&out, key.Repr(), ": ", item.Repr());
  }
  return out + "}";
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return string_value();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_value() ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_value());
    case Kind::kFloat:
      return PyFloatRepr(float_value());
    case Kind::kString:
      return PyStrRepr(string_value());
    case Kind::kList:
    case Kind::kTuple: {
      bool tuple = kind_ == Kind::kTuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < items().size(); ++i) {
        if (i > 0) out += ", ";
        out += items()[i].Repr();
      }
      if (tuple && items().size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Kind::kDict:
      return ReprObject(dict());
    case Kind::kGenerator:
      return "<generator object>";
    case Kind::kNamespace:
      return "<Namespace " + ReprObject(namespace_object()) + ">";
    case Kind::kCallable:
      return "<function " + callable().name() + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kGenerator:
      return "generator";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

const void* Value::identity() const {
  if (kind_ == Kind::kNamespace) return std::get<NamespacePtr>(data_).get();
  if (kind_ == Kind::kCallable) return std::get<CallablePtr>(data_).get();
  if (kind_ == Kind::kList || kind_ == Kind::kTuple || kind_ == Kind::kGenerator) {
    return std::get<ListPtr>(data_).get();
  }
  if (kind_ == Kind::kDict) return std::get<DictPtr>(data_).get();
  return nullptr;
}

const Value* Object::Find(std::string_view key) const {
  for (const auto& entry : entries_) {
    if (entry.first.is_string() && entry.first.string_value() == key) return &entry.second;
  }
  return nullptr;
}

const Value* Object::Find(const Value& key) const {
  if (key.is_string()) return Find(key.string_value());
  for (const auto& entry : entries_) {
    if (!entry.first.is_string() && PyEquals(entry.first, key)) return &entry.second;
  }
  return nullptr;
}

void Object::Set(std::string key, Value value) {
  Set(Value::String(std::move(key)), std::move(value));
}

void Object::Set(Value key, Value value) {
  for (auto& entry : entries_) {
    if (entry.first.is_string() == key.is_string() && PyEquals(entry.first, key)) {
      entry.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

absl::Status StringTooLarge(std::string_view operation) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(operation), " result is too large (over ", kMaxStringBytes, " bytes)"));
}

absl::Status ListTooLarge(std::string_view operation) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(operation), " result is too large (over ", kMaxListItems, " items)"));
}

bool Reaches(const Value& v, const Object* target) {
  std::vector<const Value*> todo = {&v};
  absl::flat_hash_set<const void*> seen;  // containers already walked (values share them)
  while (!todo.empty()) {
    const Value& x = *todo.back();
    todo.pop_back();
    const Object* object = nullptr;
    switch (x.kind()) {
      case Value::Kind::kList:
      case Value::Kind::kTuple:
      case Value::Kind::kGenerator:
        if (!seen.insert(x.identity()).second) continue;
        for (const Value& item : x.items()) todo.push_back(&item);
        continue;
      case Value::Kind::kDict:
        object = &x.dict();
        break;
      case Value::Kind::kNamespace:
        object = &x.namespace_object();
        if (object == target) return true;
        break;
      default:
        continue;
    }
    if (!seen.insert(object).second) continue;
    for (const auto& [key, value] : object->entries()) {
      todo.push_back(&key);
      todo.push_back(&value);
    }
  }
  return false;
}

bool IsHashable(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return false;
    case Value::Kind::kTuple:
      for (const Value& item : key.items()) {
        if (!IsHashable(item)) return false;
      }
      return true;
    default:
      return true;
  }
}

std::optional<Value> ArgParser::Get(std::string_view param) {
  if (next_positional_ < args_.positional.size()) return args_.positional[next_positional_++];
  ++next_positional_;
  for (size_t i = 0; i < args_.keyword.size(); ++i) {
    if (!used_[i] && args_.keyword[i].first == param) {
      used_[i] = true;
      return args_.keyword[i].second;
    }
  }
  return std::nullopt;
}

absl::Status ArgParser::Finish() const {
  if (next_positional_ < args_.positional.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, "() takes at most ", next_positional_,
                                                   " positional argument(s) but ",
                                                   args_.positional.size(), " were given"));
  }
  for (size_t i = 0; i < args_.keyword.size(); ++i) {
    if (!used_[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, "() got an unexpected keyword argument '", args_.keyword[i].first, "'"));
    }
  }
  return absl::OkStatus();
}

bool PyEquals(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      return a.float_value() == b.float_value();
    }
    return a.int_value() == b.int_value();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.string_value() == b.string_value();
    case Kind::kList:
    case Kind::kTuple: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!PyEquals(a.items()[i], b.items()[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, item] : a.dict().entries()) {
        const Value* other = b.dict().Find(key);
        if (other == nullptr || !PyEquals(item, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

absl::StatusOr<bool> PyLess(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
      return a.float_value() < b.float_value();
    }
    return a.int_value() < b.int_value();
  }
  if (a.is_string() && b.is_string()) return a.string_value() < b.string_value();
  if (a.is_sequence() && a.kind() == b.kind()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (PyEquals(x[i], y[i])) continue;
      return PyLess(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

}  // namespace tpserve::chat_template_internal
