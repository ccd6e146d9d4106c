// Jinja's sequence and mapping filters (jinja2/filters.py), with Jinja's lazy
// generators where it has them. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_sequence_filters.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/text/chat_template_access.h"
#include "coordinator/text/chat_template_filters.h"
#include "coordinator/text/chat_template_text.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

bool Flag(const std::optional<Value>& v, bool fallback) { return v ? v->Truthy() : fallback; }

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
absl::StatusOr<Value> GetAttributePath(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return GetItem(item, attribute);
  Value current = item;
  for (absl::string_view part : absl::StrSplit(attribute.string_value(), '.')) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    Value key = digits ? Value::Int(std::strtoll(std::string(part).c_str(), nullptr, 10))
                       : Value::String(std::string(part));
    TP_ASSIGN_OR_RETURN(auto next, GetItem(current, key));
    current = std::move(next);
  }
  return current;
}

// Sort key for sort/dictsort/unique/min/max: lowercase strings unless case-sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.string_value()));
  return v;
}

absl::Status SortValues(std::vector<Value>* values, const std::vector<Value>& keys, bool reverse,
                        std::vector<size_t>* order) {
  order->resize(values->size());
  for (size_t i = 0; i < order->size(); ++i) (*order)[i] = i;
  absl::Status error;
  std::stable_sort(order->begin(), order->end(), [&](size_t a, size_t b) {
    if (!error.ok()) return false;
    auto less = reverse ? PyLess(keys[b], keys[a]) : PyLess(keys[a], keys[b]);
    if (!less.ok()) {
      error = less.status();
      return false;
    }
    return *less;
  });
  if (!error.ok()) return error;
  std::vector<Value> sorted;
  for (size_t i : *order) sorted.push_back((*values)[i]);
  *values = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> Add(const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) {
    return TypeError(absl::StrCat("unsupported operand type(s) for +: '", a.TypeName(), "' and '",
                                  b.TypeName(), "'"));
  }
  if (a.kind() == Value::Kind::kFloat || b.kind() == Value::Kind::kFloat) {
    return Value::Float(a.float_value() + b.float_value());
  }
  return Value::Int(a.int_value() + b.int_value());
}

}  // namespace

absl::StatusOr<Value> FilterFirstLast(const Value& v, bool last, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser(last ? "last" : "first", std::move(args)).Finish());
  if (last && v.kind() == Value::Kind::kGenerator) {
    return TypeError("'generator' object is not reversible");
  }
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  if (items.empty()) {
    return Value::Undefined(
        absl::StrCat("No ", last ? "last" : "first", " item, sequence was empty."));
  }
  return last ? items.back() : items.front();
}

