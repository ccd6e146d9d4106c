// Global functions of transformers' chat template environment. Tested by
// tests/chat_template_test.cc.
#include "coordinator/text/chat_template_globals.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_filters.h"

namespace tpserve::chat_template_internal {
namespace {

class Builtin : public Callable {
 public:
  using Fn = std::function<absl::StatusOr<Value>(CallArgs)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  absl::StatusOr<Value> Call(CallArgs args) const override { return fn_(std::move(args)); }

 private:
  std::string name_;
  Fn fn_;
};

// Jinja's sandbox refuses ranges longer than this (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

absl::StatusOr<Value> Range(CallArgs args) {
  if (!args.keyword.empty())
    return absl::InvalidArgumentError("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("range expected 1 to 3 arguments, got ", a.size()));
  }
  for (const Value& v : a) {
    if (!v.is_integral()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = a.size() == 1 ? 0 : a[0].int_value();
  int64_t stop = a.size() == 1 ? a[0].int_value() : a[1].int_value();
  int64_t step = a.size() == 3 ? a[2].int_value() : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  int64_t count = 0;
  if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
  if (step < 0 && start > stop) count = (start - stop - 1) / (-step) + 1;
  if (count > kMaxRange) {
    return absl::InvalidArgumentError(
        "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> items;
  items.reserve(count);
  for (int64_t i = 0; i < count; ++i) items.push_back(Value::Int(start + i * step));
  return Value::List(std::move(items));
}

// dict(mapping_or_pairs, **kwargs) as Python builds it.
absl::StatusOr<Object> BuildObject(const std::string& fn, CallArgs args) {
  Object object;
  if (args.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, "() expected at most 1 positional argument"));
  }
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [key, value] : src.dict().entries()) object.Set(key, value);  // any key
    } else {
      auto pairs = IterateValue(src);
      if (!pairs.ok()) return pairs.status();
      for (const Value& pair : *pairs) {
        if (!pair.is_sequence() || pair.items().size() != 2 || !IsHashable(pair.items()[0])) {
          return absl::InvalidArgumentError(
              absl::StrCat(fn, "() needs a mapping or (key, value) pairs"));
        }
        object.Set(pair.items()[0], pair.items()[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) object.Set(key, std::move(value));
  return object;
}

}  // namespace

void AddGlobals(absl::Time now, absl::TimeZone time_zone, Object* globals) {
  auto add = [globals](std::string name, Builtin::Fn fn) {
    globals->Set(name, Value::Function(std::make_shared<Builtin>(name, std::move(fn))));
  };
  add("range", Range);
  add("dict", [](CallArgs args) -> absl::StatusOr<Value> {
    auto object = BuildObject("dict", std::move(args));
    if (!object.ok()) return object.status();
    return Value::Dict(std::move(*object));
  });
  add("namespace", [](CallArgs args) -> absl::StatusOr<Value> {
    auto object = BuildObject("namespace", std::move(args));
    if (!object.ok()) return object.status();
    for (const auto& [key, value] : object->entries()) {
      if (key.is_string() && !key.string_value().empty() && key.string_value()[0] == '_') {
        return absl::InvalidArgumentError(absl::StrCat(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '",
            key.string_value(), "'. Please rename the attribute."));
      }
    }
    return Value::Namespace(std::make_shared<Object>(std::move(*object)));
  });
  add("raise_exception", [](CallArgs args) -> absl::StatusOr<Value> {
    std::string message = args.positional.empty() ? "" : args.positional[0].Str();
    absl::Status status = absl::InvalidArgumentError(message);
    status.SetPayload(kRaisedByTemplatePayload, absl::Cord("1"));
    return status;
  });
  add("strftime_now", [now, time_zone](CallArgs args) -> absl::StatusOr<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return absl::InvalidArgumentError("strftime_now() takes one format string");
    }
    return Value::String(absl::FormatTime(args.positional[0].string_value(), now, time_zone));
  });
}

}  // namespace tpserve::chat_template_internal
