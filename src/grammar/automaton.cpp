// Grammar → per-rule DFAs with call edges (contract in automaton.h).
#include "grammar/automaton.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "grammar/utf8_ranges.h"

namespace ubatch::grammar {

namespace {

constexpr size_t kInlineMaxNodes = 256;
constexpr size_t kSaturate = size_t{1} << 40;

void collect_refs(const Expr& e, std::vector<int32_t>& out) {
  if (e.kind == Expr::Kind::Ref) out.push_back(e.rule);
  for (const Expr& c : e.items) collect_refs(c, out);
}

// Which rules are reachable from the root, which are recursive, and an order with callees
// before callers (Tarjan's strongly connected components, iteratively).
struct RuleGraph {
  std::vector<std::vector<int32_t>> refs;  // [rule] rules its body references
  std::vector<bool> reachable, recursive;
  std::vector<int32_t> order;              // reachable rules, callees first

  explicit RuleGraph(const Grammar& g) {
    const size_t n = g.rules.size();
    refs.resize(n);
    for (size_t r = 0; r < n; ++r) {
      collect_refs(g.rules[r].body, refs[r]);
      std::sort(refs[r].begin(), refs[r].end());
      refs[r].erase(std::unique(refs[r].begin(), refs[r].end()), refs[r].end());
    }
    reachable.assign(n, false);
    recursive.assign(n, false);
    std::vector<int32_t> index(n, -1), low(n, 0);
    std::vector<bool> on_stack(n, false);
    std::vector<int32_t> stack;
    int32_t counter = 0;
    struct Frame {
      int32_t rule;
      size_t next;
    };
    std::vector<Frame> dfs;
    dfs.push_back({g.root, 0});
    index[static_cast<size_t>(g.root)] = low[static_cast<size_t>(g.root)] = counter++;
    stack.push_back(g.root);
    on_stack[static_cast<size_t>(g.root)] = true;
    while (!dfs.empty()) {
      Frame& f = dfs.back();
      const auto v = static_cast<size_t>(f.rule);
      if (f.next < refs[v].size()) {
        const int32_t w = refs[v][f.next++];
        const auto wi = static_cast<size_t>(w);
        if (w == f.rule) recursive[v] = true;
        if (index[wi] < 0) {
          index[wi] = low[wi] = counter++;
          stack.push_back(w);
          on_stack[wi] = true;
          dfs.push_back({w, 0});
        } else if (on_stack[wi]) {
          low[v] = std::min(low[v], index[wi]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<int32_t> scc;
        int32_t w = -1;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[static_cast<size_t>(w)] = false;
          scc.push_back(w);
        } while (w != f.rule);
        for (int32_t r : scc) {
          reachable[static_cast<size_t>(r)] = true;
          if (scc.size() > 1) recursive[static_cast<size_t>(r)] = true;
          order.push_back(r);
        }
      }
      const int32_t done = f.rule;
      dfs.pop_back();
      if (!dfs.empty()) {
        const auto p = static_cast<size_t>(dfs.back().rule);
        low[p] = std::min(low[p], low[static_cast<size_t>(done)]);
      }
    }
  }
};

struct Estimate {
  size_t size = 0;
  bool loop_free = true;
};

struct NfaNode {
  struct ByteEdge {
    uint8_t lo, hi;
    uint32_t to;
  };
  struct CallEdge {
    int32_t rule;
    uint32_t to;
  };
  std::vector<uint32_t> eps;
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, const std::vector<bool>& inlined, size_t max_nodes)
      : g_(g), inlined_(inlined), max_nodes_(max_nodes) {}

  std::vector<NfaNode> nodes;
  bool too_big = false;

  uint32_t new_node() {
    if (nodes.size() >= max_nodes_) {
      too_big = true;
      return 0;
    }
    nodes.emplace_back();
    return static_cast<uint32_t>(nodes.size() - 1);
  }

