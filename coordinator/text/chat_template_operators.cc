// Python operator semantics for the chat template interpreter (int/float promotion,
// floor division and modulo signs, sequence concatenation and repetition, printf-style
// formatting). Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_operators.h"

#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_text.h"

namespace tpserve::chat_template_internal {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::Status Unsupported(const std::string& op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                "' and '", b.TypeName(), "'"));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "integer overflow: chat template integers are 64-bit (Python's are unbounded)");
}

bool IsFloat(const Value& v) { return v.kind() == Value::Kind::kFloat; }

// CPython's float_divmod.
std::pair<double, double> FloatDivMod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  // An empty sequence repeats to itself; looping `times` times could take forever.
  if (seq.is_string() ? seq.string_value().empty() : seq.items().empty()) times = 0;
  // Limits compared by division: the product of a huge count and the length wraps.
  if (seq.is_string()) {
    if (times > 0 && static_cast<uint64_t>(times) > kMaxStringBytes / seq.string_value().size()) {
      return StringTooLarge("string repetition");
    }
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.string_value();
    return Value::String(std::move(out));
  }
  if (times > 0 && static_cast<uint64_t>(times) > kMaxListItems / seq.items().size()) {
    return ListTooLarge("list repetition");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                           : Value::List(std::move(out));
}

absl::StatusOr<Value> Arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const char* symbol = op == BinaryOp::kAdd        ? "+"
                       : op == BinaryOp::kSub      ? "-"
                       : op == BinaryOp::kMul      ? "*"
                       : op == BinaryOp::kDiv      ? "/"
                       : op == BinaryOp::kFloorDiv ? "//"
                       : op == BinaryOp::kMod      ? "%"
                                                   : "** or pow()";
  if (!a.is_number() || !b.is_number()) return Unsupported(symbol, a, b);
  if (op == BinaryOp::kDiv) {
    if (b.float_value() == 0) return absl::InvalidArgumentError("division by zero");
    return Value::Float(a.float_value() / b.float_value());
  }
  if (IsFloat(a) || IsFloat(b)) {
    double x = a.float_value(), y = b.float_value();
    switch (op) {
      case BinaryOp::kAdd:
        return Value::Float(x + y);
      case BinaryOp::kSub:
        return Value::Float(x - y);
      case BinaryOp::kMul:
        return Value::Float(x * y);
      case BinaryOp::kFloorDiv:
      case BinaryOp::kMod: {
        if (y == 0) return absl::InvalidArgumentError("float division by zero");
        auto [div, mod] = FloatDivMod(x, y);
        return Value::Float(op == BinaryOp::kFloorDiv ? div : mod);
      }
      default:
        if (x == 0 && y < 0) {
          return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
        }
        return Value::Float(std::pow(x, y));
    }
  }
  int64_t x = a.int_value(), y = b.int_value(), r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case BinaryOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case BinaryOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0) {
        return absl::InvalidArgumentError(
            op == BinaryOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
      }
      if (x == INT64_MIN && y == -1) return Overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        q -= 1;
      }
      return Value::Int(op == BinaryOp::kFloorDiv ? q : m);
    }
    default: {
      if (y < 0) {
        if (x == 0) return absl::InvalidArgumentError("0.0 cannot be raised to a negative power");
        return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t result = 1;
      for (int64_t i = 0; i < y; ++i) {
        if (__builtin_mul_overflow(result, x, &result)) return Overflow();
        if (result == 0 || result == 1) break;
      }
      if (result == 1 && x == -1 && (y % 2) == 1) result = -1;
      return Value::Int(result);
    }
  }
}

absl::StatusOr<std::string> FormatOne(char conv, const std::string& flags, int width, int precision,
                                      const Value& arg) {
  std::string spec = "%" + flags + (width >= 0 ? std::to_string(width) : "") +
                     (precision >= 0 ? "." + std::to_string(precision) : "");
  char buf[512];
  switch (conv) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = conv == 's' ? arg.Str() : arg.Repr();
      if (precision >= 0) {
        std::u32string s = DecodeUtf8(text);
        if (static_cast<int>(s.size()) > precision) text = EncodeUtf8(s.substr(0, precision));
      }
      int64_t len = CodePointCount(text);
      if (width > len) {
        std::string pad(width - len, ' ');
        text = flags.find('-') != std::string::npos ? text + pad : pad + text;
      }
      return text;
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o':
    case 'c': {
      if (!arg.is_number()) {
        return TypeError(absl::StrCat("%", std::string(1, conv),
                                      " format: a real number is required, not ", arg.TypeName()));
      }
      long long n = IsFloat(arg) ? static_cast<long long>(std::trunc(arg.float_value()))
                                 : static_cast<long long>(arg.int_value());
      if (conv == 'c') {
        std::string out;
        AppendUtf8(static_cast<char32_t>(n), &out);
        return out;
      }
      char c = conv == 'i' || conv == 'u' ? 'd' : conv;
      std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), n);
      return std::string(buf);
    }
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': {
      if (!arg.is_number()) {
        return TypeError(absl::StrCat("must be real number, not ", arg.TypeName()));
      }
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), arg.float_value());
      return std::string(buf);
    }
    default:
      return TypeError(absl::StrCat("unsupported format character '", std::string(1, conv), "'"));
  }
}

}  // namespace

