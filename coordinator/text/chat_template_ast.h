// The syntax tree of a parsed chat template: expressions and statements, as Jinja2's
// nodes.py has them for the subset chat templates use. Tested by tests/chat_template_test.cc.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/text/chat_template_lexer.h"
#include "coordinator/text/chat_template_value.h"

namespace tpserve::chat_template_internal {

struct FilterDef;
struct TestDef;

struct Expr {
  enum class Kind {
    kConst,
    kName,
    kList,
    kTuple,
    kDict,
    kGetAttr,
    kGetItem,
    kSlice,
    kUnary,
    kBinary,
    kAnd,
    kOr,
    kCompare,
    kCondExpr,
    kCall,
    kFilter,
    kTest,
  };
  Expr(Kind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Expr() = default;
  const Kind kind;
  const SourcePos pos;
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(SourcePos p, Value v) : Expr(Kind::kConst, p), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(SourcePos p, std::string n) : Expr(Kind::kName, p), name(std::move(n)) {}
  std::string name;
};

// A list or tuple literal.
struct ListExpr : Expr {
  ListExpr(Kind k, SourcePos p) : Expr(k, p) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(SourcePos p) : Expr(Kind::kDict, p) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(SourcePos p, ExprPtr o, std::string a)
      : Expr(Kind::kGetAttr, p), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(SourcePos p, ExprPtr o, ExprPtr i)
      : Expr(Kind::kGetItem, p), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;  // a SliceExpr for x[a:b:c]
};

struct SliceExpr : Expr {
  explicit SliceExpr(SourcePos p) : Expr(Kind::kSlice, p) {}
  ExprPtr start, stop, step;  // each may be null
};

enum class UnaryOp { kNot, kNeg, kPos };
struct UnaryExpr : Expr {
  UnaryExpr(SourcePos p, UnaryOp o, ExprPtr e)
      : Expr(Kind::kUnary, p), op(o), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
struct BinaryExpr : Expr {
  BinaryExpr(SourcePos p, BinaryOp o, ExprPtr l, ExprPtr r)
      : Expr(Kind::kBinary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinaryOp op;
  ExprPtr left, right;
};

// `and` / `or` (kind tells which); both return an operand, as in Python.
struct LogicalExpr : Expr {
  LogicalExpr(Kind k, SourcePos p, ExprPtr l, ExprPtr r)
      : Expr(k, p), left(std::move(l)), right(std::move(r)) {}
  ExprPtr left, right;
};

enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };
// A chain such as a < b <= c.
struct CompareExpr : Expr {
  CompareExpr(SourcePos p, ExprPtr f) : Expr(Kind::kCompare, p), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

// `then_expr if test else else_expr`; else_expr may be null.
struct CondExpr : Expr {
  explicit CondExpr(SourcePos p) : Expr(Kind::kCondExpr, p) {}
  ExprPtr test, then_expr, else_expr;
};

struct CallArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr(SourcePos p, ExprPtr c) : Expr(Kind::kCall, p), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgExprs args;
};

// `operand | name(args)`. In {% filter %} and {% set x | f %} blocks the innermost
// operand is null and stands for the block's rendered body.
struct FilterExpr : Expr {
  FilterExpr(SourcePos p, ExprPtr o, std::string n, const FilterDef* d)
      : Expr(Kind::kFilter, p), operand(std::move(o)), name(std::move(n)), def(d) {}
  ExprPtr operand;
  std::string name;
  const FilterDef* def;
  CallArgExprs args;
};

// `operand is [not] name(args)`; negation is a surrounding `not`.
struct TestExpr : Expr {
  TestExpr(SourcePos p, ExprPtr o, std::string n, const TestDef* d)
      : Expr(Kind::kTest, p), operand(std::move(o)), name(std::move(n)), def(d) {}
  ExprPtr operand;
  std::string name;
  const TestDef* def;
  CallArgExprs args;
};

// What {% set %}, {% for %} and {% with %} assign to: one name, a tuple of names, or a
// namespace attribute (ns.attr).
struct AssignTarget {
  std::vector<std::string> names;
  bool unpack = false;    // names came from a tuple, e.g. `for k, v in ...`
  std::string attribute;  // set for `ns.attr`; names[0] is the namespace
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,
    kPrint,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kWith,
    kBreak,
    kContinue,
    kGeneration,  // transformers' {% generation %}: renders its body
  };
  Stmt(Kind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Stmt() = default;
  const Kind kind;
  const SourcePos pos;
};

struct TextStmt : Stmt {
  TextStmt(SourcePos p, std::string t) : Stmt(Kind::kText, p), text(std::move(t)) {}
  std::string text;
};

struct PrintStmt : Stmt {
  PrintStmt(SourcePos p, ExprPtr e) : Stmt(Kind::kPrint, p), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(SourcePos p) : Stmt(Kind::kIf, p) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(SourcePos p) : Stmt(Kind::kFor, p) {}
  AssignTarget target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`; may be null
  Body body;
  Body else_body;
  // Whether the body names `loop` anywhere (nested blocks and macros included). Only such
  // loops get a `loop` object, as in Jinja: building it is most of an iteration's cost.
  bool uses_loop = true;
};

struct SetStmt : Stmt {
  explicit SetStmt(SourcePos p) : Stmt(Kind::kSet, p) {}
  AssignTarget target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(SourcePos p) : Stmt(Kind::kSetBlock, p) {}
  AssignTarget target;
  ExprPtr filter;  // a FilterExpr chain over the body; may be null
  Body body;
};

struct MacroStmt : Stmt {
  MacroStmt(Kind k, SourcePos p) : Stmt(k, p) {}
  std::string name;  // empty for the `caller` of a call block
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body reads these names; as in Jinja, a macro accepts extra positional
  // arguments, extra keyword arguments or a caller only if it does.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

// {% call(params) macro(args) %}body{% endcall %}: kind kCallBlock; the body is the
// `caller` macro passed to the call.
struct CallBlockStmt : MacroStmt {
  explicit CallBlockStmt(SourcePos p) : MacroStmt(Kind::kCallBlock, p) {}
  ExprPtr call;  // a CallExpr
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(SourcePos p) : Stmt(Kind::kFilterBlock, p) {}
  ExprPtr filter;  // a FilterExpr chain over the body
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(SourcePos p) : Stmt(Kind::kWith, p) {}
  std::vector<std::pair<AssignTarget, ExprPtr>> assignments;
  Body body;
};

// {% break %}, {% continue %} (no fields) and {% generation %} (a body).
struct BlockStmt : Stmt {
  BlockStmt(Kind k, SourcePos p) : Stmt(k, p) {}
  Body body;
};

// A parsed template: its top-level statements.
struct Program {
  Body body;
};

}  // namespace tpserve::chat_template_internal