  // Adds e after node `from`; returns the node where it ends. Edges are only added out of
  // `from` and fresh nodes, never back into `from`, so alternatives may share it.
  uint32_t build(const Expr& e, uint32_t from) {
    if (too_big) return from;
    switch (e.kind) {
      case Expr::Kind::Empty: return from;
      case Expr::Kind::Literal: {
        uint32_t cur = from;
        for (char ch : e.bytes) {
          const uint32_t n = new_node();
          if (too_big) return from;
          const auto b = static_cast<uint8_t>(ch);
          nodes[cur].bytes.push_back({b, b, n});
          cur = n;
        }
        return cur;
      }
      case Expr::Kind::Chars: {
        const uint32_t end = new_node();
        for (const CharRange& r : e.ranges) {
          for (const std::vector<ByteRange>& seq : utf8_sequences(r.lo, r.hi)) {
            uint32_t cur = from;
            for (size_t k = 0; k + 1 < seq.size(); ++k) {
              const uint32_t n = new_node();
              if (too_big) return from;
              nodes[cur].bytes.push_back({seq[k].lo, seq[k].hi, n});
              cur = n;
            }
            if (too_big) return from;
            nodes[cur].bytes.push_back({seq.back().lo, seq.back().hi, end});
          }
        }
        return end;
      }
      case Expr::Kind::Seq: {
        uint32_t cur = from;
        for (const Expr& item : e.items) cur = build(item, cur);
        return cur;
      }
      case Expr::Kind::Alt: {
        const uint32_t end = new_node();
        for (const Expr& item : e.items) {
          const uint32_t x = build(item, from);
          if (too_big) return from;
          nodes[x].eps.push_back(end);
        }
        return end;
      }
      case Expr::Kind::Repeat: {
        const Expr& item = e.items[0];
        uint32_t cur = from;
        for (uint32_t i = 0; i < e.min && !too_big; ++i) {
          // A fresh node per copy: a copy's end may be a loop node of the item.
          const uint32_t start = new_node();
          if (too_big) return from;
          nodes[cur].eps.push_back(start);
          cur = build(item, start);
        }
        if (e.max == kUnbounded) {
          const uint32_t loop = new_node();
          if (too_big) return from;
          nodes[cur].eps.push_back(loop);
          const uint32_t x = build(item, loop);
          const uint32_t end = new_node();
          if (too_big) return from;
          nodes[x].eps.push_back(loop);
          nodes[loop].eps.push_back(end);
          return end;
        }
        std::vector<uint32_t> exits{cur};
        for (uint32_t i = e.min; i < e.max && !too_big; ++i) {
          const uint32_t start = new_node();
          if (too_big) return from;
          nodes[cur].eps.push_back(start);
          cur = build(item, start);
          exits.push_back(cur);
        }
        const uint32_t end = new_node();
        if (too_big) return from;
        for (uint32_t x : exits) nodes[x].eps.push_back(end);
        return end;
      }
      case Expr::Kind::Ref: {
        if (inlined_[static_cast<size_t>(e.rule)]) return build(g_.rules[static_cast<size_t>(e.rule)].body, from);
        const uint32_t end = new_node();
        if (too_big) return from;
        nodes[from].calls.push_back({e.rule, end});
        return end;
      }
    }
    return from;
  }

