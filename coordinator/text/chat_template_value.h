// The value type of the chat template interpreter: Python's None, bool, int, float, str,
// list, tuple and dict as Jinja templates see them, plus Jinja's undefined, namespaces and
// callables. Tested by tests/chat_template_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve::chat_template_internal {

// The largest string and list a template may build. A template is a user's file and can
// double a value in a loop; operations past these limits fail with an error instead of
// exhausting memory. The string limit is the rendered prompt's (EvalOptions).
inline constexpr size_t kMaxStringBytes = size_t{64} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;
// The errors for an operation whose result would pass those limits, e.g.
// StringTooLarge("indent()"): "indent() result is too large (over 67108864 bytes)".
absl::Status StringTooLarge(std::string_view operation);
absl::Status ListTooLarge(std::string_view operation);

class Object;
class Callable;

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kGenerator,  // what Jinja's map/select/reject/... filters return: iterable only
    kDict,
    kNamespace,
    kCallable,
  };

  // An undefined value; `hint` is the message of the error that using it raises,
  // e.g. "'foo' is undefined".
  Value() : kind_(Kind::kUndefined) {}
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool value);
  static Value Int(int64_t value);
  static Value Float(double value);
  static Value String(std::string value);
  // markupsafe's Markup: a str marked HTML-safe by the `safe` or `escape` filters. Adding
  // a plain str to it HTML-escapes that str (Markup.__add__).
  static Value Markup(std::string value);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value Generator(std::vector<Value> items);
  static Value Dict(Object object);
  // A Jinja namespace(): the one mutable value, shared by every copy.
  static Value Namespace(std::shared_ptr<Object> object);
  static Value Function(std::shared_ptr<const Callable> callable);
  // Objects keep their key order; integers that fit int64 stay integers.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  // Python's numbers: bool, int and float.
  bool is_number() const {
    return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat;
  }
  // int or bool (Python's bool is an int).
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool bool_value() const { return std::get<bool>(data_); }
  // int or bool.
  int64_t int_value() const;
  // Any number as a double.
  double float_value() const;
  const std::string& string_value() const { return std::get<std::string>(data_); }
  // List, tuple or generator items.
  const std::vector<Value>& items() const;
  const Object& dict() const;
  Object& namespace_object() const;
  const Callable& callable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }

  bool Truthy() const;
  // Python's str() and repr().
  std::string Str() const;
  std::string Repr() const;
  // Python's type name, for error messages: 'str', 'dict', 'NoneType', ...
  std::string TypeName() const;
  // Identity of shared values (namespaces, callables), for `is sameas`.
  const void* identity() const;

 private:
  using ListPtr = std::shared_ptr<const std::vector<Value>>;
  using DictPtr = std::shared_ptr<const Object>;
  using NamespacePtr = std::shared_ptr<Object>;
  using CallablePtr = std::shared_ptr<const Callable>;

  Kind kind_;
  bool markup_ = false;
  std::variant<std::monostate, bool, int64_t, double, std::string, ListPtr, DictPtr, NamespacePtr,
               CallablePtr>
      data_;
};

// An insertion-ordered map: a Python dict. Keys are usually strings (JSON objects,
// namespaces); templates may also use numbers, booleans, None and tuples of those.
class Object {
 public:
  const Value* Find(std::string_view key) const;
  // Python's key equality: 1, 1.0 and True are the same key.
  const Value* Find(const Value& key) const;
  // Replaces the value of an existing key in place, as a Python dict does.
  void Set(std::string key, Value value);
  void Set(Value key, Value value);
  // Adds a key the caller knows is not present yet (a JSON object's keys, a fresh loop
  // object's) without Set's search, which would make building n keys cost n^2.
  void Append(Value key, Value value) { entries_.emplace_back(std::move(key), std::move(value)); }
  void Reserve(size_t n) { entries_.reserve(n); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

 private:
  std::vector<std::pair<Value, Value>> entries_;
};

// Whether Python could use `key` as a dict key (lists, dicts and namespaces cannot).
bool IsHashable(const Value& key);

// Whether the namespace object `target` can be reached from `v` through lists, tuples,
// generators, dicts and namespaces. Namespaces are the one mutable value, so storing a
// value that reaches a namespace into that namespace would make a cycle: printing it
// would recurse for ever, and the shared pointers would never be freed. Iterative, since
// values may nest deeper than the stack allows.
bool Reaches(const Value& v, const Object* target);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Binds CallArgs to a Python-style signature: call Get() once per parameter, in order,
// then Finish(). Errors name the function, e.g. "tojson() got an unexpected keyword
// argument 'x'".
class ArgParser {
 public:
  ArgParser(std::string function_name, CallArgs args)
      : name_(std::move(function_name)),
        args_(std::move(args)),
        used_(args_.keyword.size(), false) {}
  // The value passed for the next parameter (by position or by name), if any.
  std::optional<Value> Get(std::string_view param);
  absl::Status Finish() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  CallArgs args_;
  std::vector<bool> used_;
  size_t next_positional_ = 0;
};

// Anything a template can call: macros, globals such as range(), bound str methods.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<Value> Call(CallArgs args) const = 0;
};

// Python's ==.
bool PyEquals(const Value& a, const Value& b);
// Python's <; an error for types Python cannot order.
absl::StatusOr<bool> PyLess(const Value& a, const Value& b);

}  // namespace tpserve::chat_template_internal
