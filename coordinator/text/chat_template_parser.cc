// Statement parsing for chat templates ({% if %}, {% for %}, {% set %}, {% macro %}, ...),
// following jinja2/parser.py; expressions come from ExpressionParser. Tested by
// tests/chat_template_test.cc.
#include "coordinator/text/chat_template_parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/text/chat_template_expression_parser.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  absl::StatusOr<std::unique_ptr<Program>> Run() {
    auto program = std::make_unique<Program>();
    TP_ASSIGN_OR_RETURN(auto body, Subparse({}));
    program->body = std::move(body);
    TP_RETURN_IF_ERROR(CheckUnknownNames());
    return program;
  }

 private:
  // Parses until a {% tag %} named in end_tags; leaves the stream on that tag's name.
  absl::StatusOr<Body> Subparse(std::initializer_list<std::string_view> end_tags) {
    Body body;
    while (true) {
      const Token& token = Cur();
      switch (token.type) {
        case TokenType::kData:
          body.push_back(std::make_unique<TextStmt>(token.pos, token.value));
          Advance();
          break;
        case TokenType::kVariableBegin: {
          SourcePos pos = token.pos;
          Advance();
          TP_ASSIGN_OR_RETURN(auto expr, ParseTuple(/*with_condexpr=*/true, {}, false));
          if (Cur().type != TokenType::kVariableEnd)
            return Unexpected("end of print statement '}}'");
          Advance();
          body.push_back(std::make_unique<PrintStmt>(pos, std::move(expr)));
          break;
        }
        case TokenType::kBlockBegin: {
          Advance();
          if (Cur().type == TokenType::kName) {
            for (std::string_view end : end_tags) {
              if (Cur().value == end) return body;
            }
          }
          TP_ASSIGN_OR_RETURN(auto stmt, ParseStatement());
          body.push_back(std::move(stmt));
          TP_RETURN_IF_ERROR(ExpectBlockEnd());
          break;
        }
        case TokenType::kEof:
          if (end_tags.size() == 0) return body;
          return UnclosedTag(end_tags);
        default:
          return Fail(token.pos, absl::StrCat("unexpected ", DescribeToken(token)));
      }
    }
  }

  absl::Status UnclosedTag(std::initializer_list<std::string_view> end_tags) const {
    std::vector<std::string> names;
    for (std::string_view t : end_tags) names.push_back(absl::StrCat("'", std::string(t), "'"));
    const auto& [tag, pos] = open_tags_.back();
    return Fail(Cur().pos,
                absl::StrCat("unexpected end of template: expected ", absl::StrJoin(names, " or "),
                             " to close the '", tag, "' tag at ", FormatPos(pos)));
  }

  // Parses a body that must end in one of end_tags; consumes the end tag's name and
  // returns which one it was.
  absl::StatusOr<std::pair<Body, std::string>> ParseBodyUntil(
      std::initializer_list<std::string_view> end_tags) {
    SkipOp(":");
    TP_RETURN_IF_ERROR(ExpectBlockEnd());
    TP_ASSIGN_OR_RETURN(auto body, Subparse(end_tags));
    std::string end = Cur().value;
    Advance();
    return std::make_pair(std::move(body), std::move(end));
  }

  absl::StatusOr<Body> ParseBodyThenEnd(std::string_view end_tag) {
    TP_ASSIGN_OR_RETURN(auto result, ParseBodyUntil({end_tag}));
    return std::move(result.first);
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    if (Cur().type != TokenType::kName) return Unexpected("a tag name");
    Nesting nesting(this);
    TP_RETURN_IF_ERROR(nesting.Deeper());
    const std::string tag = Cur().value;
    const SourcePos pos = Cur().pos;
    open_tags_.emplace_back(tag, pos);
    absl::StatusOr<StmtPtr> result = ParseStatementBody(tag, pos);
    open_tags_.pop_back();
    return result;
  }

  absl::StatusOr<StmtPtr> ParseStatementBody(const std::string& tag, SourcePos pos) {
    Advance();  // the tag name
    if (tag == "if") return ParseIf(pos);
    if (tag == "for") return ParseFor(pos);
    if (tag == "set") return ParseSet(pos);
    if (tag == "macro") return ParseMacro(pos);
    if (tag == "call") return ParseCallBlock(pos);
    if (tag == "filter") return ParseFilterBlock(pos);
    if (tag == "with") return ParseWith(pos);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        return Fail(pos, absl::StrCat("'", tag, "' outside of a for loop"));
      }
      return StmtPtr(std::make_unique<BlockStmt>(
          tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, pos));
    }
    if (tag == "generation") {
      auto stmt = std::make_unique<BlockStmt>(Stmt::Kind::kGeneration, pos);
      TP_ASSIGN_OR_RETURN(auto body, ParseBodyThenEnd("endgeneration"));
      stmt->body = std::move(body);
      return StmtPtr(std::move(stmt));
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
        tag == "block" || tag == "autoescape" || tag == "do") {
      return Fail(pos, absl::StrCat("the '", tag,
                                    "' tag is not supported in chat templates (transformers "
                                    "renders them without a loader or extensions)"));
    }
    return Fail(pos, absl::StrCat("unknown tag '", tag, "'"));
  }

  absl::StatusOr<StmtPtr> ParseIf(SourcePos pos) {
    SoftScope soft(this, true);
    auto stmt = std::make_unique<IfStmt>(pos);
    while (true) {
      TP_ASSIGN_OR_RETURN(auto test, ParseTuple(/*with_condexpr=*/false, {}, false));
      TP_ASSIGN_OR_RETURN(auto result, ParseBodyUntil({"elif", "else", "endif"}));
      stmt->branches.emplace_back(std::move(test), std::move(result.first));
      if (result.second == "elif") continue;
      if (result.second == "else") {
        TP_ASSIGN_OR_RETURN(auto else_body, ParseBodyThenEnd("endif"));
        stmt->else_body = std::move(else_body);
      }
      return StmtPtr(std::move(stmt));
    }
  }

  absl::StatusOr<StmtPtr> ParseFor(SourcePos pos) {
    auto stmt = std::make_unique<ForStmt>(pos);
    TP_ASSIGN_OR_RETURN(auto target, ParseAssignTarget(/*with_namespace=*/false, {"in"}));
    stmt->target = std::move(target);
    TP_RETURN_IF_ERROR(ExpectName("in"));
    TP_ASSIGN_OR_RETURN(auto iterable, ParseTuple(/*with_condexpr=*/false, {"recursive"}, false));
    stmt->iterable = std::move(iterable);
    absl::StatusOr<std::pair<Body, std::string>> result;
    {
      SoftScope loop_frame(this, false);
      if (SkipName("if")) {
        TP_ASSIGN_OR_RETURN(auto filter, ParseExpression(/*with_condexpr=*/true));
        stmt->filter = std::move(filter);
      }
      if (IsName("recursive")) return Fail(Cur().pos, "recursive for loops are not supported");
      ++loop_depth_;
      const int64_t loop_names_before = loop_names_;
      result = ParseBodyUntil({"endfor", "else"});
      stmt->uses_loop = loop_names_ != loop_names_before;
      --loop_depth_;
    }
    if (!result.ok()) return result.status();
    stmt->body = std::move(result->first);
    if (result->second == "else") {
      TP_ASSIGN_OR_RETURN(auto else_body, ParseBodyThenEnd("endfor"));
      stmt->else_body = std::move(else_body);
    }
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseSet(SourcePos pos) {
    TP_ASSIGN_OR_RETURN(auto target, ParseAssignTarget(/*with_namespace=*/true, {}));
    if (SkipOp("=")) {
      auto stmt = std::make_unique<SetStmt>(pos);
      stmt->target = std::move(target);
      TP_ASSIGN_OR_RETURN(auto value, ParseTuple(/*with_condexpr=*/true, {}, false));
      stmt->value = std::move(value);
      return StmtPtr(std::move(stmt));
    }
    auto stmt = std::make_unique<SetBlockStmt>(pos);
    stmt->target = std::move(target);
    if (IsOp("|")) {
      TP_ASSIGN_OR_RETURN(auto filter, ParseFilter(nullptr, /*start_inline=*/false));
      stmt->filter = std::move(filter);
    }
    SoftScope block_frame(this, false);
    TP_ASSIGN_OR_RETURN(auto body, ParseBodyThenEnd("endset"));
    stmt->body = std::move(body);
    return StmtPtr(std::move(stmt));
  }

  absl::Status ParseSignature(MacroStmt* macro) {
    TP_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!macro->params.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
      const SourcePos name_pos = Cur().pos;
      TP_ASSIGN_OR_RETURN(auto name, ExpectAnyName());
      // Python refuses a def with a repeated argument, so Jinja does too; binding the
      // call's arguments relies on the names being distinct.
      if (std::find(macro->params.begin(), macro->params.end(), name) != macro->params.end()) {
        return Fail(name_pos, absl::StrCat("duplicate argument '", name, "' in macro definition"));
      }
      if (SkipOp("=")) {
        TP_ASSIGN_OR_RETURN(auto def, ParseExpression(true));
        macro->defaults.push_back(std::move(def));
      } else if (!macro->defaults.empty()) {
        return Fail(Cur().pos, "non-default argument follows default argument");
      }
      macro->params.push_back(std::move(name));
    }
    Advance();
    return absl::OkStatus();
  }

  absl::Status ParseMacroBody(MacroStmt* macro, std::string_view end_tag) {
    SoftScope macro_frame(this, false);
    int saved_depth = loop_depth_;
    loop_depth_ = 0;
    macro_stack_.push_back(macro);
    auto body = ParseBodyThenEnd(end_tag);
    macro_stack_.pop_back();
    loop_depth_ = saved_depth;
    if (!body.ok()) return body.status();
    macro->body = std::move(*body);
    return absl::OkStatus();
  }

  absl::StatusOr<StmtPtr> ParseMacro(SourcePos pos) {
    auto stmt = std::make_unique<MacroStmt>(Stmt::Kind::kMacro, pos);
    TP_ASSIGN_OR_RETURN(auto name, ExpectAnyName());
    stmt->name = std::move(name);
    TP_RETURN_IF_ERROR(ParseSignature(stmt.get()));
    TP_RETURN_IF_ERROR(ParseMacroBody(stmt.get(), "endmacro"));
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseCallBlock(SourcePos pos) {
    auto stmt = std::make_unique<CallBlockStmt>(pos);
    stmt->name = "caller";
    if (IsOp("(")) TP_RETURN_IF_ERROR(ParseSignature(stmt.get()));
    SourcePos call_pos = Cur().pos;
    TP_ASSIGN_OR_RETURN(auto call, ParseExpression(true));
    if (call->kind != Expr::Kind::kCall) return Fail(call_pos, "expected a call after 'call'");
    stmt->call = std::move(call);
    TP_RETURN_IF_ERROR(ParseMacroBody(stmt.get(), "endcall"));
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock(SourcePos pos) {
    auto stmt = std::make_unique<FilterBlockStmt>(pos);
    TP_ASSIGN_OR_RETURN(auto filter, ParseFilter(nullptr, /*start_inline=*/true));
    stmt->filter = std::move(filter);
    SoftScope filter_frame(this, false);
    TP_ASSIGN_OR_RETURN(auto body, ParseBodyThenEnd("endfilter"));
    stmt->body = std::move(body);
    return StmtPtr(std::move(stmt));
  }

  absl::StatusOr<StmtPtr> ParseWith(SourcePos pos) {
    auto stmt = std::make_unique<WithStmt>(pos);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!stmt->assignments.empty()) TP_RETURN_IF_ERROR(ExpectOp(","));
      TP_ASSIGN_OR_RETURN(auto target, ParseAssignTarget(/*with_namespace=*/false, {}));
      TP_RETURN_IF_ERROR(ExpectOp("="));
      TP_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
      stmt->assignments.emplace_back(std::move(target), std::move(value));
    }
    SoftScope with_frame(this, false);
    TP_ASSIGN_OR_RETURN(auto body, ParseBodyThenEnd("endwith"));
    stmt->body = std::move(body);
    return StmtPtr(std::move(stmt));
  }

  // name | name, name, ... | (name, ...) | ns.attr (with_namespace).
  absl::StatusOr<AssignTarget> ParseAssignTarget(
      bool with_namespace, std::initializer_list<std::string_view> end_names) {
    AssignTarget target;
    bool parens = SkipOp("(");
    while (true) {
      if (Cur().type != TokenType::kName) return Unexpected("a variable name to assign to");
      const std::string& name = Cur().value;
      if (name == "true" || name == "false" || name == "none" || name == "True" ||
          name == "False" || name == "None") {
        return Fail(Cur().pos, absl::StrCat("cannot assign to '", name, "'"));
      }
      target.names.push_back(name);
      Advance();
      if (with_namespace && target.names.size() == 1 && !parens && IsOp(".")) {
        Advance();
        TP_ASSIGN_OR_RETURN(auto attr, ExpectAnyName());
        target.attribute = std::move(attr);
        return target;
      }
      if (!IsOp(",")) break;
      target.unpack = true;
      Advance();
      if ((parens && IsOp(")")) || Cur().type == TokenType::kBlockEnd || IsOp("=")) break;
      bool at_end = false;
      for (std::string_view end : end_names) at_end = at_end || IsName(end);
      if (at_end) break;
    }
    if (parens) {
      target.unpack = true;
      TP_RETURN_IF_ERROR(ExpectOp(")"));
    }
    return target;
  }

  int loop_depth_ = 0;
  std::vector<std::pair<std::string, SourcePos>> open_tags_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Program>> ParseTemplate(std::string_view source) {
  auto tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  Parser parser(std::move(*tokens));
  return parser.Run();
}

}  // namespace tpserve::chat_template_internal