 private:
  const Grammar& g_;
  const std::vector<bool>& inlined_;
  size_t max_nodes_;
};

Estimate estimate(const Expr& e, const std::vector<Estimate>& rule_est, const std::vector<bool>& inlined) {
  Estimate out;
  switch (e.kind) {
    case Expr::Kind::Empty: break;
    case Expr::Kind::Literal: out.size = e.bytes.size(); break;
    case Expr::Kind::Chars: out.size = 1 + 2 * e.ranges.size(); break;
    case Expr::Kind::Seq:
    case Expr::Kind::Alt:
      out.size = 1;
      for (const Expr& c : e.items) {
        const Estimate x = estimate(c, rule_est, inlined);
        out.size = std::min(kSaturate, out.size + x.size);
        out.loop_free = out.loop_free && x.loop_free;
      }
      break;
    case Expr::Kind::Repeat: {
      const Estimate x = estimate(e.items[0], rule_est, inlined);
      out.loop_free = x.loop_free && e.max != kUnbounded;
      const size_t copies = e.max == kUnbounded ? std::max<size_t>(e.min, 1) : e.max;
      out.size = std::min(kSaturate, (x.size + 1) * copies + 1);
      break;
    }
    case Expr::Kind::Ref: {
      const auto r = static_cast<size_t>(e.rule);
      out.size = 1;
      if (inlined[r]) {
        out.size = std::min(kSaturate, rule_est[r].size + 1);
        out.loop_free = rule_est[r].loop_free;
      }
      break;
    }
  }
  return out;
}

// Sorted set of NFA nodes closed under epsilon edges.
class Closer {
 public:
  explicit Closer(const std::vector<NfaNode>& nodes) : nodes_(nodes), mark_(nodes.size(), 0) {}
  std::vector<uint32_t> close(std::vector<uint32_t> set) {
    ++gen_;
    std::vector<uint32_t> work;
    std::vector<uint32_t> out;
    for (uint32_t n : set)
      if (mark_[n] != gen_) mark_[n] = gen_, work.push_back(n);
    while (!work.empty()) {
      const uint32_t n = work.back();
      work.pop_back();
      out.push_back(n);
      for (uint32_t m : nodes_[n].eps)
        if (mark_[m] != gen_) mark_[m] = gen_, work.push_back(m);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  const std::vector<NfaNode>& nodes_;
  std::vector<uint32_t> mark_;
  uint32_t gen_ = 0;
};

}  // namespace

Result<Automaton> build_automaton(const Grammar& g, const AutomatonLimits& limits) {
  if (g.root < 0 || static_cast<size_t>(g.root) >= g.rules.size()) return Status::error("grammar: no start rule");
  const size_t n_rules = g.rules.size();
  const RuleGraph graph(g);

  // 1. Inlining decisions, callees first.
  std::vector<bool> inlined(n_rules, false);
  std::vector<Estimate> est(n_rules);
  for (int32_t r : graph.order) {
    const auto ri = static_cast<size_t>(r);
    est[ri] = estimate(g.rules[ri].body, est, inlined);
    inlined[ri] = !graph.recursive[ri] && r != g.root && est[ri].loop_free && est[ri].size <= kInlineMaxNodes;
  }

  // 2. NFA per compiled rule (the root first).
  std::vector<int32_t> compiled;  // grammar rule ids with their own automaton
  compiled.push_back(g.root);
  for (int32_t r : graph.order)
    if (r != g.root && !inlined[static_cast<size_t>(r)]) compiled.push_back(r);
  std::vector<int32_t> compiled_index(n_rules, -1);
  for (size_t i = 0; i < compiled.size(); ++i) compiled_index[static_cast<size_t>(compiled[i])] = static_cast<int32_t>(i);

  NfaBuilder nfa(g, inlined, limits.max_nfa_nodes);
  std::vector<uint32_t> nfa_start(compiled.size()), nfa_accept(compiled.size());
  for (size_t i = 0; i < compiled.size(); ++i) {
    nfa_start[i] = nfa.new_node();
    nfa_accept[i] = nfa.build(g.rules[static_cast<size_t>(compiled[i])].body, nfa_start[i]);
    if (nfa.too_big) break;
  }
  if (nfa.too_big)
    return Status::error(fmt::format("grammar: too large (more than {} automaton nodes); lower the repetition counts "
                                     "or move repeated parts into their own rules",
                                     limits.max_nfa_nodes));

  // Byte classes: bytes that no edge tells apart share one.
  Automaton a;
  {
    std::array<bool, 257> cut{};
    for (const NfaNode& n : nfa.nodes)
      for (const NfaNode::ByteEdge& e : n.bytes) {
        cut[e.lo] = true;
        cut[static_cast<size_t>(e.hi) + 1] = true;
      }
    uint32_t cls = 0;
    for (size_t b = 0; b < 256; ++b) {
      if (b > 0 && cut[b]) ++cls;
      a.byte_class_[b] = static_cast<uint8_t>(cls);
    }
    a.n_classes_ = cls + 1;
  }
  const uint32_t n_classes = a.n_classes_;

  // 3. Subset construction per rule. States are numbered in discovery order and processed
  // in that order, so each state's row is appended to `next` as it is processed.
  struct PendingCall {
    int32_t rule;  // grammar rule id
    uint32_t ret;
  };
  std::vector<uint32_t> next;
  std::vector<uint8_t> final_flag;
  std::vector<std::vector<PendingCall>> pending_calls;
  std::vector<int32_t> state_rule;
  std::vector<uint32_t> rule_start(compiled.size());
  Closer closer(nfa.nodes);
  bool too_many = false;
  for (size_t ci = 0; ci < compiled.size() && !too_many; ++ci) {
    std::map<std::vector<uint32_t>, uint32_t> ids;
    std::vector<std::vector<uint32_t>> sets;  // local index → NFA set
    const uint32_t base = static_cast<uint32_t>(final_flag.size());
    auto id_of = [&](std::vector<uint32_t> raw) -> uint32_t {
      std::vector<uint32_t> set = closer.close(std::move(raw));
      auto [it, inserted] = ids.try_emplace(set, base + static_cast<uint32_t>(sets.size()));
      if (inserted) {
        sets.push_back(std::move(set));
        if (base + sets.size() > limits.max_states ||
            (base + sets.size()) * static_cast<size_t>(n_classes) > limits.max_table_entries)
          too_many = true;
      }
      return it->second;
    };
    rule_start[ci] = id_of({nfa_start[ci]});
    std::vector<std::vector<uint32_t>> targets(n_classes);
    for (size_t k = 0; k < sets.size() && !too_many; ++k) {
      const std::vector<uint32_t> set = sets[k];  // copy: id_of may grow `sets`
      for (auto& t : targets) t.clear();
      std::map<int32_t, std::vector<uint32_t>> calls;
      bool fin = false;
      for (uint32_t node : set) {
        if (node == nfa_accept[ci]) fin = true;
        for (const NfaNode::ByteEdge& e : nfa.nodes[node].bytes)
          for (uint32_t c = a.byte_class_[e.lo]; c <= a.byte_class_[e.hi]; ++c) targets[c].push_back(e.to);
        for (const NfaNode::CallEdge& c : nfa.nodes[node].calls) calls[c.rule].push_back(c.to);
      }
      std::map<std::vector<uint32_t>, uint32_t> memo;  // classes with the same targets share a state
      const size_t row = next.size();
      next.resize(row + n_classes, Automaton::kNone);
      for (uint32_t c = 0; c < n_classes; ++c) {
        std::vector<uint32_t>& t = targets[c];
        if (t.empty()) continue;
        std::sort(t.begin(), t.end());
        t.erase(std::unique(t.begin(), t.end()), t.end());
        auto it = memo.find(t);
        const uint32_t to = it != memo.end() ? it->second : (memo[t] = id_of(t));
        next[row + c] = to;
      }
      std::vector<PendingCall> pc;
      for (auto& [rule, rets] : calls) pc.push_back({rule, id_of(rets)});
      final_flag.push_back(fin ? 1 : 0);
      pending_calls.push_back(std::move(pc));
      state_rule.push_back(static_cast<int32_t>(ci));
    }
  }
  if (too_many)
    return Status::error(fmt::format("grammar: too large (more than {} automaton states); lower the repetition counts, "
                                     "or simplify alternatives that overlap",
                                     limits.max_states));
  const auto n_states = static_cast<uint32_t>(final_flag.size());

  // 4. Liveness: states that can reach the end of their rule, where a call edge is usable
  // once its rule is known to end somewhere (productive).
  std::vector<std::vector<uint32_t>> byte_preds(n_states);
  for (uint32_t s = 0; s < n_states; ++s)
    for (uint32_t c = 0; c < n_classes; ++c) {
      const uint32_t t = next[static_cast<size_t>(s) * n_classes + c];
      if (t != Automaton::kNone && (byte_preds[t].empty() || byte_preds[t].back() != s)) byte_preds[t].push_back(s);
    }
  std::vector<std::vector<std::pair<uint32_t, int32_t>>> calls_by_ret(n_states);  // ret → (state, compiled rule)
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> calls_to(compiled.size());  // rule → (state, ret)
  for (uint32_t s = 0; s < n_states; ++s)
    for (const PendingCall& pc : pending_calls[s]) {
      const int32_t callee = compiled_index[static_cast<size_t>(pc.rule)];
      calls_by_ret[pc.ret].push_back({s, callee});
      calls_to[static_cast<size_t>(callee)].push_back({s, pc.ret});
    }
  std::vector<bool> live(n_states, false), productive(compiled.size(), false);
  std::vector<int32_t> start_of_state(n_states, -1);
  for (size_t ci = 0; ci < compiled.size(); ++ci) start_of_state[rule_start[ci]] = static_cast<int32_t>(ci);
  std::vector<uint32_t> work;
  auto mark = [&](uint32_t s) {
    if (!live[s]) live[s] = true, work.push_back(s);
  };
  for (uint32_t s = 0; s < n_states; ++s)
    if (final_flag[s]) mark(s);
  while (!work.empty()) {
    const uint32_t x = work.back();
    work.pop_back();
    for (uint32_t p : byte_preds[x]) mark(p);
    for (const auto& [s, callee] : calls_by_ret[x])
      if (productive[static_cast<size_t>(callee)]) mark(s);
    if (const int32_t r = start_of_state[x]; r >= 0 && !productive[static_cast<size_t>(r)]) {
      productive[static_cast<size_t>(r)] = true;
      for (const auto& [s, ret] : calls_to[static_cast<size_t>(r)])
        if (live[ret]) mark(s);
    }
  }
  if (!live[rule_start[0]])
    return Status::error(fmt::format("grammar: the start rule '{}' matches no text (each of its alternatives needs a "
                                     "rule that never ends)",
                                     g.rules[static_cast<size_t>(g.root)].name));

  // Compact: keep the live states, renumbered in order.
  std::vector<uint32_t> new_id(n_states, Automaton::kNone);
  uint32_t n_live = 0;
  for (uint32_t s = 0; s < n_states; ++s)
    if (live[s]) new_id[s] = n_live++;
  a.next_.assign(static_cast<size_t>(n_live) * n_classes, Automaton::kNone);
  a.flags_.assign(n_live, 0);
  a.state_rule_.assign(n_live, 0);
  a.call_offsets_.assign(n_live + 1, 0);
  for (uint32_t s = 0; s < n_states; ++s) {
    const uint32_t ns = new_id[s];
    if (ns == Automaton::kNone) continue;
    uint8_t flags = final_flag[s] ? Automaton::kFinal : 0;
    for (uint32_t c = 0; c < n_classes; ++c) {
      const uint32_t t = next[static_cast<size_t>(s) * n_classes + c];
      const uint32_t nt = t == Automaton::kNone ? Automaton::kNone : new_id[t];
      a.next_[static_cast<size_t>(ns) * n_classes + c] = nt;
      if (nt != Automaton::kNone) flags |= Automaton::kScans;
    }
    a.flags_[ns] = flags;
    a.state_rule_[ns] = state_rule[s];
  }
  for (uint32_t s = 0; s < n_states; ++s) {
    const uint32_t ns = new_id[s];
    if (ns == Automaton::kNone) continue;
    for (const PendingCall& pc : pending_calls[s]) {
      const auto callee = static_cast<size_t>(compiled_index[static_cast<size_t>(pc.rule)]);
      if (!productive[callee] || !live[pc.ret]) continue;
      a.calls_.push_back({new_id[rule_start[callee]], new_id[pc.ret], false});
    }
    a.call_offsets_[ns + 1] = static_cast<uint32_t>(a.calls_.size());
  }
  for (uint32_t s = 0; s < n_live; ++s)  // offsets of states without calls
    a.call_offsets_[s + 1] = std::max(a.call_offsets_[s + 1], a.call_offsets_[s]);
  for (Automaton::Call& c : a.calls_) {
    const uint32_t r = c.ret;
    c.tail = (a.flags_[r] & Automaton::kFinal) && !(a.flags_[r] & Automaton::kScans) &&
             a.call_offsets_[r] == a.call_offsets_[r + 1];
  }
  for (int32_t r : compiled) a.rule_names_.push_back(g.rules[static_cast<size_t>(r)].name);
  a.root_ = new_id[rule_start[0]];
  for (const Automaton::Call& c : a.calls_) a.root_called_ = a.root_called_ || c.start == a.root_;
  std::vector<uint32_t> start(compiled.size(), Automaton::kNone);
  for (size_t ci = 0; ci < compiled.size(); ++ci)
    if (productive[ci]) start[ci] = new_id[rule_start[ci]];

  // 5. Left recursion. A rule is nullable when its start reaches a final state through calls
  // of nullable rules alone; the rules a rule can call before consuming a byte are those
  // called from states reached that way. A cycle among those calls never consumes input.
  const size_t nc = compiled.size();
  std::vector<uint32_t> callee_index(a.flags_.size(), Automaton::kNone);  // start state → compiled rule
  for (size_t ci = 0; ci < nc; ++ci)
    if (start[ci] != Automaton::kNone) callee_index[start[ci]] = static_cast<uint32_t>(ci);
  std::vector<bool> nullable(nc, false);
  // Reach from a rule's start through call edges whose callee passes `usable`; calls `visit`
  // for every state reached.
  std::vector<uint32_t> seen(n_live, 0);
  uint32_t gen = 0;
  auto walk = [&](size_t ci, auto&& usable, auto&& visit) {
    ++gen;
    std::vector<uint32_t> stack{start[ci]};
    seen[start[ci]] = gen;
    while (!stack.empty()) {
      const uint32_t s = stack.back();
      stack.pop_back();
      visit(s);
      for (const Automaton::Call& c : a.calls(s)) {
        if (!usable(callee_index[c.start])) continue;
        if (seen[c.ret] != gen) seen[c.ret] = gen, stack.push_back(c.ret);
      }
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t ci = 0; ci < nc; ++ci) {
      if (nullable[ci] || start[ci] == Automaton::kNone) continue;
      bool fin = false;
      walk(ci, [&](uint32_t callee) { return nullable[callee]; }, [&](uint32_t s) { fin = fin || a.is_final(s); });
      if (fin) nullable[ci] = changed = true;
    }
  }
  std::vector<std::vector<uint32_t>> left_calls(nc);
  for (size_t ci = 0; ci < nc; ++ci) {
    if (start[ci] == Automaton::kNone) continue;
    walk(ci, [&](uint32_t callee) { return nullable[callee]; }, [&](uint32_t s) {
      for (const Automaton::Call& c : a.calls(s)) left_calls[ci].push_back(callee_index[c.start]);
    });
    std::sort(left_calls[ci].begin(), left_calls[ci].end());
    left_calls[ci].erase(std::unique(left_calls[ci].begin(), left_calls[ci].end()), left_calls[ci].end());
  }
  std::vector<uint8_t> color(nc, 0);  // 0 new, 1 on the path, 2 done
  for (size_t root = 0; root < nc; ++root) {
    if (color[root]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(root), 0}};
    color[root] = 1;
    while (!path.empty()) {
      auto& [v, i] = path.back();
      if (i < left_calls[v].size()) {
        const uint32_t w = left_calls[v][i++];
        if (color[w] == 1) {
          std::string chain;
          bool in = false;
          for (const auto& [u, unused] : path) {
            in = in || u == w;
            if (in) chain += "'" + a.rule_names_[u] + "' → ";
          }
          chain += "'" + a.rule_names_[w] + "'";
          return Status::error(fmt::format("grammar: left recursion: the rule '{}' can reach itself without consuming "
                                           "input ({})",
                                           a.rule_names_[w], chain));
        }
        if (color[w] == 0) {
          color[w] = 1;
          path.push_back({w, 0});
        }
        continue;
      }
      color[v] = 2;
      path.pop_back();
    }
  }

