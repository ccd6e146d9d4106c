// Tree-walking evaluator for chat templates: statements write into an output string,
// expressions produce Values. Tested by tests/chat_template_test.cc.
#include "coordinator/text/chat_template_evaluator.h"

#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "coordinator/text/chat_template_access.h"
#include "coordinator/text/chat_template_filters.h"
#include "coordinator/text/chat_template_globals.h"
#include "coordinator/text/chat_template_operators.h"
#include "kernels/base.h"

namespace tpserve::chat_template_internal {
namespace {

// Marks an error that already names its template position.
constexpr char kPositionedPayload[] = "tpserve.chat_template.positioned";

absl::Status WithPosition(const absl::Status& status, SourcePos pos) {
  if (status.GetPayload(kPositionedPayload).has_value()) return status;
  bool raised = status.GetPayload(kRaisedByTemplatePayload).has_value();
  absl::Status out(status.code(), absl::StrCat(raised ? "chat template raised an exception at "
                                                      : "chat template error at ",
                                               FormatPos(pos), ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  out.SetPayload(kPositionedPayload, absl::Cord("1"));
  return out;
}

struct Frame {
  std::shared_ptr<Frame> parent;
  absl::flat_hash_map<std::string, Value> vars;
  // A macro or caller defined here holds this frame (weakly), so it cannot be reused for
  // the next loop iteration.
  bool captured = false;

  const Value* Lookup(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
      auto it = f->vars.find(name);
      if (it != f->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using FramePtr = std::shared_ptr<Frame>;

FramePtr ChildFrame(const FramePtr& parent) {
  auto frame = std::make_shared<Frame>();
  frame->parent = parent;
  return frame;
}

class Evaluator;

// A {% macro %} (or the `caller` of a {% call %} block) bound to the frame it was
// defined in. The frame is held weakly: frames own the macros defined in them.
class MacroCallable : public Callable {
 public:
  MacroCallable(Evaluator* evaluator, const MacroStmt* def, const FramePtr& frame)
      : evaluator_(evaluator), def_(def), frame_(frame) {}
  std::string name() const override { return def_->name; }
  absl::StatusOr<Value> Call(CallArgs args) const override;

 private:
  Evaluator* evaluator_;
  const MacroStmt* def_;
  std::weak_ptr<Frame> frame_;
};

class LoopCycle : public Callable {
 public:
  explicit LoopCycle(int64_t index) : index_(index) {}
  std::string name() const override { return "loop.cycle"; }
  absl::StatusOr<Value> Call(CallArgs args) const override {
    if (args.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
    return args.positional[index_ % args.positional.size()];
  }

 private:
  int64_t index_;
};

class Evaluator {
 public:
  explicit Evaluator(const EvalOptions& options) : options_(options) {
    AddGlobals(options.now, options.time_zone, &globals_);
  }

  absl::StatusOr<std::string> Render(const Program& program, const Value& context) {
    auto root = std::make_shared<Frame>();
    for (const auto& [key, value] : context.dict().entries()) root->vars[key.Str()] = value;
    std::string out;
    TP_RETURN_IF_ERROR(ExecBody(program.body, root, &out));
    return out;
  }

  absl::StatusOr<Value> CallMacro(const MacroStmt& def, const FramePtr& closure, CallArgs args);

 private:
  enum class Jump { kNone, kBreak, kContinue };

  // ---- Statements ----

  absl::Status ExecBody(const Body& body, const FramePtr& frame, std::string* out) {
    for (const StmtPtr& stmt : body) {
      TP_RETURN_IF_ERROR(Exec(*stmt, frame, out));
      if (jump_ != Jump::kNone) break;
      if (out->size() > options_.max_output_bytes) {
        return WithPosition(absl::ResourceExhaustedError(absl::StrCat(
                                "rendered prompt exceeds ", options_.max_output_bytes, " bytes")),
                            stmt->pos);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Exec(const Stmt& stmt, const FramePtr& frame, std::string* out) {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        out->append(static_cast<const TextStmt&>(stmt).text);
        return absl::OkStatus();
      case Stmt::Kind::kPrint: {
        TP_ASSIGN_OR_RETURN(auto v, Eval(*static_cast<const PrintStmt&>(stmt).expr, frame));
        out->append(v.Str());
        return absl::OkStatus();
      }
      case Stmt::Kind::kIf:
        return ExecIf(static_cast<const IfStmt&>(stmt), frame, out);
      case Stmt::Kind::kFor:
        return ExecFor(static_cast<const ForStmt&>(stmt), frame, out);
      case Stmt::Kind::kSet: {
        const auto& set = static_cast<const SetStmt&>(stmt);
        TP_ASSIGN_OR_RETURN(auto v, Eval(*set.value, frame));
        return WithPositionIfError(Assign(set.target, std::move(v), frame), stmt.pos);
      }
      case Stmt::Kind::kSetBlock: {
        const auto& set = static_cast<const SetBlockStmt&>(stmt);
        std::string body;
        TP_RETURN_IF_ERROR(ExecBody(set.body, ChildFrame(frame), &body));
        Value v = Value::String(std::move(body));
        if (set.filter) {
          TP_ASSIGN_OR_RETURN(auto filtered, EvalFilter(*set.filter, frame, &v));
          v = std::move(filtered);
        }
        return WithPositionIfError(Assign(set.target, std::move(v), frame), stmt.pos);
      }
      case Stmt::Kind::kMacro: {
        const auto& macro = static_cast<const MacroStmt&>(stmt);
        frame->captured = true;
        frame->vars[macro.name] =
            Value::Function(std::make_shared<MacroCallable>(this, &macro, frame));
        return absl::OkStatus();
      }
      case Stmt::Kind::kCallBlock:
        return ExecCallBlock(static_cast<const CallBlockStmt&>(stmt), frame, out);
      case Stmt::Kind::kFilterBlock: {
        const auto& block = static_cast<const FilterBlockStmt&>(stmt);
        std::string body;
        TP_RETURN_IF_ERROR(ExecBody(block.body, ChildFrame(frame), &body));
        Value v = Value::String(std::move(body));
        TP_ASSIGN_OR_RETURN(auto filtered, EvalFilter(*block.filter, frame, &v));
        out->append(filtered.Str());
        return absl::OkStatus();
      }
      case Stmt::Kind::kWith: {
        const auto& with = static_cast<const WithStmt&>(stmt);
        FramePtr inner = ChildFrame(frame);
        for (const auto& [target, expr] : with.assignments) {
          TP_ASSIGN_OR_RETURN(auto v, Eval(*expr, frame));
          TP_RETURN_IF_ERROR(WithPositionIfError(Assign(target, std::move(v), inner), stmt.pos));
        }
        return ExecBody(with.body, inner, out);
      }
      case Stmt::Kind::kBreak:
        jump_ = Jump::kBreak;
        return absl::OkStatus();
      case Stmt::Kind::kContinue:
        jump_ = Jump::kContinue;
        return absl::OkStatus();
      case Stmt::Kind::kGeneration:
        return ExecBody(static_cast<const BlockStmt&>(stmt).body, frame, out);
    }
    return absl::OkStatus();
  }

  static absl::Status WithPositionIfError(absl::Status status, SourcePos pos) {
    return status.ok() ? status : WithPosition(status, pos);
  }

  absl::Status ExecIf(const IfStmt& stmt, const FramePtr& frame, std::string* out) {
    for (const auto& [test, body] : stmt.branches) {
      TP_ASSIGN_OR_RETURN(auto v, Eval(*test, frame));
      if (v.Truthy()) return ExecBody(body, frame, out);
    }
    return ExecBody(stmt.else_body, frame, out);
  }

  absl::Status ExecFor(const ForStmt& stmt, const FramePtr& frame, std::string* out) {
    TP_ASSIGN_OR_RETURN(auto iterable, Eval(*stmt.iterable, frame));
    // Lists, tuples and generators are immutable and shared: iterate them in place
    // (`iterable` keeps them alive) rather than copy them per loop.
    const std::vector<Value>* items = nullptr;
    std::vector<Value> filtered;
    const bool shared = iterable.is_sequence() || iterable.kind() == Value::Kind::kGenerator;
    if (shared && !stmt.filter) {
      items = &iterable.items();
    } else {
      auto all_items = IterateValue(iterable);
      if (!all_items.ok()) return WithPosition(all_items.status(), stmt.iterable->pos);
      if (stmt.filter) {
        for (Value& item : *all_items) {
          FramePtr probe = ChildFrame(frame);
          TP_RETURN_IF_ERROR(WithPositionIfError(Assign(stmt.target, item, probe), stmt.pos));
          TP_ASSIGN_OR_RETURN(auto keep, Eval(*stmt.filter, probe));
          if (keep.Truthy()) filtered.push_back(std::move(item));
        }
      } else {
        filtered = std::move(*all_items);
      }
      items = &filtered;
    }
    if (items->empty()) return ExecBody(stmt.else_body, frame, out);
    const int64_t n = static_cast<int64_t>(items->size());
    FramePtr inner;
    for (int64_t i = 0; i < n; ++i) {
      // Each iteration starts from an empty frame. The last one's is reused when nothing
      // kept it (no child frame still alive, no macro defined in it): allocating a frame
      // per iteration was most of the cost of a short loop.
      if (inner == nullptr || inner.use_count() != 1 || inner->captured) {
        inner = ChildFrame(frame);
      } else {
        inner->vars.clear();
      }
      TP_RETURN_IF_ERROR(WithPositionIfError(Assign(stmt.target, (*items)[i], inner), stmt.pos));
      if (stmt.uses_loop) inner->vars["loop"] = LoopObject(*items, i);
      TP_RETURN_IF_ERROR(ExecBody(stmt.body, inner, out));
      if (jump_ == Jump::kBreak) {
        jump_ = Jump::kNone;
        break;
      }
      jump_ = Jump::kNone;
    }
    return absl::OkStatus();
  }

  // Jinja's loop variable for iteration i of `items`.
  static Value LoopObject(const std::vector<Value>& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Object loop;
    loop.Reserve(12);
    loop.Append(Value::String("index"), Value::Int(i + 1));
    loop.Append(Value::String("index0"), Value::Int(i));
    loop.Append(Value::String("revindex"), Value::Int(n - i));
    loop.Append(Value::String("revindex0"), Value::Int(n - i - 1));
    loop.Append(Value::String("first"), Value::Bool(i == 0));
    loop.Append(Value::String("last"), Value::Bool(i == n - 1));
    loop.Append(Value::String("length"), Value::Int(n));
    loop.Append(Value::String("depth"), Value::Int(1));
    loop.Append(Value::String("depth0"), Value::Int(0));
    if (i > 0) loop.Append(Value::String("previtem"), items[i - 1]);
    if (i + 1 < n) loop.Append(Value::String("nextitem"), items[i + 1]);
    loop.Append(Value::String("cycle"), Value::Function(std::make_shared<LoopCycle>(i)));
    return Value::Dict(std::move(loop));
  }

  absl::Status ExecCallBlock(const CallBlockStmt& stmt, const FramePtr& frame, std::string* out) {
    frame->captured = true;
    Value caller = Value::Function(std::make_shared<MacroCallable>(this, &stmt, frame));
    const auto& call = static_cast<const CallExpr&>(*stmt.call);
    TP_ASSIGN_OR_RETURN(auto result, EvalCall(call, frame, &caller));
    out->append(result.Str());
    return absl::OkStatus();
  }

  absl::Status Assign(const AssignTarget& target, Value value, const FramePtr& frame) {
    if (!target.attribute.empty()) {
      const Value* ns = frame->Lookup(target.names[0]);
      if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
        return absl::InvalidArgumentError("cannot assign attribute on non-namespace object");
      }
      if (target.attribute[0] == '_') {
        return absl::InvalidArgumentError(absl::StrCat(
            "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '",
            target.attribute, "'. Please rename the attribute."));
      }
      if (Reaches(value, &ns->namespace_object())) {
        return absl::InvalidArgumentError(absl::StrCat("cannot set ", target.names[0], ".", target.attribute,
                                                       " to a value that contains the namespace '", target.names[0],
                                                       "' itself: chat template values cannot form cycles"));
      }
      ns->namespace_object().Set(target.attribute, std::move(value));
      return absl::OkStatus();
    }
    if (!target.unpack) {
      frame->vars[target.names[0]] = std::move(value);
      return absl::OkStatus();
    }
    auto parts = IterateValue(value);
    if (!parts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot unpack non-iterable ", value.TypeName(), " object"));
    }
    size_t want = target.names.size();
    if (parts->size() != want) {
      return absl::InvalidArgumentError(
          parts->size() > want ? absl::StrCat("too many values to unpack (expected ", want, ")")
                               : absl::StrCat("not enough values to unpack (expected ", want,
                                              ", got ", parts->size(), ")"));
    }
    for (size_t i = 0; i < want; ++i) frame->vars[target.names[i]] = (*parts)[i];
    return absl::OkStatus();
  }

  // ---- Expressions ----

  absl::StatusOr<Value> Eval(const Expr& expr, const FramePtr& frame) {
    absl::StatusOr<Value> result = EvalInner(expr, frame);
    if (!result.ok()) return WithPosition(result.status(), expr.pos);
    return result;
  }

  absl::StatusOr<Value> EvalInner(const Expr& expr, const FramePtr& frame) {
    switch (expr.kind) {
      case Expr::Kind::kConst:
        return static_cast<const ConstExpr&>(expr).value;
      case Expr::Kind::kName: {
        const std::string& name = static_cast<const NameExpr&>(expr).name;
        if (const Value* v = frame->Lookup(name)) return *v;
        if (const Value* v = globals_.Find(name)) return *v;
        return Value::Undefined(absl::StrCat("'", name, "' is undefined"));
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : static_cast<const ListExpr&>(expr).items) {
          TP_ASSIGN_OR_RETURN(auto v, Eval(*item, frame));
          items.push_back(std::move(v));
        }
        return expr.kind == Expr::Kind::kList ? Value::List(std::move(items))
                                              : Value::Tuple(std::move(items));
      }
      case Expr::Kind::kDict: {
        Object object;
        for (const auto& [key_expr, value_expr] : static_cast<const DictExpr&>(expr).entries) {
          TP_ASSIGN_OR_RETURN(auto key, Eval(*key_expr, frame));
          if (!IsHashable(key)) {
            return absl::InvalidArgumentError(
                absl::StrCat("unhashable type: '", key.TypeName(), "'"));
          }
          TP_ASSIGN_OR_RETURN(auto value, Eval(*value_expr, frame));
          object.Set(std::move(key), std::move(value));
        }
        return Value::Dict(std::move(object));
      }
      case Expr::Kind::kGetAttr: {
        const auto& e = static_cast<const GetAttrExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto object, Eval(*e.object, frame));
        return GetAttribute(object, e.attr);
      }
      case Expr::Kind::kGetItem:
        return EvalGetItem(static_cast<const GetItemExpr&>(expr), frame);
      case Expr::Kind::kSlice:
        return absl::InvalidArgumentError("a slice can only be used inside []");
      case Expr::Kind::kUnary: {
        const auto& e = static_cast<const UnaryExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto operand, Eval(*e.operand, frame));
        if (e.op == UnaryOp::kNot) return Value::Bool(!operand.Truthy());
        return ApplyUnaryNumber(e.op, operand);
      }
      case Expr::Kind::kBinary: {
        const auto& e = static_cast<const BinaryExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto left, Eval(*e.left, frame));
        TP_ASSIGN_OR_RETURN(auto right, Eval(*e.right, frame));
        return ApplyBinary(e.op, left, right);
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        const auto& e = static_cast<const LogicalExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto left, Eval(*e.left, frame));
        if (left.Truthy() == (expr.kind == Expr::Kind::kOr)) return left;
        return Eval(*e.right, frame);
      }
      case Expr::Kind::kCompare: {
        const auto& e = static_cast<const CompareExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto left, Eval(*e.first, frame));
        for (const auto& [op, operand] : e.rest) {
          TP_ASSIGN_OR_RETURN(auto right, Eval(*operand, frame));
          TP_ASSIGN_OR_RETURN(auto holds, ApplyCompare(op, left, right));
          if (!holds) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expr::Kind::kCondExpr: {
        const auto& e = static_cast<const CondExpr&>(expr);
        TP_ASSIGN_OR_RETURN(auto test, Eval(*e.test, frame));
        if (test.Truthy()) return Eval(*e.then_expr, frame);
        if (e.else_expr) return Eval(*e.else_expr, frame);
        return Value::Undefined(
            absl::StrCat("the inline if-expression on line ", expr.pos.line,
                         " evaluated to false and no else section was defined."));
      }
      case Expr::Kind::kCall:
        return EvalCall(static_cast<const CallExpr&>(expr), frame, nullptr);
      case Expr::Kind::kFilter:
        return EvalFilter(expr, frame, nullptr);
      case Expr::Kind::kTest: {
        const auto& e = static_cast<const TestExpr&>(expr);
        if (e.def == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat("No test named '", e.name, "' found."));
        }
        TP_ASSIGN_OR_RETURN(auto operand, Eval(*e.operand, frame));
        TP_ASSIGN_OR_RETURN(auto args, EvalArgs(e.args, frame));
        TP_ASSIGN_OR_RETURN(auto result, e.def->apply(operand, std::move(args)));
        return Value::Bool(result);
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  absl::StatusOr<Value> EvalGetItem(const GetItemExpr& e, const FramePtr& frame) {
    TP_ASSIGN_OR_RETURN(auto object, Eval(*e.object, frame));
    if (e.index->kind == Expr::Kind::kSlice) {
      const auto& slice = static_cast<const SliceExpr&>(*e.index);
      Value bounds[3];
      const ExprPtr* parts[3] = {&slice.start, &slice.stop, &slice.step};
      for (int i = 0; i < 3; ++i) {
        if (*parts[i] == nullptr) {
          bounds[i] = Value::None();
          continue;
        }
        TP_ASSIGN_OR_RETURN(auto v, Eval(**parts[i], frame));
        bounds[i] = std::move(v);
      }
      return GetSlice(object, bounds[0], bounds[1], bounds[2]);
    }
    TP_ASSIGN_OR_RETURN(auto key, Eval(*e.index, frame));
    return GetItem(object, key);
  }

  absl::StatusOr<CallArgs> EvalArgs(const CallArgExprs& exprs, const FramePtr& frame) {
    CallArgs args;
    for (const ExprPtr& e : exprs.positional) {
      TP_ASSIGN_OR_RETURN(auto v, Eval(*e, frame));
      args.positional.push_back(std::move(v));
    }
    if (exprs.star_args) {
      TP_ASSIGN_OR_RETURN(auto extra, Eval(*exprs.star_args, frame));
      TP_ASSIGN_OR_RETURN(auto items, IterateValue(extra));
      for (Value& v : items) args.positional.push_back(std::move(v));
    }
    for (const auto& [key, e] : exprs.keyword) {
      TP_ASSIGN_OR_RETURN(auto v, Eval(*e, frame));
      args.keyword.emplace_back(key, std::move(v));
    }
    if (exprs.star_kwargs) {
      TP_ASSIGN_OR_RETURN(auto extra, Eval(*exprs.star_kwargs, frame));
      if (!extra.is_dict()) return absl::InvalidArgumentError("** arguments must be a mapping");
      for (const auto& [key, v] : extra.dict().entries()) {
        if (!key.is_string()) return absl::InvalidArgumentError("keywords must be strings");
        args.keyword.emplace_back(key.string_value(), v);
      }
    }
    return args;
  }

  absl::StatusOr<Value> EvalCall(const CallExpr& e, const FramePtr& frame, const Value* caller) {
    TP_ASSIGN_OR_RETURN(auto callee, Eval(*e.callee, frame));
    TP_ASSIGN_OR_RETURN(auto args, EvalArgs(e.args, frame));
    if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
    if (callee.is_undefined()) return absl::InvalidArgumentError(callee.undefined_hint());
    if (callee.kind() != Value::Kind::kCallable) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", callee.TypeName(), "' object is not callable"));
    }
    return callee.callable().Call(std::move(args));
  }

  // A filter expression; when `input` is set it replaces the innermost (null) operand,
  // as in {% filter %} and {% set x | f %} blocks.
  absl::StatusOr<Value> EvalFilter(const Expr& expr, const FramePtr& frame, const Value* input) {
    const auto& e = static_cast<const FilterExpr&>(expr);
    if (e.def == nullptr) {
      return WithPosition(
          absl::InvalidArgumentError(absl::StrCat("No filter named '", e.name, "' found.")),
          expr.pos);
    }
    Value operand;
    if (e.operand == nullptr) {
      operand = input != nullptr ? *input : Value();
    } else if (e.operand->kind == Expr::Kind::kFilter && input != nullptr) {
      TP_ASSIGN_OR_RETURN(auto v, EvalFilter(*e.operand, frame, input));
      operand = std::move(v);
    } else {
      TP_ASSIGN_OR_RETURN(auto v, Eval(*e.operand, frame));
      operand = std::move(v);
    }
    TP_ASSIGN_OR_RETURN(auto args, EvalArgs(e.args, frame));
    auto result = e.def->apply(operand, std::move(args));
    if (!result.ok()) return WithPosition(result.status(), expr.pos);
    return result;
  }

  const EvalOptions& options_;
  Object globals_;
  Jump jump_ = Jump::kNone;
  int call_depth_ = 0;
};

absl::StatusOr<Value> Evaluator::CallMacro(const MacroStmt& def, const FramePtr& closure,
                                           CallArgs args) {
  const std::string display = def.name.empty() ? "caller" : def.name;
  if (call_depth_ >= options_.max_call_depth) {
    return absl::InvalidArgumentError(absl::StrCat("macro '", display, "' nested more than ",
                                                   options_.max_call_depth, " calls deep"));
  }
  FramePtr frame = ChildFrame(closure);
  const size_t n = def.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> extra_positional;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      frame->vars[def.params[i]] = std::move(args.positional[i]);
      bound[i] = true;
    } else {
      extra_positional.push_back(std::move(args.positional[i]));
    }
  }
  if (!extra_positional.empty() && !def.uses_varargs) {
    return absl::InvalidArgumentError(
        absl::StrCat("macro '", display, "' takes not more than ", n, " argument(s)"));
  }
  Object extra_keyword;
  for (auto& [key, value] : args.keyword) {
    bool matched = false;
    for (size_t i = 0; i < n; ++i) {
      if (def.params[i] != key) continue;
      if (bound[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("macro '", display, "' got multiple values for argument '", key, "'"));
      }
      frame->vars[key] = std::move(value);
      bound[i] = matched = true;
    }
    if (matched) continue;
    if (key == "caller" && def.uses_caller) {
      frame->vars["caller"] = std::move(value);
    } else if (def.uses_kwargs) {
      extra_keyword.Set(key, std::move(value));
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("macro '", display, "' takes no keyword argument '", key, "'"));
    }
  }
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      TP_ASSIGN_OR_RETURN(auto v, Eval(*def.defaults[i - first_default], frame));
      frame->vars[def.params[i]] = std::move(v);
    } else {
      frame->vars[def.params[i]] =
          Value::Undefined(absl::StrCat("parameter '", def.params[i], "' was not provided"));
    }
  }
  frame->vars["varargs"] = Value::Tuple(std::move(extra_positional));
  frame->vars["kwargs"] = Value::Dict(std::move(extra_keyword));
  ++call_depth_;
  std::string out;
  Jump saved_jump = jump_;
  jump_ = Jump::kNone;
  absl::Status status = ExecBody(def.body, frame, &out);
  jump_ = saved_jump;
  --call_depth_;
  TP_RETURN_IF_ERROR(status);
  return Value::String(std::move(out));
}

absl::StatusOr<Value> MacroCallable::Call(CallArgs args) const {
  FramePtr frame = frame_.lock();
  if (frame == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("macro '", def_->name, "' was called outside the block that defined it"));
  }
  return evaluator_->CallMacro(*def_, frame, std::move(args));
}

}  // namespace

absl::StatusOr<std::string> RenderProgram(const Program& program, const Value& context,
                                          const EvalOptions& options) {
  if (!context.is_dict()) {
    return absl::InvalidArgumentError("the chat template context must be a JSON object");
  }
  Evaluator evaluator(options);
  return evaluator.Render(program, context);
}

}  // namespace tpserve::chat_template_internal