absl::StatusOr<Value> ApplyBinary(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kConcat) {
    std::string left = a.Str(), right = b.Str();
    if (left.size() + right.size() > kMaxStringBytes) return StringTooLarge("string concatenation");
    return Value::String(std::move(left) + right);
  }
  if (op == BinaryOp::kMod && a.is_string()) return FormatPercent(a.string_value(), b);
  if (a.is_undefined()) return absl::InvalidArgumentError(a.undefined_hint());
  if (b.is_undefined()) return absl::InvalidArgumentError(b.undefined_hint());
  if (op == BinaryOp::kAdd) {
    if (a.is_string() || b.is_string()) {
      if (!a.is_string() || !b.is_string()) {
        if (!a.is_string()) return Unsupported("+", a, b);
        return TypeError(
            absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
      }
      if (a.string_value().size() + b.string_value().size() > kMaxStringBytes) {
        return StringTooLarge("string concatenation");
      }
      if (a.is_markup() || b.is_markup()) {
        // Markup.__add__ / __radd__ escape the plain operand.
        return Value::Markup((a.is_markup() ? a.string_value() : HtmlEscape(a.string_value())) +
                             (b.is_markup() ? b.string_value() : HtmlEscape(b.string_value())));
      }
      return Value::String(a.string_value() + b.string_value());
    }
    if (a.is_sequence() || b.is_sequence()) {
      if (a.kind() != b.kind()) {
        if (!a.is_sequence()) return Unsupported("+", a, b);
        return TypeError(absl::StrCat("can only concatenate ", a.TypeName(), " (not \"",
                                      b.TypeName(), "\") to ", a.TypeName()));
      }
      if (a.items().size() + b.items().size() > kMaxListItems) {
        return ListTooLarge("list concatenation");
      }
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items))
                                             : Value::List(std::move(items));
    }
  }
  if (op == BinaryOp::kMul) {
    bool a_seq = a.is_string() || a.is_sequence();
    bool b_seq = b.is_string() || b.is_sequence();
    if (a_seq && b.is_integral()) return Repeat(a, b.int_value());
    if (b_seq && a.is_integral()) return Repeat(b, a.int_value());
  }
  return Arithmetic(op, a, b);
}

absl::StatusOr<Value> ApplyUnaryNumber(UnaryOp op, const Value& operand) {
  if (operand.is_undefined()) return absl::InvalidArgumentError(operand.undefined_hint());
  if (!operand.is_number()) {
    return TypeError(absl::StrCat("bad operand type for unary ", op == UnaryOp::kNeg ? "-" : "+",
                                  ": '", operand.TypeName(), "'"));
  }
  if (IsFloat(operand)) {
    return Value::Float(op == UnaryOp::kNeg ? -operand.float_value() : operand.float_value());
  }
  if (op == UnaryOp::kPos) return Value::Int(operand.int_value());
  if (operand.int_value() == INT64_MIN) return Overflow();
  return Value::Int(-operand.int_value());
}

absl::StatusOr<bool> ApplyCompare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return PyEquals(a, b);
    case CompareOp::kNe:
      return !PyEquals(a, b);
    case CompareOp::kIn:
      return Contains(b, a);
    case CompareOp::kNotIn: {
      auto in = Contains(b, a);
      if (!in.ok()) return in.status();
      return !*in;
    }
    default:
      break;
  }
  bool orderable = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
                   (a.is_sequence() && a.kind() == b.kind());
  if (!orderable) {
    if (a.is_undefined()) return absl::InvalidArgumentError(a.undefined_hint());
    if (b.is_undefined()) return absl::InvalidArgumentError(b.undefined_hint());
    const char* symbol = op == CompareOp::kLt   ? "<"
                         : op == CompareOp::kLe ? "<="
                         : op == CompareOp::kGt ? ">"
                                                : ">=";
    return TypeError(absl::StrCat("'", symbol, "' not supported between instances of '",
                                  a.TypeName(), "' and '", b.TypeName(), "'"));
  }
  bool swap = op == CompareOp::kGt || op == CompareOp::kGe;
  auto less = swap ? PyLess(b, a) : PyLess(a, b);
  if (!less.ok()) return less.status();
  if (op == CompareOp::kLe || op == CompareOp::kGe) return *less || PyEquals(a, b);
  return *less;
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return TypeError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.string_value().find(item.string_value()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kGenerator:
      for (const Value& v : container.items()) {
        if (PyEquals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (!IsHashable(item)) {
        return TypeError(absl::StrCat("unhashable type: '", item.TypeName(), "'"));
      }
      return container.dict().Find(item) != nullptr;
    default:
      return TypeError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<Value> FormatPercent(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const Object* mapping = args.is_dict() ? &args.dict() : nullptr;
  if (args.kind() == Value::Kind::kTuple) {
    positional = args.items();
  } else if (mapping == nullptr) {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return TypeError("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) return TypeError("incomplete format key");
      if (mapping == nullptr) return TypeError("format requires a mapping");
      arg = mapping->Find(format.substr(i + 1, close - i - 1));
      if (arg == nullptr)
        return TypeError("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() &&
           std::string_view("-+ #0").find(format[i]) != std::string_view::npos) {
      flags.push_back(format[i++]);
    }
    auto number = [&](int* value) {
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        *value = (*value < 0 ? 0 : *value) * 10 + (format[i++] - '0');
      }
    };
    int width = -1, precision = -1;
    number(&width);
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      number(&precision);
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) return TypeError("incomplete format");
    char conv = format[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (arg == nullptr) {
      if (mapping != nullptr && positional.empty()) {
        arg = &args;
      } else {
        if (next >= positional.size()) return TypeError("not enough arguments for format string");
        arg = &positional[next++];
      }
    }
    auto piece = FormatOne(conv, flags, width, precision, *arg);
    if (!piece.ok()) return piece.status();
    out += *piece;
  }
  // Python skips this check when the argument supports indexing (a list, a dict).
  const bool indexable =
      args.kind() == Value::Kind::kList || args.is_undefined() || mapping != nullptr;
  if (!indexable && next < positional.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return Value::String(std::move(out));
}

}  // namespace tpserve::chat_template_internal
