// GrammarMatcher and TokenTable (grammar.h has the design).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/grammar/grammar.h"

namespace strata::grammar {

std::shared_ptr<const TokenTable> TokenTable::build(std::vector<std::string> pieces,
                                                    std::vector<bool> eog) {
  auto t = std::make_shared<TokenTable>();
  eog.resize(pieces.size(), false);
  // Build a pointer trie, then flatten it breadth first (children sorted by
  // byte, tokens per node in id order).
  struct Tmp {
    std::map<uint8_t, uint32_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Tmp> tmp(1);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (eog[id]) t->eog_ids_.push_back(static_cast<int32_t>(id));
    const std::string& p = pieces[id];
    if (p.empty()) continue;  // control tokens: never through the trie
    uint32_t node = 0;
    for (char ch : p) {
      const auto b = static_cast<uint8_t>(ch);
      auto it = tmp[node].children.find(b);
      if (it == tmp[node].children.end()) {
        tmp.emplace_back();
        it = tmp[node].children.emplace(b, static_cast<uint32_t>(tmp.size() - 1)).first;
      }
      node = it->second;
    }
    tmp[node].tokens.push_back(static_cast<int32_t>(id));
  }
  t->nodes_.resize(tmp.size());
  for (size_t i = 0; i < tmp.size(); ++i) {
    Node& n = t->nodes_[i];
    n.first_edge = static_cast<uint32_t>(t->edges_.size());
    n.n_edges = static_cast<uint32_t>(tmp[i].children.size());
    for (const auto& [b, c] : tmp[i].children) t->edges_.push_back({b, c});
    n.first_token = static_cast<uint32_t>(t->token_ids_.size());
    n.n_tokens = static_cast<uint32_t>(tmp[i].tokens.size());
    t->token_ids_.insert(t->token_ids_.end(), tmp[i].tokens.begin(), tmp[i].tokens.end());
  }
  t->pieces_ = std::move(pieces);
  t->eog_ = std::move(eog);
  return t;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTable> tokens)
    : grammar_(std::move(grammar)), tokens_(std::move(tokens)) {
  pool_.push_back({0, 0});  // kEmpty
  expanding_.clear();
  expand_rule(grammar_->root(), kEmpty, &state_.stacks);
  expanding_.clear();
  normalize(&state_.stacks);
  broken_ = overflow_;
}

uint32_t GrammarMatcher::frame(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(pool_.size()));
  if (inserted) pool_.push_back({pos, parent});
  return it->second;
}

// The stacks that start at element `pos` with `parent` below: a class on
// top goes out as is; a reference expands into its rule's alternatives; the
// end of an alternative continues in the parent frame.
void GrammarMatcher::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out) {
  if (spend(1)) return;
  const auto& elems = grammar_->elements();
  for (;;) {
    const Grammar::Element& e = elems[pos];
    if (e.kind == Grammar::Kind::kChars) {
      out->push_back(frame(pos, parent));
      return;
    }
    if (e.kind == Grammar::Kind::kEnd) {
      if (parent == kEmpty) {
        out->push_back(kEmpty);
        return;
      }
      const Frame f = pool_[parent];
      pos = f.pos;
      parent = f.parent;
      continue;
    }
    // A reference: its continuation is the next element (none in tail
    // position: the parent continues directly, so x* needs no stack).
    const uint32_t cont =
        elems[pos + 1].kind == Grammar::Kind::kEnd ? parent : frame(pos + 1, parent);
    expand_rule(e.rule, cont, out);
    return;
  }
}

void GrammarMatcher::expand_rule(uint32_t rule, uint32_t cont, std::vector<uint32_t>* out) {
  const uint64_t key = (uint64_t{rule} << 32) | cont;
  if (spend(1)) return;  // (a pair already entered costs its look-up)
  if (!expanding_.insert(key).second) return;
  // Too many parses, too many rules entered, or references nested too deep
  // to follow on the call stack (a ::= b, b ::= c, ... thousands deep): the
  // step fails.
  if (out->size() > kMaxStacks * 4 || expanding_.size() > kMaxExpansions ||
      expand_depth_ > kMaxExpandDepth) {
    overflow_ = true;
    return;
  }
  ++expand_depth_;
  for (uint32_t alt : grammar_->alternatives()[rule]) expand(alt, cont, out);
  --expand_depth_;
}

