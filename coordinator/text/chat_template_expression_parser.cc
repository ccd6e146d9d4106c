// Expression parsing for chat templates, following jinja2/parser.py function by
// function. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_expression_parser.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_filters.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {

std::string DescribeToken(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "end of print statement '}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "end of statement block '%}'";
    case TokenType::kString:
      return "string literal";
    case TokenType::kInteger:
    case TokenType::kFloat:
      return "number";
    case TokenType::kEof:
      return "end of template";
    default:
      return absl::StrCat("'", token.value, "'");
  }
}

absl::Status ExpressionParser::CheckUnknownNames() const {
  for (const UnknownName& unknown : unknown_) {
    if (!unknown.soft) return Fail(unknown.pos, unknown.message);
  }
  return absl::OkStatus();
}

bool ExpressionParser::IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
  if (Cur().type == TokenType::kVariableEnd || Cur().type == TokenType::kBlockEnd || IsOp(")")) {
    return true;
  }
  for (std::string_view name : extra_end) {
    if (IsName(name)) return true;
  }
  return false;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseTuple(
    bool with_condexpr, std::initializer_list<std::string_view> extra_end,
    bool explicit_parentheses) {
  SourcePos pos = Cur().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end)) break;
    TP_ASSIGN_OR_RETURN(auto item, ParseExpression(with_condexpr));
    items.push_back(std::move(item));
    if (IsOp(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) return Unexpected("an expression");
  }
  auto tuple = std::make_unique<ListExpr>(Expr::Kind::kTuple, pos);
  tuple->items = std::move(items);
  return ExprPtr(std::move(tuple));
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseExpression(bool with_condexpr) {
  Nesting nesting(this);
  TP_RETURN_IF_ERROR(nesting.Deeper());
  if (!with_condexpr) return ParseOr();
  const size_t first_unknown = unknown_.size();
  TP_ASSIGN_OR_RETURN(auto expr, ParseOr());
  while (IsName("if")) {
    TP_RETURN_IF_ERROR(nesting.Deeper());
    SoftScope soft(this, true);
    SourcePos pos = Cur().pos;
    Advance();
    auto cond = std::make_unique<CondExpr>(pos);
    TP_ASSIGN_OR_RETURN(auto test, ParseOr());
    cond->test = std::move(test);
    cond->then_expr = std::move(expr);
    if (SkipName("else")) {
      TP_ASSIGN_OR_RETURN(auto else_expr, ParseExpression(true));
      cond->else_expr = std::move(else_expr);
    }
    expr = std::move(cond);
    for (size_t i = first_unknown; i < unknown_.size(); ++i) unknown_[i].soft = true;
  }
  return expr;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseOr() {
  Nesting nesting(this);
  TP_ASSIGN_OR_RETURN(auto left, ParseAnd());
  while (IsName("or")) {
    TP_RETURN_IF_ERROR(nesting.Deeper());
    SourcePos pos = Cur().pos;
    Advance();
    TP_ASSIGN_OR_RETURN(auto right, ParseAnd());
    left = std::make_unique<LogicalExpr>(Expr::Kind::kOr, pos, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseAnd() {
  Nesting nesting(this);
  TP_ASSIGN_OR_RETURN(auto left, ParseNot());
  while (IsName("and")) {
    TP_RETURN_IF_ERROR(nesting.Deeper());
    SourcePos pos = Cur().pos;
    Advance();
    TP_ASSIGN_OR_RETURN(auto right, ParseNot());
    left = std::make_unique<LogicalExpr>(Expr::Kind::kAnd, pos, std::move(left), std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseNot() {
  if (IsName("not")) {
    Nesting nesting(this);
    TP_RETURN_IF_ERROR(nesting.Deeper());
    SourcePos pos = Cur().pos;
    Advance();
    TP_ASSIGN_OR_RETURN(auto operand, ParseNot());
    return ExprPtr(std::make_unique<UnaryExpr>(pos, UnaryOp::kNot, std::move(operand)));
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseCompare() {
  SourcePos pos = Cur().pos;
  TP_ASSIGN_OR_RETURN(auto first, ParseMath1());
  std::unique_ptr<CompareExpr> compare;
  while (true) {
    CompareOp op;
    if (IsOp("=="))
      op = CompareOp::kEq;
    else if (IsOp("!="))
      op = CompareOp::kNe;
    else if (IsOp("<"))
      op = CompareOp::kLt;
    else if (IsOp("<="))
      op = CompareOp::kLe;
    else if (IsOp(">"))
      op = CompareOp::kGt;
    else if (IsOp(">="))
      op = CompareOp::kGe;
    else if (IsName("in"))
      op = CompareOp::kIn;
    else if (IsName("not") && Look().type == TokenType::kName && Look().value == "in") {
      op = CompareOp::kNotIn;
      Advance();
    } else {
      break;
    }
    Advance();
    TP_ASSIGN_OR_RETURN(auto operand, ParseMath1());
    if (!compare) compare = std::make_unique<CompareExpr>(pos, std::move(first));
    compare->rest.emplace_back(op, std::move(operand));
  }
  if (!compare) return first;
  return ExprPtr(std::move(compare));
}

template <typename Next>
absl::StatusOr<ExprPtr> ExpressionParser::ParseBinaryLevel(
    Next next, std::initializer_list<std::pair<std::string_view, BinaryOp>> ops) {
  Nesting nesting(this);
  TP_ASSIGN_OR_RETURN(auto left, (this->*next)());
  while (true) {
    const std::pair<std::string_view, BinaryOp>* match = nullptr;
    for (const auto& op : ops) {
      if (IsOp(op.first)) match = &op;
    }
    if (match == nullptr) return left;
    TP_RETURN_IF_ERROR(nesting.Deeper());
    SourcePos pos = Cur().pos;
    Advance();
    TP_ASSIGN_OR_RETURN(auto right, (this->*next)());
    left = std::make_unique<BinaryExpr>(pos, match->second, std::move(left), std::move(right));
  }
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath1() {
  return ParseBinaryLevel(&ExpressionParser::ParseConcat,
                          {{"+", BinaryOp::kAdd}, {"-", BinaryOp::kSub}});
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseConcat() {
  return ParseBinaryLevel(&ExpressionParser::ParseMath2, {{"~", BinaryOp::kConcat}});
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseMath2() {
  return ParseBinaryLevel(&ExpressionParser::ParsePow, {{"*", BinaryOp::kMul},
                                                        {"/", BinaryOp::kDiv},
                                                        {"//", BinaryOp::kFloorDiv},
                                                        {"%", BinaryOp::kMod}});
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePow() {
  return ParseBinaryLevel(&ExpressionParser::ParseUnaryWithFilter, {{"**", BinaryOp::kPow}});
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseUnary(bool with_filter) {
  SourcePos pos = Cur().pos;
  ExprPtr node;
  Nesting nesting(this);
  if (IsOp("-") || IsOp("+")) {
    TP_RETURN_IF_ERROR(nesting.Deeper());
    UnaryOp op = IsOp("-") ? UnaryOp::kNeg : UnaryOp::kPos;
    Advance();
    TP_ASSIGN_OR_RETURN(auto operand, ParseUnary(false));
    node = std::make_unique<UnaryExpr>(pos, op, std::move(operand));
  } else {
    TP_ASSIGN_OR_RETURN(auto primary, ParsePrimary());
    node = std::move(primary);
  }
  TP_ASSIGN_OR_RETURN(auto postfix, ParsePostfix(std::move(node)));
  if (!with_filter) return postfix;
  return ParseFilterExpr(std::move(postfix));
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePrimary() {
  const Token& token = Cur();
  SourcePos pos = token.pos;
  switch (token.type) {
    case TokenType::kName: {
      std::string name = token.value;
      Advance();
      if (name == "true" || name == "True") return MakeConst(pos, Value::Bool(true));
      if (name == "false" || name == "False") return MakeConst(pos, Value::Bool(false));
      if (name == "none" || name == "None") return MakeConst(pos, Value::None());
      for (MacroStmt* macro : macro_stack_) {
        macro->uses_varargs |= name == "varargs";
        macro->uses_kwargs |= name == "kwargs";
        macro->uses_caller |= name == "caller";
      }
      if (name == "loop") ++loop_names_;
      return ExprPtr(std::make_unique<NameExpr>(pos, std::move(name)));
    }
    case TokenType::kString: {
      std::string text;
      while (Cur().type == TokenType::kString) {
        text += Cur().value;
        Advance();
      }
      return MakeConst(pos, Value::String(std::move(text)));
    }
    case TokenType::kInteger: {
      int64_t v = token.int_value;
      Advance();
      return MakeConst(pos, Value::Int(v));
    }
    case TokenType::kFloat: {
      double v = token.float_value;
      Advance();
      return MakeConst(pos, Value::Float(v));
    }
    default:
      break;
  }
  if (SkipOp("(")) {
    TP_ASSIGN_OR_RETURN(auto inner, ParseTuple(true, {}, /*explicit_parentheses=*/true));
    TP_RETURN_IF_ERROR(ExpectOp(")"));
    return inner;
  }
  if (SkipOp("[")) {
    auto list = std::make_unique<ListExpr>(Expr::Kind::kList, pos);
    while (!IsOp("]")) {
      if (!list->items.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("]")) break;
      TP_ASSIGN_OR_RETURN(auto item, ParseExpression(true));
      list->items.push_back(std::move(item));
    }
    Advance();
    return ExprPtr(std::move(list));
  }
  if (SkipOp("{")) {
    auto dict = std::make_unique<DictExpr>(pos);
    while (!IsOp("}")) {
      if (!dict->entries.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp("}")) break;
      TP_ASSIGN_OR_RETURN(auto key, ParseExpression(true));
      TP_RETURN_IF_ERROR(ExpectOp(":"));
      TP_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
      dict->entries.emplace_back(std::move(key), std::move(value));
    }
    Advance();
    return ExprPtr(std::move(dict));
  }
  return Fail(pos, absl::StrCat("unexpected ", DescribeToken(token)));
}

absl::StatusOr<ExprPtr> ExpressionParser::MakeConst(SourcePos pos, Value value) {
  return ExprPtr(std::make_unique<ConstExpr>(pos, std::move(value)));
}

absl::StatusOr<ExprPtr> ExpressionParser::ParsePostfix(ExprPtr node) {
  Nesting nesting(this);
  while (true) {
    if (IsOp(".") || IsOp("[") || IsOp("(")) TP_RETURN_IF_ERROR(nesting.Deeper());
    if (IsOp(".") || IsOp("[")) {
      TP_ASSIGN_OR_RETURN(auto sub, ParseSubscript(std::move(node)));
      node = std::move(sub);
    } else if (IsOp("(")) {
      TP_ASSIGN_OR_RETURN(auto call, ParseCall(std::move(node)));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilterExpr(ExprPtr node) {
  Nesting nesting(this);
  while (true) {
    if (IsOp("|") || IsName("is") || IsOp("(")) TP_RETURN_IF_ERROR(nesting.Deeper());
    if (IsOp("|")) {
      TP_ASSIGN_OR_RETURN(auto filtered, ParseFilter(std::move(node), false));
      node = std::move(filtered);
    } else if (IsName("is")) {
      TP_ASSIGN_OR_RETURN(auto tested, ParseTest(std::move(node)));
      node = std::move(tested);
    } else if (IsOp("(")) {
      TP_ASSIGN_OR_RETURN(auto call, ParseCall(std::move(node)));
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseSubscript(ExprPtr node) {
  SourcePos pos = Cur().pos;
  if (SkipOp(".")) {
    if (Cur().type == TokenType::kName) {
      std::string attr = Cur().value;
      Advance();
      return ExprPtr(std::make_unique<GetAttrExpr>(pos, std::move(node), std::move(attr)));
    }
    if (Cur().type == TokenType::kInteger) {
      auto index = std::make_unique<ConstExpr>(Cur().pos, Value::Int(Cur().int_value));
      Advance();
      return ExprPtr(std::make_unique<GetItemExpr>(pos, std::move(node), std::move(index)));
    }
    return Unexpected("an attribute name or number after '.'");
  }
  Advance();  // [
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
    TP_ASSIGN_OR_RETURN(auto arg, ParseSubscribed());
    args.push_back(std::move(arg));
  }
  Advance();
  if (args.empty()) return Fail(pos, "expected a subscript expression");
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    auto tuple = std::make_unique<ListExpr>(Expr::Kind::kTuple, pos);
    tuple->items = std::move(args);
    index = std::move(tuple);
  }
  return ExprPtr(std::make_unique<GetItemExpr>(pos, std::move(node), std::move(index)));
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseSubscribed() {
  SourcePos pos = Cur().pos;
  auto slice = std::make_unique<SliceExpr>(pos);
  if (!SkipOp(":")) {
    TP_ASSIGN_OR_RETURN(auto start, ParseExpression(true));
    if (!SkipOp(":")) return start;
    slice->start = std::move(start);
  }
  auto at_slice_end = [this] { return IsOp("]") || IsOp(","); };
  if (!IsOp(":") && !at_slice_end()) {
    TP_ASSIGN_OR_RETURN(auto stop, ParseExpression(true));
    slice->stop = std::move(stop);
  }
  if (SkipOp(":") && !at_slice_end()) {
    TP_ASSIGN_OR_RETURN(auto step, ParseExpression(true));
    slice->step = std::move(step);
  }
  return ExprPtr(std::move(slice));
}

absl::Status ExpressionParser::ParseCallArgs(CallArgExprs* args) {
  SourcePos pos = Cur().pos;
  TP_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  auto invalid = [&] { return Fail(pos, "invalid syntax for function call expression"); };
  while (!IsOp(")")) {
    if (require_comma) {
      TP_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (SkipOp("*")) {
      if (args->star_args || args->star_kwargs) return invalid();
      TP_ASSIGN_OR_RETURN(auto e, ParseExpression(true));
      args->star_args = std::move(e);
    } else if (SkipOp("**")) {
      if (args->star_kwargs) return invalid();
      TP_ASSIGN_OR_RETURN(auto e, ParseExpression(true));
      args->star_kwargs = std::move(e);
    } else if (Cur().type == TokenType::kName && Look().type == TokenType::kOperator &&
               Look().value == "=") {
      if (args->star_kwargs) return invalid();
      std::string key = Cur().value;
      Advance();
      Advance();
      TP_ASSIGN_OR_RETURN(auto e, ParseExpression(true));
      args->keyword.emplace_back(std::move(key), std::move(e));
    } else {
      if (args->star_args || args->star_kwargs || !args->keyword.empty()) return invalid();
      TP_ASSIGN_OR_RETURN(auto e, ParseExpression(true));
      args->positional.push_back(std::move(e));
    }
    require_comma = true;
  }
  Advance();
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseCall(ExprPtr callee) {
  SourcePos pos = callee->pos;
  auto call = std::make_unique<CallExpr>(pos, std::move(callee));
  TP_RETURN_IF_ERROR(ParseCallArgs(&call->args));
  return ExprPtr(std::move(call));
}

absl::StatusOr<std::string> ExpressionParser::ParseDottedName() {
  TP_ASSIGN_OR_RETURN(auto name, ExpectAnyName());
  while (SkipOp(".")) {
    TP_ASSIGN_OR_RETURN(auto part, ExpectAnyName());
    absl::StrAppend(&name, ".", part);
  }
  return name;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseFilter(ExprPtr node, bool start_inline) {
  Nesting nesting(this);
  while (IsOp("|") || start_inline) {
    TP_RETURN_IF_ERROR(nesting.Deeper());
    if (!start_inline) Advance();
    start_inline = false;
    SourcePos pos = Cur().pos;
    TP_ASSIGN_OR_RETURN(auto name, ParseDottedName());
    const FilterDef* def = FindFilter(name);
    if (def == nullptr) {
      unknown_.push_back({pos,
                          absl::StrCat("unknown filter '", name,
                                       "' (not a Jinja built-in filter, or one this "
                                       "interpreter does not support)"),
                          soft_});
    }
    auto filter = std::make_unique<FilterExpr>(pos, std::move(node), std::move(name), def);
    if (IsOp("(")) TP_RETURN_IF_ERROR(ParseCallArgs(&filter->args));
    node = std::move(filter);
  }
  return node;
}

absl::StatusOr<ExprPtr> ExpressionParser::ParseTest(ExprPtr node) {
  SourcePos pos = Cur().pos;
  Advance();  // is
  bool negated = SkipName("not");
  SourcePos name_pos = Cur().pos;
  TP_ASSIGN_OR_RETURN(auto name, ParseDottedName());
  const TestDef* def = FindTest(name);
  if (def == nullptr) {
    unknown_.push_back({name_pos,
                        absl::StrCat("unknown test '", name,
                                     "' (not a Jinja built-in test, or one this "
                                     "interpreter does not support)"),
                        soft_});
  }
  auto test = std::make_unique<TestExpr>(pos, std::move(node), std::move(name), def);
  const Token& cur = Cur();
  bool arg_start = cur.type == TokenType::kName || cur.type == TokenType::kString ||
                   cur.type == TokenType::kInteger || cur.type == TokenType::kFloat || IsOp("[") ||
                   IsOp("{");
  if (IsOp("(")) {
    TP_RETURN_IF_ERROR(ParseCallArgs(&test->args));
  } else if (arg_start && !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail(Cur().pos, "you cannot chain multiple tests with 'is'");
    TP_ASSIGN_OR_RETURN(auto arg, ParsePrimary());
    TP_ASSIGN_OR_RETURN(auto postfix, ParsePostfix(std::move(arg)));
    test->args.positional.push_back(std::move(postfix));
  }
  ExprPtr result = std::move(test);
  if (negated) result = std::make_unique<UnaryExpr>(pos, UnaryOp::kNot, std::move(result));
  return result;
}

}  // namespace tpserve::chat_template_internal
