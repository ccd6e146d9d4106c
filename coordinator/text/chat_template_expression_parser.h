// Parses Jinja2 expressions into chat_template_ast.h nodes with Jinja's grammar and
// operator precedence (jinja2/parser.py parse_condexpr ... parse_primary); the base of
// the statement parser in chat_template_parser.cc. Tested by tests/chat_template_test.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_ast.h"
#include "coordinator/text/chat_template_lexer.h"

namespace tpserve::chat_template_internal {

// How a token reads in error messages, e.g. "end of print statement '}}'".
std::string DescribeToken(const Token& token);

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

 protected:
  // An unknown filter or test. As in Jinja, one inside an {% if %} or an inline
  // `a if b else c` (and not inside a loop or macro body there) fails only if it runs;
  // anywhere else it is a syntax error.
  struct UnknownName {
    SourcePos pos;
    std::string message;
    bool soft;
  };

  // Sets whether names parsed now sit in such a conditional; restores on exit.
  class SoftScope {
   public:
    SoftScope(ExpressionParser* parser, bool soft) : parser_(parser), saved_(parser->soft_) {
      parser->soft_ = soft;
    }
    ~SoftScope() { parser_->soft_ = saved_; }

   private:
    ExpressionParser* parser_;
    bool saved_;
  };

  // How deep the parse tree may nest: brackets, operator and filter chains, unary
  // operators and blocks all add levels. The parser, the evaluator and the tree's
  // destructors recurse once per level, so without a bound a template of a few kB could
  // overflow the stack; Python (hence transformers' Jinja) also rejects source nested
  // past ~200 levels. Published templates nest fewer than 20.
  static constexpr int kMaxNestingDepth = 128;

  // Counts the levels a parse function adds to the tree; they are released when it
  // returns. A chain (a ~ b ~ c, x.y.z, v|f|g) adds one level per link, since it builds
  // a left-nested tree.
  class Nesting {
   public:
    explicit Nesting(ExpressionParser* parser) : parser_(parser) {}
    ~Nesting() { parser_->depth_ -= levels_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;
    // Fails with a syntax error at the current token past kMaxNestingDepth.
    absl::Status Deeper() {
      ++levels_;
      if (++parser_->depth_ <= kMaxNestingDepth) return absl::OkStatus();
      return parser_->Fail(parser_->Cur().pos,
                           absl::StrCat("the template nests more than ", kMaxNestingDepth,
                                        " levels deep (brackets, operator and filter chains, blocks); "
                                        "split the expression with {% set %} or flatten the blocks"));
    }

   private:
    ExpressionParser* parser_;
    int levels_ = 0;
  };

  // Syntax error for the first unknown filter or test that is not in a conditional.
  absl::Status CheckUnknownNames() const;

  absl::StatusOr<ExprPtr> ParseTuple(bool with_condexpr,
                                     std::initializer_list<std::string_view> extra_end,
                                     bool explicit_parentheses);
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr);
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline);

  // The token cursor and the error helpers the statement parser shares.
  const Token& Cur() const { return toks_[i_]; }
  const Token& Look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  void Advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool IsOp(std::string_view op) const {
    return Cur().type == TokenType::kOperator && Cur().value == op;
  }
  bool IsName(std::string_view name) const {
    return Cur().type == TokenType::kName && Cur().value == name;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(op)) return false;
    Advance();
    return true;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(name)) return false;
    Advance();
    return true;
  }

  absl::Status Fail(SourcePos pos, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template syntax error at ", FormatPos(pos), ": ", message));
  }
  absl::Status Unexpected(const std::string& expected) const {
    return Fail(Cur().pos, absl::StrCat("expected ", expected, ", got ", DescribeToken(Cur())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", std::string(op), "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectName(std::string_view name) {
    if (!SkipName(name)) return Unexpected(absl::StrCat("'", std::string(name), "'"));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectAnyName() {
    if (Cur().type != TokenType::kName) return Unexpected("a name");
    std::string name = Cur().value;
    Advance();
    return name;
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().type != TokenType::kBlockEnd) return Unexpected("end of statement block '%}'");
    Advance();
    return absl::OkStatus();
  }

  std::vector<MacroStmt*> macro_stack_;  // macros whose bodies are being parsed
  int64_t loop_names_ = 0;               // `loop` names parsed so far (ForStmt::uses_loop)
  bool soft_ = false;                    // inside an if or inline-if (see UnknownName)

 private:
  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const;
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  template <typename Next>
  absl::StatusOr<ExprPtr> ParseBinaryLevel(
      Next next, std::initializer_list<std::pair<std::string_view, BinaryOp>> ops);
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnaryWithFilter() { return ParseUnary(true); }
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  static absl::StatusOr<ExprPtr> MakeConst(SourcePos pos, Value value);
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(CallArgExprs* args);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  absl::StatusOr<std::string> ParseDottedName();
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;  // levels of the tree above the node being parsed (Nesting)
  std::vector<UnknownName> unknown_;
};

}  // namespace tpserve::chat_template_internal