void GrammarMatcher::begin_step() {
  overflow_ = false;
  work_ = 0;
}

bool GrammarMatcher::spend(size_t units) {
  work_ += units;
  if (work_ > kMaxStepWork) overflow_ = true;
  return overflow_;
}

void GrammarMatcher::normalize(std::vector<uint32_t>* stacks) {
  std::sort(stacks->begin(), stacks->end());
  stacks->erase(std::unique(stacks->begin(), stacks->end()), stacks->end());
  if (stacks->size() > kMaxStacks) overflow_ = true;
}

void GrammarMatcher::advance_cp(const State& from, uint32_t cp, State* to) {
  to->stacks.clear();
  to->partial = 0;
  to->need = 0;
  to->len = 0;
  if (!memo_on_) {
    for (uint32_t s : from.stacks) {
      if (spend(1)) break;
      if (s == kEmpty) continue;
      const Frame f = pool_[s];
      if (!grammar_->matches(f.pos, cp)) continue;
      expanding_.clear();
      expand(f.pos + 1, f.parent, &to->stacks);
    }
    expanding_.clear();
    normalize(&to->stacks);
    return;
  }
  // During fill_mask: one stack advanced by one code point is memoised (the
  // trie walk meets the same pairs again and again: inside a string every
  // ordinary character leads back to the same stacks).
  size_t lists = 0;
  for (uint32_t s : from.stacks) {
    if (spend(1)) break;
    if (s == kEmpty) continue;
    const uint64_t key = (uint64_t{s} << 21) | cp;
    auto [it, inserted] = memo_.try_emplace(key, MemoEntry{});
    if (inserted) {
      const Frame f = pool_[s];
      MemoEntry e{static_cast<uint32_t>(memo_arena_.size()), 0};
      if (grammar_->matches(f.pos, cp)) {
        memo_scratch_.clear();
        expanding_.clear();
        expand(f.pos + 1, f.parent, &memo_scratch_);
        expanding_.clear();
        normalize(&memo_scratch_);
        memo_arena_.insert(memo_arena_.end(), memo_scratch_.begin(), memo_scratch_.end());
        e.count = static_cast<uint32_t>(memo_scratch_.size());
      }
      it->second = e;  // (the insert above may have moved the table)
    }
    const MemoEntry e = memo_.find(key)->second;
    if (e.count == 0) continue;
    // A copy costs its length (and its share of the sort): n stacks that
    // each lead back to all n copy n * n stacks, however few the misses.
    if (spend(e.count)) break;
    to->stacks.insert(to->stacks.end(), memo_arena_.begin() + e.first,
                      memo_arena_.begin() + e.first + e.count);
    ++lists;
  }
  if (lists > 1) normalize(&to->stacks);
}

namespace {
// The least code point of a UTF-8 encoding of 1..4 bytes.
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
}  // namespace

bool GrammarMatcher::advance(const State& from, uint8_t b, State* to) {
  if (from.need == 0) {
    if (b < 0x80) {
      advance_cp(from, b, to);
      return !to->stacks.empty();
    }
    int need;
    uint32_t bits;
    if ((b >> 5) == 6) {
      need = 1, bits = b & 0x1F;
      if (bits < 2) return false;  // overlong
    } else if ((b >> 4) == 14) {
      need = 2, bits = b & 0x0F;
    } else if ((b >> 3) == 30 && b <= 0xF4) {
      need = 3, bits = b & 0x07;
    } else {
      return false;  // a continuation byte or an invalid lead
    }
    to->partial = bits;
    to->need = static_cast<uint8_t>(need);
    to->len = static_cast<uint8_t>(need + 1);
  } else {
    if ((b >> 6) != 2) return false;
    to->partial = (from.partial << 6) | (b & 0x3F);
    to->need = static_cast<uint8_t>(from.need - 1);
    to->len = from.len;
    if (to->need == 0) {
      const uint32_t cp = to->partial;
      // Overlong forms, surrogates and beyond U+10FFFF are not UTF-8.
      if (cp > 0x10FFFF || cp < kMinOfLength[from.len] || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return false;
      }
      advance_cp(from, cp, to);
      return !to->stacks.empty();
    }
  }
  // Inside a character: keep the stacks some completion of it can match
  // (code points of this encoded length only).
  const int shift = 6 * to->need;
  const uint32_t lo = std::max(to->partial << shift, kMinOfLength[to->len]);
  const uint32_t hi = (to->partial << shift) | ((1u << shift) - 1);
  if (lo > 0x10FFFF || lo > hi) return false;
  to->stacks.clear();
  for (uint32_t s : from.stacks) {
    if (s != kEmpty && grammar_->matches_any(pool_[s].pos, lo, std::min(hi, 0x10FFFFu))) {
      to->stacks.push_back(s);
    }
  }
  spend(from.stacks.size());
  return !to->stacks.empty();
}