  // 6. FOLLOW sets (Aho, Lam, Sethi, Ullman, "Compilers", 4.4.2) over bytes: first[s], the
  // bytes that can come next from state s before its rule ends, and ends[s], whether the rule
  // can end from s without a byte; follow(R), the bytes that can come right after rule R
  // ends, through every call site (a tail call passes on its caller's follow).
  std::vector<std::array<uint64_t, 4>> first(n_live);
  std::vector<uint8_t> ends(n_live, 0);
  for (uint32_t s = 0; s < n_live; ++s) {
    ends[s] = a.is_final(s);
    for (uint32_t b = 0; b < 256; ++b)
      if (a.step(s, static_cast<uint8_t>(b)) != Automaton::kNone) first[s][b / 64] |= uint64_t{1} << (b % 64);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t s = 0; s < n_live; ++s)
      for (const Automaton::Call& c : a.calls(s)) {
        const bool pass = nullable[callee_index[c.start]];
        for (int w = 0; w < 4; ++w) {
          uint64_t add = first[c.start][w] | (pass ? first[c.ret][w] : 0);
          if ((first[s][w] | add) != first[s][w]) first[s][w] |= add, changed = true;
        }
        if (pass && ends[c.ret] && !ends[s]) ends[s] = 1, changed = true;
      }
  }
  a.follow_.assign(nc, {});
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t s = 0; s < n_live; ++s)
      for (const Automaton::Call& c : a.calls(s)) {
        const size_t callee = callee_index[c.start];
        const auto caller = static_cast<size_t>(a.state_rule_[s]);
        for (int w = 0; w < 4; ++w) {
          const uint64_t add = first[c.ret][w] | (ends[c.ret] ? a.follow_[caller][w] : 0);
          if ((a.follow_[callee][w] | add) != a.follow_[callee][w]) a.follow_[callee][w] |= add, changed = true;
        }
      }
  }
  return a;
}

}  // namespace ubatch::grammar
