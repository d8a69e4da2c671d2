// The syntax tree the parser builds and the evaluator walks. Expressions and statements are
// Node subclasses told apart by `kind` (the evaluator switches on it); every node carries
// the source position its errors report. Nodes own their children; a parsed Program is
// immutable and may be rendered by several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/error.h"
#include "template/filters.h"
#include "template/tests.h"
#include "template/value.h"
#include "template/value_ops.h"

namespace ubatch::jinja::ast {

enum class Kind : uint8_t {
  // Expressions
  kLiteral,   // Literal
  kName,      // Name
  kGetAttr,   // GetAttr          x.name
  kGetItem,   // GetItem          x[i]
  kSlice,     // Slice            x[a:b:c]
  kCall,      // Call             f(args)
  kFilter,    // Filter           x|f(args)
  kTest,      // Test             x is t(args)
  kNeg,       // Unary            -x
  kPos,       // Unary            +x
  kBinary,    // Binary           + - * / // % **
  kConcat,    // Concat           a ~ b ~ c
  kCompare,   // Compare          a < b == c, in, not in
  kAnd,       // Logical
  kOr,        // Logical
  kNot,       // Unary            not x
  kCondExpr,  // CondExpr         a if c else b
  kList,      // Sequence         [a, b]
  kTuple,     // Sequence         (a, b)
  kDict,      // DictLiteral      {k: v}
  // Statements
  kText,         // Text            template data
  kOutput,       // Output          {{ expr }}
  kIf,           // If
  kFor,          // For
  kSet,          // Set             {% set target = expr %}
  kSetBlock,     // SetBlock        {% set target %}…{% endset %}
  kMacro,        // Macro
  kFilterBlock,  // FilterBlock     {% filter f %}…{% endfilter %}
  kGeneration,   // Generation      {% generation %}…{% endgeneration %}
  kBreak,        // Node
  kContinue,     // Node
  kWith,         // With
};

struct Node {
  Node(Kind k, SourcePos p) : kind(k), pos(p) {}
  virtual ~Node() = default;
  Kind kind;
  SourcePos pos;
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

// ---- expressions ----

struct Literal : Node {
  Literal(SourcePos p, Value v) : Node(Kind::kLiteral, p), value(std::move(v)) {}
  Value value;
};

struct Name : Node {
  Name(SourcePos p, std::string n) : Node(Kind::kName, p), name(std::move(n)) {}
  std::string name;
};

struct GetAttr : Node {
  GetAttr(SourcePos p, NodePtr o, std::string a) : Node(Kind::kGetAttr, p), object(std::move(o)), attr(std::move(a)) {}
  NodePtr object;
  std::string attr;
};

struct GetItem : Node {
  GetItem(SourcePos p, NodePtr o, NodePtr i) : Node(Kind::kGetItem, p), object(std::move(o)), index(std::move(i)) {}
  NodePtr object, index;
};

struct Slice : Node {
  explicit Slice(SourcePos p) : Node(Kind::kSlice, p) {}
  NodePtr object, start, stop, step;  // bounds may be null
};

// Call arguments as written: positional, name=value, *args, **kwargs.
struct Arguments {
  std::vector<NodePtr> positional;
  std::vector<std::pair<std::string, NodePtr>> keyword;
  NodePtr star_args, star_kwargs;
};

struct Call : Node {
  explicit Call(SourcePos p) : Node(Kind::kCall, p) {}
  NodePtr callee;
  Arguments args;
};

struct Filter : Node {
  explicit Filter(SourcePos p) : Node(Kind::kFilter, p) {}
  NodePtr input;  // null in a filter block or `{% set x | f %}` (applied to the body)
  std::string name;
  FilterFn fn = nullptr;  // null: unknown, an error when evaluated
  Arguments args;
};

struct Test : Node {
  explicit Test(SourcePos p) : Node(Kind::kTest, p) {}
  NodePtr input;
  std::string name;
  TestFn fn = nullptr;  // null: unknown, an error when evaluated
  Arguments args;
};

struct Unary : Node {  // kNeg, kPos, kNot
  Unary(Kind k, SourcePos p, NodePtr o) : Node(k, p), operand(std::move(o)) {}
  NodePtr operand;
};

struct Binary : Node {
  Binary(SourcePos p, BinOp o, NodePtr l, NodePtr r) : Node(Kind::kBinary, p), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  NodePtr left, right;
};

struct Logical : Node {  // kAnd, kOr
  Logical(Kind k, SourcePos p, NodePtr l, NodePtr r) : Node(k, p), left(std::move(l)), right(std::move(r)) {}
  NodePtr left, right;
};

struct Concat : Node {
  explicit Concat(SourcePos p) : Node(Kind::kConcat, p) {}
  std::vector<NodePtr> parts;
};

struct Compare : Node {
  explicit Compare(SourcePos p) : Node(Kind::kCompare, p) {}
  NodePtr first;
  std::vector<std::pair<CmpOp, NodePtr>> rest;
};

struct CondExpr : Node {
  explicit CondExpr(SourcePos p) : Node(Kind::kCondExpr, p) {}
  NodePtr test, then_expr, else_expr;  // else_expr may be null (undefined when false)
};

struct Sequence : Node {  // kList, kTuple
  Sequence(Kind k, SourcePos p) : Node(k, p) {}
  std::vector<NodePtr> items;
};

struct DictLiteral : Node {
  explicit DictLiteral(SourcePos p) : Node(Kind::kDict, p) {}
  std::vector<std::pair<NodePtr, NodePtr>> items;
};

// ---- statements ----

// Assignment target: a name, a tuple of targets (unpacking), or namespace.attr.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kAttr };
  Kind kind = Kind::kName;
  std::string name;  // kName: the variable; kAttr: the namespace variable
  std::string attr;  // kAttr
  std::vector<Target> items;  // kTuple
  SourcePos pos;
};

struct Text : Node {
  Text(SourcePos p, std::string t) : Node(Kind::kText, p), text(std::move(t)) {}
  std::string text;
};

struct Output : Node {
  Output(SourcePos p, NodePtr e) : Node(Kind::kOutput, p), expr(std::move(e)) {}
  NodePtr expr;
};

struct If : Node {
  explicit If(SourcePos p) : Node(Kind::kIf, p) {}
  std::vector<std::pair<NodePtr, Body>> branches;  // if, elif…
  Body else_body;
};

struct For : Node {
  explicit For(SourcePos p) : Node(Kind::kFor, p) {}
  Target target;
  NodePtr iter;
  NodePtr filter;  // `for x in xs if cond`; may be null
  Body body, else_body;
};

struct Set : Node {
  explicit Set(SourcePos p) : Node(Kind::kSet, p) {}
  Target target;
  NodePtr value;
};

struct SetBlock : Node {
  explicit SetBlock(SourcePos p) : Node(Kind::kSetBlock, p) {}
  Target target;
  std::vector<NodePtr> filters;  // Filter nodes with null input, applied in order
  Body body;
};

struct Macro : Node {
  explicit Macro(SourcePos p) : Node(Kind::kMacro, p) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<NodePtr> defaults;  // one per param; null = no default
  Body body;
  bool catch_varargs = false;  // the body reads `varargs`
  bool catch_kwargs = false;   // the body reads `kwargs`
};

struct FilterBlock : Node {
  explicit FilterBlock(SourcePos p) : Node(Kind::kFilterBlock, p) {}
  std::vector<NodePtr> filters;  // Filter nodes with null input
  Body body;
};

struct Generation : Node {
  explicit Generation(SourcePos p) : Node(Kind::kGeneration, p) {}
  Body body;
};

struct With : Node {
  explicit With(SourcePos p) : Node(Kind::kWith, p) {}
  std::vector<std::pair<Target, NodePtr>> assignments;
  Body body;
};

struct Program {
  Body body;
};

}  // namespace ubatch::jinja::ast