absl::StatusOr<Value> FilterJoin(const Value& v, CallArgs args) {
  ArgParser p("join", std::move(args));
  auto sep = p.Get("d");
  auto attribute = p.Get("attribute");
  TP_RETURN_IF_ERROR(p.Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::string d = sep ? sep->Str() : "";
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (attribute && !attribute->is_none()) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      item = std::move(a);
    }
    if (i > 0) out += d;
    out += item.Str();
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FilterItems(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("items", std::move(args)).Finish());
  if (v.is_undefined()) return Value::Generator({});
  if (!v.is_dict()) return TypeError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [key, item] : v.dict().entries()) out.push_back(Value::Tuple({key, item}));
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> FilterDictsort(const Value& v, CallArgs args) {
  ArgParser p("dictsort", std::move(args));
  auto case_sensitive = p.Get("case_sensitive");
  auto by = p.Get("by");
  auto reverse = p.Get("reverse");
  TP_RETURN_IF_ERROR(p.Finish());
  if (v.is_undefined()) return absl::InvalidArgumentError(v.undefined_hint());
  if (!v.is_dict())
    return TypeError(absl::StrCat("dictsort expects a mapping, got ", v.TypeName()));
  std::string by_s = by ? by->Str() : "key";
  if (by_s != "key" && by_s != "value") {
    return TypeError("You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> pairs, keys;
  for (const auto& [key, item] : v.dict().entries()) {
    pairs.push_back(Value::Tuple({key, item}));
    keys.push_back(SortKey(by_s == "key" ? key : item, Flag(case_sensitive, false)));
  }
  std::vector<size_t> order;
  TP_RETURN_IF_ERROR(SortValues(&pairs, keys, Flag(reverse, false), &order));
  return Value::List(std::move(pairs));
}

absl::StatusOr<Value> FilterList(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("list", std::move(args)).Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FilterMap(const Value& v, CallArgs args) {
  if (!v.Truthy()) return Value::Generator({});  // Jinja maps only truthy values
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::vector<Value> out;
  if (args.positional.empty()) {
    ArgParser p("map", std::move(args));
    auto attribute = p.Get("attribute");
    auto fallback = p.Get("default");
    TP_RETURN_IF_ERROR(p.Finish());
    if (!attribute) return TypeError("map() needs a filter name or attribute=");
    for (const Value& item : items) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      out.push_back(a.is_undefined() && fallback ? *fallback : a);
    }
    return Value::Generator(std::move(out));
  }
  std::string name = args.positional[0].Str();
  const FilterDef* filter = FindFilter(name);
  if (filter == nullptr) return TypeError(absl::StrCat("No filter named '", name, "'"));
  args.positional.erase(args.positional.begin());
  for (const Value& item : items) {
    TP_ASSIGN_OR_RETURN(auto mapped, filter->apply(item, args));
    out.push_back(std::move(mapped));
  }
  return Value::Generator(std::move(out));
}

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectOrReject(const Value& v, CallArgs args, bool select, bool attr) {
  if (!v.Truthy()) return Value::Generator({});  // Jinja filters only truthy values
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::optional<Value> attribute;
  if (attr) {
    if (args.positional.empty()) return TypeError("selectattr/rejectattr need an attribute name");
    attribute = args.positional[0];
    args.positional.erase(args.positional.begin());
  }
  const TestDef* test = nullptr;
  if (!args.positional.empty()) {
    std::string name = args.positional[0].Str();
    test = FindTest(name);
    if (test == nullptr) return TypeError(absl::StrCat("No test named '", name, "'"));
    args.positional.erase(args.positional.begin());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (attribute) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      subject = std::move(a);
    }
    bool passed;
    if (test != nullptr) {
      TP_ASSIGN_OR_RETURN(auto r, test->apply(subject, args));
      passed = r;
    } else {
      passed = subject.Truthy();
    }
    if (passed == select) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> FilterSort(const Value& v, CallArgs args) {
  ArgParser p("sort", std::move(args));
  auto reverse = p.Get("reverse");
  auto case_sensitive = p.Get("case_sensitive");
  auto attribute = p.Get("attribute");
  TP_RETURN_IF_ERROR(p.Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value key = item;
    if (attribute && !attribute->is_none()) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      key = std::move(a);
    }
    keys.push_back(SortKey(key, Flag(case_sensitive, false)));
  }
  std::vector<size_t> order;
  TP_RETURN_IF_ERROR(SortValues(&items, keys, Flag(reverse, false), &order));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FilterUnique(const Value& v, CallArgs args) {
  ArgParser p("unique", std::move(args));
  auto case_sensitive = p.Get("case_sensitive");
  auto attribute = p.Get("attribute");
  TP_RETURN_IF_ERROR(p.Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    Value key = item;
    if (attribute && !attribute->is_none()) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      key = std::move(a);
    }
    key = SortKey(key, Flag(case_sensitive, false));
    bool dup =
        std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return PyEquals(s, key); });
    if (dup) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

absl::StatusOr<Value> FilterMinMax(const Value& v, CallArgs args, bool max) {
  ArgParser p(max ? "max" : "min", std::move(args));
  auto case_sensitive = p.Get("case_sensitive");
  auto attribute = p.Get("attribute");
  TP_RETURN_IF_ERROR(p.Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (attribute && !attribute->is_none()) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(items[i], *attribute));
      key = std::move(a);
    }
    key = SortKey(key, Flag(case_sensitive, false));
    if (i == 0) {
      best_key = key;
      continue;
    }
    TP_ASSIGN_OR_RETURN(auto better, max ? PyLess(best_key, key) : PyLess(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

absl::StatusOr<Value> FilterReverse(const Value& v, CallArgs args) {
  TP_RETURN_IF_ERROR(ArgParser("reverse", std::move(args)).Finish());
  if (v.is_string()) {
    std::u32string s = DecodeUtf8(v.string_value());
    std::reverse(s.begin(), s.end());
    return Value::String(EncodeUtf8(s));
  }
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  std::reverse(items.begin(), items.end());
  // reversed() of a list or dict is a lazy iterator; a generator is reversed into a list.
  if (v.kind() == Value::Kind::kGenerator) return Value::List(std::move(items));
  return Value::Generator(std::move(items));
}

absl::StatusOr<Value> FilterSum(const Value& v, CallArgs args) {
  ArgParser p("sum", std::move(args));
  auto attribute = p.Get("attribute");
  auto start = p.Get("start");
  TP_RETURN_IF_ERROR(p.Finish());
  TP_ASSIGN_OR_RETURN(auto items, IterateValue(v));
  Value total = start ? *start : Value::Int(0);
  for (const Value& item : items) {
    Value x = item;
    if (attribute && !attribute->is_none()) {
      TP_ASSIGN_OR_RETURN(auto a, GetAttributePath(item, *attribute));
      x = std::move(a);
    }
    TP_ASSIGN_OR_RETURN(auto next, Add(total, x));
    total = std::move(next);
  }
  return total;
}

absl::StatusOr<std::vector<Value>> IterateValue(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kGenerator:
      return value.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& entry : value.dict().entries()) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : DecodeUtf8(value.string_value())) {
        chars.push_back(Value::String(EncodeUtf8(std::u32string(1, c))));
      }
      return chars;
    }
    default:
      return TypeError(absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

}  // namespace tpserve::chat_template_internal
