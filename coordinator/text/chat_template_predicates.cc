// Jinja2's built-in tests (`x is mapping`, `x is defined`, ...; jinja2/tests.py), declared
// in chat_template_filters.h. Tested by tests/chat_template_test.cc.
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_filters.h"
#include "coordinator/text/chat_template_operators.h"
#include "coordinator/text/chat_template_text.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

// The single argument of a comparison test such as `x is eq 3`.
absl::StatusOr<Value> OneArg(std::string_view test, CallArgs args) {
  ArgParser p(std::string(test), std::move(args));
  auto other = p.Get("other");
  if (auto s = p.Finish(); !s.ok()) return s;
  if (!other)
    return absl::InvalidArgumentError(
        absl::StrCat("test '", std::string(test), "' needs an argument"));
  return *other;
}

absl::StatusOr<bool> NoArgs(std::string_view test, CallArgs args, bool result) {
  if (auto s = ArgParser(std::string(test), std::move(args)).Finish(); !s.ok()) return s;
  return result;
}

absl::StatusOr<bool> CompareTest(std::string_view test, CompareOp op, const Value& v,
                                 CallArgs args) {
  auto other = OneArg(test, std::move(args));
  if (!other.ok()) return other.status();
  return ApplyCompare(op, v, *other);
}

// Jinja: value % 2 == 1 (odd) or == 0 (even), for ints and floats alike.
absl::StatusOr<bool> Parity(std::string_view test, const Value& v, CallArgs args, int64_t want) {
  TP_RETURN_IF_ERROR(ArgParser(std::string(test), std::move(args)).Finish());
  TP_ASSIGN_OR_RETURN(Value mod, ApplyBinary(BinaryOp::kMod, v, Value::Int(2)));
  return PyEquals(mod, Value::Int(want));
}

#define TP_TEST(name, expr)                                                       \
  {                                                                               \
    name, [](const Value& v, CallArgs a) -> absl::StatusOr<bool> { return expr; } \
  }

const absl::flat_hash_map<std::string_view, TestDef>& Tests() {
  using Kind = Value::Kind;
  static const auto* tests = [] {
    auto* m = new absl::flat_hash_map<std::string_view, TestDef>();
    const TestDef defs[] = {
        TP_TEST("boolean", NoArgs("boolean", std::move(a), v.kind() == Kind::kBool)),
        TP_TEST("callable", NoArgs("callable", std::move(a), v.kind() == Kind::kCallable)),
        TP_TEST("defined", NoArgs("defined", std::move(a), !v.is_undefined())),
        TP_TEST("undefined", NoArgs("undefined", std::move(a), v.is_undefined())),
        TP_TEST("none", NoArgs("none", std::move(a), v.is_none())),
        TP_TEST("true", NoArgs("true", std::move(a), v.kind() == Kind::kBool && v.bool_value())),
        TP_TEST("false", NoArgs("false", std::move(a), v.kind() == Kind::kBool && !v.bool_value())),
        TP_TEST("string", NoArgs("string", std::move(a), v.is_string())),
        TP_TEST("mapping", NoArgs("mapping", std::move(a), v.is_dict())),
        TP_TEST("number", NoArgs("number", std::move(a), v.is_number())),
        TP_TEST("integer", NoArgs("integer", std::move(a), v.kind() == Kind::kInt)),
        TP_TEST("float", NoArgs("float", std::move(a), v.kind() == Kind::kFloat)),
        // Python: iter() works on str, list, tuple, dict and Jinja's Undefined.
        TP_TEST("iterable", NoArgs("iterable", std::move(a),
                                   v.is_string() || v.is_sequence() || v.is_dict() ||
                                       v.is_undefined() || v.kind() == Kind::kGenerator)),
        // Python: len() and __getitem__ exist on str, list, tuple, dict and Undefined.
        TP_TEST("sequence",
                NoArgs("sequence", std::move(a),
                       v.is_string() || v.is_sequence() || v.is_dict() || v.is_undefined())),
        TP_TEST("escaped", NoArgs("escaped", std::move(a), false)),
        TP_TEST("lower", NoArgs("lower", std::move(a), PyIsLower(v.Str()))),
        TP_TEST("upper", NoArgs("upper", std::move(a), PyIsUpper(v.Str()))),
        TP_TEST("odd", Parity("odd", v, std::move(a), 1)),
        TP_TEST("even", Parity("even", v, std::move(a), 0)),
        TP_TEST("divisibleby",
                [&]() -> absl::StatusOr<bool> {
                  auto n = OneArg("divisibleby", std::move(a));
                  if (!n.ok()) return n.status();
                  auto mod = ApplyBinary(BinaryOp::kMod, v, *n);
                  if (!mod.ok()) return mod.status();
                  return PyEquals(*mod, Value::Int(0));
                }()),
        TP_TEST("eq", CompareTest("eq", CompareOp::kEq, v, std::move(a))),
        TP_TEST("equalto", CompareTest("equalto", CompareOp::kEq, v, std::move(a))),
        TP_TEST("==", CompareTest("==", CompareOp::kEq, v, std::move(a))),
        TP_TEST("ne", CompareTest("ne", CompareOp::kNe, v, std::move(a))),
        TP_TEST("!=", CompareTest("!=", CompareOp::kNe, v, std::move(a))),
        TP_TEST("lt", CompareTest("lt", CompareOp::kLt, v, std::move(a))),
        TP_TEST("lessthan", CompareTest("lessthan", CompareOp::kLt, v, std::move(a))),
        TP_TEST("<", CompareTest("<", CompareOp::kLt, v, std::move(a))),
        TP_TEST("le", CompareTest("le", CompareOp::kLe, v, std::move(a))),
        TP_TEST("<=", CompareTest("<=", CompareOp::kLe, v, std::move(a))),
        TP_TEST("gt", CompareTest("gt", CompareOp::kGt, v, std::move(a))),
        TP_TEST("greaterthan", CompareTest("greaterthan", CompareOp::kGt, v, std::move(a))),
        TP_TEST(">", CompareTest(">", CompareOp::kGt, v, std::move(a))),
        TP_TEST("ge", CompareTest("ge", CompareOp::kGe, v, std::move(a))),
        TP_TEST(">=", CompareTest(">=", CompareOp::kGe, v, std::move(a))),
        TP_TEST("in",
                [&]() -> absl::StatusOr<bool> {
                  auto seq = OneArg("in", std::move(a));
                  if (!seq.ok()) return seq.status();
                  return Contains(*seq, v);
                }()),
        TP_TEST("sameas",
                [&]() -> absl::StatusOr<bool> {
                  auto other = OneArg("sameas", std::move(a));
                  if (!other.ok()) return other.status();
                  if (v.kind() != other->kind()) return false;
                  if (v.identity() != nullptr) return v.identity() == other->identity();
                  return PyEquals(v, *other);
                }()),
        TP_TEST("filter",
                [&]() -> absl::StatusOr<bool> {
                  return v.is_string() && FindFilter(v.string_value()) != nullptr;
                }()),
        TP_TEST("test",
                [&]() -> absl::StatusOr<bool> {
                  return v.is_string() && FindTest(v.string_value()) != nullptr;
                }()),
    };
    for (const TestDef& def : defs) m->emplace(def.name, def);
    return m;
  }();
  return *tests;
}

}  // namespace

const TestDef* FindTest(std::string_view name) {
  auto it = Tests().find(name);
  return it == Tests().end() ? nullptr : &it->second;
}

}  // namespace tpserve::chat_template_internal