bool GrammarMatcher::can_accept_bytes(std::string_view bytes) {
  const size_t mark = pool_.size();
  State a = state_, b;
  bool ok = true;
  begin_step();
  for (char c : bytes) {
    if (!advance(a, static_cast<uint8_t>(c), &b) || overflow_) {
      ok = false;
      break;
    }
    std::swap(a, b);
  }
  truncate_pool(mark);
  return ok;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  const size_t mark = pool_.size();
  State a = state_, b;
  begin_step();
  for (char c : bytes) {
    if (!advance(a, static_cast<uint8_t>(c), &b) || overflow_) {
      truncate_pool(mark);
      return false;
    }
    std::swap(a, b);
  }
  state_ = std::move(a);
  return true;
}

bool GrammarMatcher::complete() const {
  return state_.need == 0 && !state_.stacks.empty() && state_.stacks.front() == kEmpty;
}

bool GrammarMatcher::finished() const {
  return complete() && state_.stacks.size() == 1;
}

// Frames made after `size` are referenced by no kept state: drop them.
void GrammarMatcher::truncate_pool(size_t size) {
  for (size_t i = size; i < pool_.size(); ++i) {
    index_.erase((uint64_t{pool_[i].pos} << 32) | pool_[i].parent);
  }
  pool_.resize(size);
}

// The lazy DFA of one fill_mask: states (stack sets with a partial
// character) interned to ids, transitions by byte filled on first use, so
// each trie edge costs one table read once its (state, byte) is known.
int32_t GrammarMatcher::dfa_state(State&& st) {
  std::vector<uint32_t> key = st.stacks;
  key.push_back(st.partial);
  key.push_back(st.need);
  key.push_back(st.len);
  auto [it, inserted] = dfa_index_.try_emplace(std::move(key), 0);
  if (inserted) {
    it->second = static_cast<int32_t>(dfa_states_.size());
    dfa_states_.push_back(std::move(st));
    dfa_next_.resize(dfa_next_.size() + 256, kUnknown);
  }
  return it->second;
}

int32_t GrammarMatcher::dfa_step(int32_t sid, uint8_t byte) {
  const size_t slot = static_cast<size_t>(sid) * 256 + byte;
  int32_t next = dfa_next_[slot];
  if (next != kUnknown) return next;
  State to;
  next = advance(dfa_states_[sid], byte, &to) ? dfa_state(std::move(to)) : kDead;
  dfa_next_[slot] = next;
  return next;
}

