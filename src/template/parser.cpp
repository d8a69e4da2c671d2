// Recursive-descent parser (parser.h); one method per grammar rule, as jinja2's parser.py.
#include "template/parser.h"

#include <initializer_list>
#include <string_view>

namespace ubatch::jinja {

namespace {

using ast::NodePtr;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  ast::Program program() {
    ast::Program p;
    p.body = body({});
    return p;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    advance();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kData: return "template data";
      case TokenKind::kVarBegin: return "begin of print statement";
      case TokenKind::kVarEnd: return "end of print statement";
      case TokenKind::kBlockBegin: return "begin of statement block";
      case TokenKind::kBlockEnd: return "end of statement block";
      case TokenKind::kName: return "'" + t.text + "'";
      case TokenKind::kString: return "string";
      case TokenKind::kInt: return "integer";
      case TokenKind::kFloat: return "float";
      case TokenKind::kOperator: return "'" + t.text + "'";
      case TokenKind::kEof: return "end of template";
    }
    return "token";
  }

  [[noreturn]] void fail(const std::string& msg) const { syntax_error(msg, cur().pos); }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail("expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) unexpected("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) unexpected("a name");
    std::string n = cur().text;
    advance();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) unexpected("end of statement block");
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth)
        p_.fail("template nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };
  // Left-deep chains (a + b + c, x.y.z, x|f|g) nest one level per link.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : p_(p) {}
    void link() {
      ++n_;
      if (++p_.depth_ > kMaxParseDepth)
        p_.fail("template nested too deeply (more than " + std::to_string(kMaxParseDepth) + " levels)");
    }
    ~ChainGuard() { p_.depth_ -= n_; }
    Parser& p_;
    uint32_t n_ = 0;
  };

  // ---- statements ----

  // Statements until one of `end_tags` opens a block (left unconsumed, after its "{%") or,
  // when end_tags is empty, until the end of the template.
  ast::Body body(std::initializer_list<std::string_view> end_tags) {
    DepthGuard guard(*this);
    ast::Body out;
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case TokenKind::kData:
          out.push_back(std::make_unique<ast::Text>(t.pos, t.text));
          advance();
          break;
        case TokenKind::kVarBegin: {
          const SourcePos pos = t.pos;
          advance();
          NodePtr e = tuple_expr(true, {}, false);
          if (cur().kind != TokenKind::kVarEnd) unexpected("end of print statement");
          advance();
          out.push_back(std::make_unique<ast::Output>(pos, std::move(e)));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& tag = peek();
          if (tag.kind == TokenKind::kName) {
            for (std::string_view e : end_tags)
              if (tag.text == e) {
                advance();  // leave the tag name current
                return out;
              }
          }
          advance();
          out.push_back(statement(end_tags));
          break;
        }
        case TokenKind::kEof:
          if (end_tags.size() != 0) {
            std::string looking;
            for (std::string_view e : end_tags) looking += (looking.empty() ? "'" : " or '") + std::string(e) + "'";
            fail("Unexpected end of template. Jinja was looking for the following tags: " + looking + ".");
          }
          return out;
        default: unexpected("template data or a tag");
      }
    }
  }

  NodePtr statement(std::initializer_list<std::string_view> enclosing_end_tags) {
    if (cur().kind != TokenKind::kName) unexpected("a statement name");
    const Token& tag = cur();
    const std::string name = tag.text;
    const SourcePos pos = tag.pos;
    if (name == "if") return if_stmt();
    if (name == "for") return for_stmt();
    if (name == "set") return set_stmt();
    if (name == "macro") return macro_stmt();
    if (name == "filter") return filter_stmt();
    if (name == "generation") return generation_stmt();
    if (name == "with") return with_stmt();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
      advance();
      expect_block_end();
      return std::make_unique<ast::Node>(name == "break" ? ast::Kind::kBreak : ast::Kind::kContinue, pos);
    }
    for (std::string_view unsupported :
         {"include", "import", "from", "extends", "block", "call", "do", "autoescape", "trans", "raw"}) {
      if (name == unsupported) fail("the '" + name + "' tag is not supported");
    }
    std::string msg = "Encountered unknown tag '" + name + "'.";
    if (enclosing_end_tags.size() != 0) {
      std::string looking;
      for (std::string_view e : enclosing_end_tags) looking += (looking.empty() ? "'" : " or '") + std::string(e) + "'";
      msg += " Jinja was looking for the following tags: " + looking + ".";
    }
    fail(msg);
  }

  NodePtr if_stmt() {
    auto node = std::make_unique<ast::If>(cur().pos);
    advance();  // "if"
    while (true) {
      NodePtr test = tuple_expr(false, {}, false);
      expect_block_end();
      ast::Body b = body({"elif", "else", "endif"});
      node->branches.emplace_back(std::move(test), std::move(b));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        node->else_body = body({"endif"});
      }
      expect_name();  // "endif"
      expect_block_end();
      return node;
    }
  }

  NodePtr for_stmt() {
    auto node = std::make_unique<ast::For>(cur().pos);
    advance();  // "for"
    node->target = assign_target(false, {"in"});
    if (!skip_name("in")) unexpected("'in'");
    node->iter = tuple_expr(false, {"recursive"}, false);
    if (skip_name("if")) node->filter = expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    node->body = body({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      node->else_body = body({"endfor"});
    }
    expect_name();  // "endfor"
    expect_block_end();
    return node;
  }

  NodePtr set_stmt() {
    const SourcePos pos = cur().pos;
    advance();  // "set"
    ast::Target target = assign_target(true, {});
    if (skip_op("=")) {
      auto node = std::make_unique<ast::Set>(pos);
      node->target = std::move(target);
      node->value = tuple_expr(true, {}, false);
      expect_block_end();
      return node;
    }
    auto node = std::make_unique<ast::SetBlock>(pos);
    node->target = std::move(target);
    while (is_op("|")) {
      advance();
      node->filters.push_back(filter_call(nullptr));
    }
    expect_block_end();
    node->body = body({"endset"});
    advance();  // "endset"
    expect_block_end();
    return node;
  }

  NodePtr macro_stmt() {
    auto node = std::make_unique<ast::Macro>(cur().pos);
    advance();  // "macro"
    node->name = expect_name();
    expect_op("(");
    bool seen_default = false;
    while (!is_op(")")) {
      if (!node->params.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      std::string param = expect_name();
      NodePtr def;
      if (skip_op("=")) {
        def = expression(true);
        seen_default = true;
      } else if (seen_default) {
        fail("non-default argument follows default argument");
      }
      node->params.push_back(std::move(param));
      node->defaults.push_back(std::move(def));
    }
    advance();  // ")"
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro
    node->body = body({"endmacro"});
    loop_depth_ = saved_loops;
    advance();  // "endmacro"
    if (cur().kind == TokenKind::kName) advance();  // optional name
    expect_block_end();
    node->catch_varargs = reads_name(node->body, "varargs");
    node->catch_kwargs = reads_name(node->body, "kwargs");
    return node;
  }

  NodePtr filter_stmt() {
    auto node = std::make_unique<ast::FilterBlock>(cur().pos);
    advance();  // "filter"
    node->filters.push_back(filter_call(nullptr));
    while (skip_op("|")) node->filters.push_back(filter_call(nullptr));
    expect_block_end();
    node->body = body({"endfilter"});
    advance();
    expect_block_end();
    return node;
  }

  NodePtr generation_stmt() {
    auto node = std::make_unique<ast::Generation>(cur().pos);
    advance();
    expect_block_end();
    node->body = body({"endgeneration"});
    advance();
    expect_block_end();
    return node;
  }

  NodePtr with_stmt() {
    auto node = std::make_unique<ast::With>(cur().pos);
    advance();
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      ast::Target t = assign_target(false, {});
      expect_op("=");
      node->assignments.emplace_back(std::move(t), expression(true));
    }
    expect_block_end();
    node->body = body({"endwith"});
    advance();
    expect_block_end();
    return node;
  }

  // name | name.attr (with_namespace) | target, target, … | (target, …)
  ast::Target assign_target(bool with_namespace, std::initializer_list<std::string_view> end_names) {
    ast::Target t;
    t.pos = cur().pos;
    if (with_namespace && cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == ".") {
      t.kind = ast::Target::Kind::kAttr;
      t.name = expect_name();
      advance();  // "."
      t.attr = expect_name();
      return t;
    }
    std::vector<ast::Target> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        is_tuple = true;
        bool end = cur().kind == TokenKind::kBlockEnd || is_op("=") || is_op(")");
        for (std::string_view n : end_names) end = end || is_name(n);
        if (end) break;
      }
      items.push_back(single_target());
    }
    if (!is_tuple) return std::move(items[0]);
    t.kind = ast::Target::Kind::kTuple;
    t.items = std::move(items);
    return t;
  }

  ast::Target single_target() {
    DepthGuard guard(*this);
    if (skip_op("(")) {
      ast::Target t = assign_target(false, {});
      expect_op(")");
      return t;
    }
    ast::Target t;
    t.pos = cur().pos;
    t.name = expect_name();
    if (t.name == "true" || t.name == "false" || t.name == "none" || t.name == "True" || t.name == "False" ||
        t.name == "None")
      syntax_error("cannot assign to '" + t.name + "'", t.pos);
    return t;
  }

  static bool reads_name(const ast::Body& b, std::string_view name);

  // ---- expressions ----

  // Comma-separated expressions; a tuple when there is a comma (or `()` with explicit parens).
  NodePtr tuple_expr(bool with_condexpr, std::initializer_list<std::string_view> end_names, bool explicit_parens) {
    const SourcePos pos = cur().pos;
    std::vector<NodePtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      bool end = cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || is_op(")");
      for (std::string_view n : end_names) end = end || is_name(n);
      if (end) break;
      items.push_back(expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) unexpected("an expression");
    }
    auto t = std::make_unique<ast::Sequence>(ast::Kind::kTuple, pos);
    t->items = std::move(items);
    return t;
  }

  NodePtr expression(bool with_condexpr) {
    DepthGuard guard(*this);
    return with_condexpr ? cond_expr() : or_expr();
  }

  NodePtr cond_expr() {
    ChainGuard chain(*this);
    NodePtr e = or_expr();
    while (is_name("if")) {
      chain.link();
      auto c = std::make_unique<ast::CondExpr>(cur().pos);
      advance();
      c->test = or_expr();
      if (skip_name("else")) c->else_expr = cond_expr();
      c->then_expr = std::move(e);
      e = std::move(c);
    }
    return e;
  }

  NodePtr or_expr() {
    ChainGuard chain(*this);
    NodePtr left = and_expr();
    while (is_name("or")) {
      chain.link();
      const SourcePos pos = cur().pos;
      advance();
      left = std::make_unique<ast::Logical>(ast::Kind::kOr, pos, std::move(left), and_expr());
    }
    return left;
  }

  NodePtr and_expr() {
    ChainGuard chain(*this);
    NodePtr left = not_expr();
    while (is_name("and")) {
      chain.link();
      const SourcePos pos = cur().pos;
      advance();
      left = std::make_unique<ast::Logical>(ast::Kind::kAnd, pos, std::move(left), not_expr());
    }
    return left;
  }

  NodePtr not_expr() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const SourcePos pos = cur().pos;
      advance();
      return std::make_unique<ast::Unary>(ast::Kind::kNot, pos, not_expr());
    }
    return compare_expr();
  }

  NodePtr compare_expr() {
    const SourcePos pos = cur().pos;
    NodePtr first = math1();
    std::vector<std::pair<CmpOp, NodePtr>> rest;
    while (true) {
      CmpOp op;
      if (is_op("==")) {
        op = CmpOp::kEq;
      } else if (is_op("!=")) {
        op = CmpOp::kNe;
      } else if (is_op("<")) {
        op = CmpOp::kLt;
      } else if (is_op("<=")) {
        op = CmpOp::kLe;
      } else if (is_op(">")) {
        op = CmpOp::kGt;
      } else if (is_op(">=")) {
        op = CmpOp::kGe;
      } else if (is_name("in")) {
        op = CmpOp::kIn;
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        advance();
        op = CmpOp::kNotIn;
      } else {
        break;
      }
      advance();
      rest.emplace_back(op, math1());
    }
    if (rest.empty()) return first;
    auto c = std::make_unique<ast::Compare>(pos);
    c->first = std::move(first);
    c->rest = std::move(rest);
    return c;
  }

  NodePtr math1() {
    ChainGuard chain(*this);
    NodePtr left = concat();
    while (is_op("+") || is_op("-")) {
      chain.link();
      const BinOp op = cur().text == "+" ? BinOp::kAdd : BinOp::kSub;
      const SourcePos pos = cur().pos;
      advance();
      left = std::make_unique<ast::Binary>(pos, op, std::move(left), concat());
    }
    return left;
  }

  NodePtr concat() {
    const SourcePos pos = cur().pos;
    NodePtr first = math2();
    if (!is_op("~")) return first;
    auto c = std::make_unique<ast::Concat>(pos);
    c->parts.push_back(std::move(first));
    while (skip_op("~")) c->parts.push_back(math2());
    return c;
  }

  NodePtr math2() {
    ChainGuard chain(*this);
    NodePtr left = pow_expr();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      const std::string& t = cur().text;
      const BinOp op = t == "*" ? BinOp::kMul : t == "/" ? BinOp::kDiv : t == "//" ? BinOp::kFloorDiv : BinOp::kMod;
      const SourcePos pos = cur().pos;
      advance();
      left = std::make_unique<ast::Binary>(pos, op, std::move(left), pow_expr());
    }
    return left;
  }

  NodePtr pow_expr() {
    ChainGuard chain(*this);
    NodePtr left = unary(true);
    while (is_op("**")) {
      chain.link();
      const SourcePos pos = cur().pos;
      advance();
      left = std::make_unique<ast::Binary>(pos, BinOp::kPow, std::move(left), unary(true));
    }
    return left;
  }

  NodePtr unary(bool with_filter) {
    DepthGuard guard(*this);
    const SourcePos pos = cur().pos;
    NodePtr node;
    if (skip_op("-")) {
      node = std::make_unique<ast::Unary>(ast::Kind::kNeg, pos, unary(false));
    } else if (skip_op("+")) {
      node = std::make_unique<ast::Unary>(ast::Kind::kPos, pos, unary(false));
    } else {
      node = primary();
    }
    node = postfix(std::move(node));
    if (with_filter) node = filter_expr(std::move(node));
    return node;
  }

  NodePtr primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        std::string n = t.text;
        advance();
        if (n == "true" || n == "True") return std::make_unique<ast::Literal>(pos, Value::boolean(true));
        if (n == "false" || n == "False") return std::make_unique<ast::Literal>(pos, Value::boolean(false));
        if (n == "none" || n == "None") return std::make_unique<ast::Literal>(pos, Value::none());
        return std::make_unique<ast::Name>(pos, std::move(n));
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {
          s += cur().text;
          advance();
        }
        return std::make_unique<ast::Literal>(pos, Value::literal(s));
      }
      case TokenKind::kInt: {
        const int64_t v = t.int_value;
        advance();
        return std::make_unique<ast::Literal>(pos, Value::integer(v));
      }
      case TokenKind::kFloat: {
        const double v = t.float_value;
        advance();
        return std::make_unique<ast::Literal>(pos, Value::number(v));
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          advance();
          NodePtr e = tuple_expr(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          advance();
          auto list = std::make_unique<ast::Sequence>(ast::Kind::kList, pos);
          while (!is_op("]")) {
            if (!list->items.empty()) {
              expect_op(",");
              if (is_op("]")) break;
            }
            list->items.push_back(expression(true));
          }
          advance();
          return list;
        }
        if (t.text == "{") {
          advance();
          auto dict = std::make_unique<ast::DictLiteral>(pos);
          while (!is_op("}")) {
            if (!dict->items.empty()) {
              expect_op(",");
              if (is_op("}")) break;
            }
            NodePtr key = expression(true);
            expect_op(":");
            dict->items.emplace_back(std::move(key), expression(true));
          }
          advance();
          return dict;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  NodePtr postfix(NodePtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.link();
      const SourcePos pos = cur().pos;
      if (skip_op(".")) {
        if (cur().kind == TokenKind::kName) {
          node = std::make_unique<ast::GetAttr>(pos, std::move(node), expect_name());
        } else if (cur().kind == TokenKind::kInt) {
          auto idx = std::make_unique<ast::Literal>(cur().pos, Value::integer(cur().int_value));
          advance();
          node = std::make_unique<ast::GetItem>(pos, std::move(node), std::move(idx));
        } else {
          unexpected("name or number");
        }
      } else if (skip_op("[")) {
        node = subscript(pos, std::move(node));
      } else if (is_op("(")) {
        node = call(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr subscript(SourcePos pos, NodePtr object) {
    DepthGuard guard(*this);
    // [a], [a, b] (tuple key; [] is the empty tuple, as in jinja2), [a:b:c] with any part missing.
    std::vector<NodePtr> items;
    NodePtr slice_node;
    while (!is_op("]")) {
      if (!items.empty() || slice_node) {
        expect_op(",");
        if (is_op("]")) break;
      }
      NodePtr start;
      if (!is_op(":")) {
        start = expression(true);
        if (!is_op(":")) {
          items.push_back(std::move(start));
          continue;
        }
      }
      advance();  // ":"
      auto s = std::make_unique<ast::Slice>(pos);
      s->start = std::move(start);
      if (!is_op(":") && !is_op("]") && !is_op(",")) s->stop = expression(true);
      if (skip_op(":")) {
        if (!is_op("]") && !is_op(",")) s->step = expression(true);
      }
      if (slice_node || !items.empty()) fail("slices inside a tuple subscript are not supported");
      slice_node = std::move(s);
    }
    advance();  // "]"
    if (slice_node) {
      if (!items.empty()) fail("slices inside a tuple subscript are not supported");
      static_cast<ast::Slice&>(*slice_node).object = std::move(object);
      return slice_node;
    }
    NodePtr index;
    if (items.size() == 1) {
      index = std::move(items[0]);
    } else {
      auto t = std::make_unique<ast::Sequence>(ast::Kind::kTuple, pos);
      t->items = std::move(items);
      index = std::move(t);
    }
    return std::make_unique<ast::GetItem>(pos, std::move(object), std::move(index));
  }

  ast::Arguments call_args() {
    DepthGuard guard(*this);
    ast::Arguments args;
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        if (args.star_args) fail("only one *args is allowed");
        args.star_args = expression(true);
      } else if (skip_op("**")) {
        if (args.star_kwargs) fail("only one **kwargs is allowed");
        args.star_kwargs = expression(true);
      } else if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        std::string key = expect_name();
        advance();  // "="
        args.keyword.emplace_back(std::move(key), expression(true));
      } else {
        if (!args.keyword.empty() || args.star_kwargs) fail("positional argument follows keyword argument");
        args.positional.push_back(expression(true));
      }
    }
    advance();  // ")"
    return args;
  }

  NodePtr call(NodePtr callee) {
    auto c = std::make_unique<ast::Call>(cur().pos);
    c->callee = std::move(callee);
    c->args = call_args();
    return c;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  std::unique_ptr<ast::Filter> filter_call(NodePtr input) {
    auto f = std::make_unique<ast::Filter>(cur().pos);
    f->input = std::move(input);
    f->name = dotted_name();
    f->fn = find_filter(f->name);
    if (is_op("(")) f->args = call_args();
    return f;
  }

  NodePtr filter_expr(NodePtr node) {
    ChainGuard chain(*this);
    while (true) {
      chain.link();
      if (skip_op("|")) {
        node = filter_call(std::move(node));
      } else if (is_name("is")) {
        node = test(std::move(node));
      } else if (is_op("(")) {
        node = call(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr test(NodePtr input) {
    const SourcePos pos = cur().pos;
    advance();  // "is"
    const bool negated = skip_name("not");
    auto t = std::make_unique<ast::Test>(cur().pos);
    t->input = std::move(input);
    t->name = dotted_name();
    t->fn = find_test(t->name);
    if (is_op("(")) {
      t->args = call_args();
    } else {
      const Token& c = cur();
      const bool arg_start = c.kind == TokenKind::kName || c.kind == TokenKind::kString || c.kind == TokenKind::kInt ||
                             c.kind == TokenKind::kFloat || is_op("[") || is_op("{");
      if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("You cannot chain multiple tests with is");
        DepthGuard guard(*this);
        t->args.positional.push_back(postfix(primary()));
      }
    }
    if (!negated) return t;
    return std::make_unique<ast::Unary>(ast::Kind::kNot, pos, std::move(t));
  }

  const std::vector<Token>& toks_;
  size_t i_ = 0;
  uint32_t depth_ = 0;
  int loop_depth_ = 0;
};

// Whether a Name node called `name` appears anywhere in the body (macro varargs/kwargs).
bool node_reads(const ast::Node* n, std::string_view name, bool into_macros);

bool body_reads(const ast::Body& b, std::string_view name, bool into_macros) {
  for (const auto& n : b)
    if (node_reads(n.get(), name, into_macros)) return true;
  return false;
}

bool args_read(const ast::Arguments& a, std::string_view name, bool into_macros) {
  for (const auto& p : a.positional)
    if (node_reads(p.get(), name, into_macros)) return true;
  for (const auto& kv : a.keyword)
    if (node_reads(kv.second.get(), name, into_macros)) return true;
  return node_reads(a.star_args.get(), name, into_macros) || node_reads(a.star_kwargs.get(), name, into_macros);
}

bool node_reads(const ast::Node* n, std::string_view name, bool into_macros) {
  if (!n) return false;
  using ast::Kind;
  switch (n->kind) {
    case Kind::kName: return static_cast<const ast::Name*>(n)->name == name;
    case Kind::kLiteral:
    case Kind::kText:
    case Kind::kBreak:
    case Kind::kContinue: return false;
    case Kind::kMacro: {
      if (!into_macros) return false;  // a nested macro has its own varargs/kwargs
      auto* m = static_cast<const ast::Macro*>(n);
      for (const auto& d : m->defaults)
        if (node_reads(d.get(), name, into_macros)) return true;
      return body_reads(m->body, name, into_macros);
    }
    case Kind::kGetAttr: return node_reads(static_cast<const ast::GetAttr*>(n)->object.get(), name, into_macros);
    case Kind::kGetItem: {
      auto* g = static_cast<const ast::GetItem*>(n);
      return node_reads(g->object.get(), name, into_macros) || node_reads(g->index.get(), name, into_macros);
    }
    case Kind::kSlice: {
      auto* s = static_cast<const ast::Slice*>(n);
      return node_reads(s->object.get(), name, into_macros) || node_reads(s->start.get(), name, into_macros) || node_reads(s->stop.get(), name, into_macros) ||
             node_reads(s->step.get(), name, into_macros);
    }
    case Kind::kCall: {
      auto* c = static_cast<const ast::Call*>(n);
      return node_reads(c->callee.get(), name, into_macros) || args_read(c->args, name, into_macros);
    }
    case Kind::kFilter: {
      auto* f = static_cast<const ast::Filter*>(n);
      return node_reads(f->input.get(), name, into_macros) || args_read(f->args, name, into_macros);
    }
    case Kind::kTest: {
      auto* t = static_cast<const ast::Test*>(n);
      return node_reads(t->input.get(), name, into_macros) || args_read(t->args, name, into_macros);
    }
    case Kind::kNeg:
    case Kind::kPos:
    case Kind::kNot: return node_reads(static_cast<const ast::Unary*>(n)->operand.get(), name, into_macros);
    case Kind::kBinary: {
      auto* b = static_cast<const ast::Binary*>(n);
      return node_reads(b->left.get(), name, into_macros) || node_reads(b->right.get(), name, into_macros);
    }
    case Kind::kAnd:
    case Kind::kOr: {
      auto* l = static_cast<const ast::Logical*>(n);
      return node_reads(l->left.get(), name, into_macros) || node_reads(l->right.get(), name, into_macros);
    }
    case Kind::kConcat: {
      for (const auto& p : static_cast<const ast::Concat*>(n)->parts)
        if (node_reads(p.get(), name, into_macros)) return true;
      return false;
    }
    case Kind::kCompare: {
      auto* c = static_cast<const ast::Compare*>(n);
      if (node_reads(c->first.get(), name, into_macros)) return true;
      for (const auto& r : c->rest)
        if (node_reads(r.second.get(), name, into_macros)) return true;
      return false;
    }
    case Kind::kCondExpr: {
      auto* c = static_cast<const ast::CondExpr*>(n);
      return node_reads(c->test.get(), name, into_macros) || node_reads(c->then_expr.get(), name, into_macros) ||
             node_reads(c->else_expr.get(), name, into_macros);
    }
    case Kind::kList:
    case Kind::kTuple: {
      for (const auto& p : static_cast<const ast::Sequence*>(n)->items)
        if (node_reads(p.get(), name, into_macros)) return true;
      return false;
    }
    case Kind::kDict: {
      for (const auto& kv : static_cast<const ast::DictLiteral*>(n)->items)
        if (node_reads(kv.first.get(), name, into_macros) || node_reads(kv.second.get(), name, into_macros)) return true;
      return false;
    }
    case Kind::kOutput: return node_reads(static_cast<const ast::Output*>(n)->expr.get(), name, into_macros);
    case Kind::kIf: {
      auto* i = static_cast<const ast::If*>(n);
      for (const auto& br : i->branches)
        if (node_reads(br.first.get(), name, into_macros) || body_reads(br.second, name, into_macros)) return true;
      return body_reads(i->else_body, name, into_macros);
    }
    case Kind::kFor: {
      auto* f = static_cast<const ast::For*>(n);
      return node_reads(f->iter.get(), name, into_macros) || node_reads(f->filter.get(), name, into_macros) || body_reads(f->body, name, into_macros) ||
             body_reads(f->else_body, name, into_macros);
    }
    case Kind::kSet: return node_reads(static_cast<const ast::Set*>(n)->value.get(), name, into_macros);
    case Kind::kSetBlock: {
      auto* s = static_cast<const ast::SetBlock*>(n);
      for (const auto& f : s->filters)
        if (node_reads(f.get(), name, into_macros)) return true;
      return body_reads(s->body, name, into_macros);
    }
    case Kind::kFilterBlock: {
      auto* s = static_cast<const ast::FilterBlock*>(n);
      for (const auto& f : s->filters)
        if (node_reads(f.get(), name, into_macros)) return true;
      return body_reads(s->body, name, into_macros);
    }
    case Kind::kGeneration: return body_reads(static_cast<const ast::Generation*>(n)->body, name, into_macros);
    case Kind::kWith: {
      auto* w = static_cast<const ast::With*>(n);
      for (const auto& a : w->assignments)
        if (node_reads(a.second.get(), name, into_macros)) return true;
      return body_reads(w->body, name, into_macros);
    }
  }
  return false;
}

bool Parser::reads_name(const ast::Body& b, std::string_view name) { return body_reads(b, name, false); }

}  // namespace

ast::Program parse(const std::vector<Token>& tokens) { return Parser(tokens).program(); }

bool reads_name(const ast::Body& body, std::string_view name) { return body_reads(body, name, true); }

}  // namespace ubatch::jinja