// Depth first over the token trie from `root` in DFA state `root_sid`,
// with a stack of its own: a token may be as long as a GGUF string allows,
// and one of a megabyte was a megabyte of recursion. The order (pre-order,
// edges by byte) is the recursive walk's, so the DFA's states are made in
// the same order.
void GrammarMatcher::walk(uint32_t root, int32_t root_sid, TokenMask* mask) {
  const TokenTable::Edge* edges = tokens_->edges().data();
  const std::vector<TokenTable::Node>& nodes = tokens_->nodes();
  const int32_t* ids = tokens_->token_ids().data();
  std::vector<TrieVisit>& stack = walk_stack_;
  stack.assign(1, {root, root_sid, nodes[root].first_edge});
  while (!stack.empty() && !overflow_) {
    TrieVisit& v = stack.back();
    const TokenTable::Node& n = nodes[v.node];
    if (v.edge == n.first_edge + n.n_edges) {
      stack.pop_back();
      continue;
    }
    const uint32_t e = v.edge++;
    const int32_t next = dfa_step(v.sid, edges[e].byte);
    if (next == kDead) continue;
    const TokenTable::Node& child = nodes[edges[e].child];
    for (uint32_t k = child.first_token; k < child.first_token + child.n_tokens; ++k) {
      const int32_t id = ids[k];
      (*mask)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    if (child.n_edges > 0) stack.push_back({edges[e].child, next, child.first_edge});
  }
}

absl::Status GrammarMatcher::fill_mask(TokenMask* mask) {
  const size_t words = (static_cast<size_t>(tokens_->n_tokens()) + 63) / 64;
  if (broken_) {
    mask->assign(words, 0);
    return too_ambiguous();
  }
  // The same state (frames kept by state_ are never renumbered) gives the
  // same mask: inside a string, step after step.
  std::vector<uint32_t> key = state_.stacks;
  key.push_back(state_.partial);
  key.push_back(state_.need);
  key.push_back(state_.len);
  for (const CachedMask& c : mask_cache_) {
    if (c.key == key) {
      *mask = c.mask;
      return absl::OkStatus();
    }
  }
  mask->assign(words, 0);
  const size_t mark = pool_.size();
  begin_step();
  memo_on_ = true;
  dfa_states_.clear();
  dfa_index_.clear();
  dfa_next_.clear();
  walk(0, dfa_state(State(state_)), mask);
  memo_on_ = false;
  memo_.clear();
  memo_arena_.clear();
  truncate_pool(mark);
  if (overflow_) {
    overflow_ = false;
    return too_ambiguous();
  }
  if (complete()) {
    for (int32_t id : tokens_->eog_tokens()) {
      (*mask)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  if (mask_cache_.size() < kMaskCacheSize) mask_cache_.emplace_back();
  CachedMask& slot = mask_cache_[mask_cache_next_];
  mask_cache_next_ = (mask_cache_next_ + 1) % kMaskCacheSize;
  slot.key = std::move(key);
  slot.mask = *mask;
  return absl::OkStatus();
}

absl::Status GrammarMatcher::too_ambiguous() const {
  // InvalidArgument: the request's grammar is at fault (RESOURCE_EXHAUSTED
  // read as a full queue, 429, and clients retried it).
  return absl::InvalidArgumentError(absl::StrCat(
      "grammar: more than ", kMaxStacks,
      " parses alive at once, rules nested too deep, or more than ", kMaxStepWork,
      " units of work for one token (too ambiguous to follow)"));
}

absl::Status GrammarMatcher::mask(std::span<float> logits) {
  TokenMask m;
  if (absl::Status st = fill_mask(&m); !st.ok()) return st;
  const size_t n = std::min(logits.size(), static_cast<size_t>(tokens_->n_tokens()));
  for (size_t i = 0; i < n; ++i) {
    if (!allowed(m, static_cast<int32_t>(i))) logits[i] = -std::numeric_limits<float>::infinity();
  }
  for (size_t i = n; i < logits.size(); ++i) {
    logits[i] = -std::numeric_limits<float>::infinity();
  }
  return absl::OkStatus();
}

bool GrammarMatcher::allows(int32_t token) {
  if (token < 0 || token >= tokens_->n_tokens()) return false;
  if (tokens_->is_eog(token)) return complete();
  const std::string& piece = tokens_->piece(token);
  return !piece.empty() && can_accept_bytes(piece);
}

absl::Status GrammarMatcher::accept(int32_t token) {
  if (token < 0 || token >= tokens_->n_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token, " is outside the vocabulary"));
  }
  if (tokens_->is_eog(token)) {
    if (complete()) {
      state_.stacks.assign(1, kEmpty);
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "end-of-generation token ", token, " before the grammar is complete"));
  }
  if (broken_) return too_ambiguous();
  const std::string& piece = tokens_->piece(token);
  begin_step();  // (accept_bytes begins it too; an empty piece skips that)
  const bool ok = !piece.empty() && accept_bytes(piece);
  if (overflow_) {
    broken_ = true;
    return too_ambiguous();
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("token ", token, " is not allowed by the grammar here"));
  }
  return absl::OkStatus();
}

}  // namespace strata::grammar
