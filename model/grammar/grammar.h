// Structured output: a GBNF grammar (llama.cpp's grammar format) parsed into
// rules, and a matcher that walks a sequence of tokens through it, so the
// last stage can mask the logits of every token the grammar cannot accept.
//
// GBNF as accepted here (a superset of llama.cpp's grammars/*.gbnf):
//   rule      ::= name "::=" alternates      (a rule ends where the next
//                                             "name ::=" begins; newlines
//                                             are plain whitespace)
//   alternates ::= sequence ("|" sequence)*
//   sequence  ::= (primary postfix?)*        (an empty sequence matches "")
//   primary   ::= "literal" | [class] | [^class] | . | name | ( alternates )
//   postfix   ::= * | + | ? | {m} | {m,} | {m,n}    (m, n <= 1000)
//   name: [A-Za-z0-9_-]+; comments: # to the end of the line.
// Literals and classes are UTF-8 and match code points; escapes: \n \r \t
// \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH. The start rule is `root`.
// Errors are InvalidArgument "line N col M: <what>" (1-based, columns in
// bytes). A reference to an undefined rule, a duplicate rule, a missing
// root and left recursion that is not in tail position (a ::= a "x") are
// errors.
//
// The matcher is a pushdown automaton over the rules (llama.cpp's design):
// its state is a set of stacks of positions inside rule alternatives, each
// with a character class on top; a code point advances every stack whose
// class matches it and expands rule references on the new tops. Stacks are
// hash-consed frames (position, parent) in a pool owned by the matcher, so
// a step copies no stack and equal stacks are one id. Bytes go in one at a
// time through a UTF-8 decoder: a token may end inside a character (the
// partial character is kept, and a prefix survives only while some code
// point that starts with it matches a class on top of a stack).
//
// Token masking: a TokenTable (built once per vocabulary and shared by
// every matcher) holds each token's bytes in a byte trie; mask() walks the
// trie depth first from the matcher's state, so a byte no stack accepts
// prunes every token below it. An end-of-generation token is allowed only
// when the grammar is complete (a stack is empty); a token with no bytes
// (control tokens) never is.
//
// Ownership: Grammar and TokenTable are immutable and shared
// (shared_ptr<const>); a GrammarMatcher owns its stacks and pool. Threads:
// Grammar and TokenTable from any thread; one thread at a time per matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace strata::grammar {

// Parsed rules, flattened: every alternative is a run of elements ending
// with kEnd, rule references resolved to rule indices.
class Grammar {
 public:
  enum class Kind : uint8_t { kEnd, kChars, kRule };
  struct Element {
    Kind kind = Kind::kEnd;
    bool negated = false;    // kChars: matches code points NOT in the ranges
    uint32_t rule = 0;       // kRule: the rule referred to
    uint32_t first = 0;      // kChars: ranges_[first, first + count)
    uint32_t count = 0;
  };
  struct Range {
    uint32_t lo = 0, hi = 0;  // code points, inclusive
  };

  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<Range>& ranges() const { return ranges_; }
  // Start positions (into elements()) of each rule's alternatives.
  const std::vector<std::vector<uint32_t>>& alternatives() const { return alts_; }
  const std::vector<std::string>& rule_names() const { return names_; }
  uint32_t root() const { return root_; }
  // Whether the kChars element at `pos` matches code point `cp`.
  bool matches(uint32_t pos, uint32_t cp) const;
  // Whether it matches some code point in [lo, hi].
  bool matches_any(uint32_t pos, uint32_t lo, uint32_t hi) const;

 private:
  friend class GbnfParser;
  std::vector<Element> elements_;
  std::vector<Range> ranges_;
  std::vector<std::vector<uint32_t>> alts_;  // [rule][alternative]
  std::vector<std::string> names_;           // [rule]
  uint32_t root_ = 0;
};

// Parses GBNF text (see the top of the file).
absl::StatusOr<std::shared_ptr<const Grammar>> parse_gbnf(std::string_view text);

// GBNF whose language is the JSON values `schema` allows (json_schema.cc
// documents the subset: what is enforced, what is ignored). InvalidArgument
// naming the unsupported keyword and its path ("#/properties/a: keyword
// 'pattern' is not supported"), or a schema whose conversion needs more
// than 65536 subschema conversions or makes more than 16 MiB of text (a
// type list converts its subschemas once a type: nesting multiplies).
// nlohmann::json sorts object keys, so properties come in key order;
// json_schema_text_to_gbnf (JSON text) keeps the order written (use it for
// requests); its error for text that is not JSON: "json_schema: not valid
// JSON".
absl::StatusOr<std::string> json_schema_to_gbnf(const nlohmann::json& schema);
absl::StatusOr<std::string> json_schema_text_to_gbnf(std::string_view schema_text);
// GBNF for any JSON object.
std::string json_object_gbnf();

// A vocabulary's tokens as bytes, in a trie. Built once per vocabulary.
class TokenTable {
 public:
  // pieces[id]: the bytes the token stands for ("" for control tokens);
  // eog[id]: whether it ends the generation. Sizes must agree.
  static std::shared_ptr<const TokenTable> build(std::vector<std::string> pieces,
                                                 std::vector<bool> eog);
  int32_t n_tokens() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  bool is_eog(int32_t id) const { return eog_[id]; }
  const std::vector<int32_t>& eog_tokens() const { return eog_ids_; }

  struct Node {
    uint32_t first_edge = 0, n_edges = 0;    // edges_[first, first + n)
    uint32_t first_token = 0, n_tokens = 0;  // token_ids_[...] ending here
  };
  struct Edge {
    uint8_t byte = 0;
    uint32_t child = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // [0]: the root
  const std::vector<Edge>& edges() const { return edges_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<bool> eog_;
  std::vector<int32_t> eog_ids_;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  std::vector<int32_t> token_ids_;
};

// One bit per token: 1 = the grammar allows it next.
using TokenMask = std::vector<uint64_t>;
inline bool allowed(const TokenMask& m, int32_t id) {
  return (m[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

class GrammarMatcher {
 public:
  // The most stacks a state may hold; a grammar so ambiguous that it needs
  // more fails the step with InvalidArgument (the grammar is at fault).
  static constexpr size_t kMaxStacks = 4096;
  static constexpr int kMaxExpandDepth = 1000;
  // The most (rule, continuation) pairs one expansion may enter: a 50 KB
  // grammar of 4096 alternatives each opening a 990-rule chain asked for
  // 4 million, and the step took the worker's stage hours.
  static constexpr size_t kMaxExpansions = kMaxStacks * 16;
  // The most work one fill_mask, accept or allows may do, in units of a
  // stack looked at or copied and a rule reference followed; past it the
  // step fails as too ambiguous. The bounds above hold for one state, but
  // a mask makes a state for each token prefix it walks: on SmolLM2's
  // vocabulary a 9 KB grammar whose every prefix was a new state of 2000
  // stacks took 15 s and 3 GB a mask, and a 36 KB one of 4000 parses that
  // each lead back to all 4000 (16 million copies a byte) ran out of
  // memory at 16 GB. A JSON grammar's mask spends ~6000 units, a
  // 3000-string enum's 1.3 million, a 600-object union's 3.3 million; at
  // the budget a step has taken 60-300 ms (2-core Xeon).
  static constexpr size_t kMaxStepWork = size_t{1} << 22;

  GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                 std::shared_ptr<const TokenTable> tokens);

  // Bytes: whether the grammar can continue with them (state unchanged);
  // false too when following them is too ambiguous (accept() says so).
  bool can_accept_bytes(std::string_view bytes);
  // Advances over the bytes; false (state unchanged) if they cannot be
  // accepted or following them is too ambiguous.
  bool accept_bytes(std::string_view bytes);

  // The tokens allowed next, into `mask` (resized to the table's words).
  // InvalidArgument for a too ambiguous grammar.
  absl::Status fill_mask(TokenMask* mask);
  // Sets the logits ([n_tokens]) of every token not allowed to -inf.
  absl::Status mask(std::span<float> logits);
  // Whether the grammar allows `token` next (one token: no mask needed).
  bool allows(int32_t token);
  // Advances over a sampled token. InvalidArgument if the grammar does not
  // allow it (an end-of-generation token: allowed when complete()).
  absl::Status accept(int32_t token);

  // The text so far is a whole sentence of the grammar.
  bool complete() const;
  // Nothing more can follow (only end-of-generation is allowed).
  bool finished() const;

  const Grammar& grammar() const { return *grammar_; }

 private:
  static constexpr uint32_t kEmpty = 0;  // the empty stack (complete)
  struct Frame {
    uint32_t pos;     // element position (kChars on top, or a continuation)
    uint32_t parent;  // frame id; kEmpty at the bottom
  };
  // A state: sorted distinct stack ids and a partial UTF-8 character.
  struct State {
    std::vector<uint32_t> stacks;
    uint32_t partial = 0;  // bits of the character so far
    uint8_t need = 0;      // continuation bytes still to come
    uint8_t len = 0;       // bytes of that character in all
  };

  uint32_t frame(uint32_t pos, uint32_t parent);
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>* out);
  void expand_rule(uint32_t rule, uint32_t cont, std::vector<uint32_t>* out);
  // to = from advanced by one byte; false if nothing survives.
  bool advance(const State& from, uint8_t byte, State* to);
  void advance_cp(const State& from, uint32_t cp, State* to);
  void normalize(std::vector<uint32_t>* stacks);
  // A step (fill_mask, accept_bytes, can_accept_bytes) starts with no
  // overflow and no work spent.
  void begin_step();
  // Counts `units` of the step's work (kMaxStepWork); true once the step
  // has overflowed (past the budget, or for any other reason).
  bool spend(size_t units);
  void walk(uint32_t root, int32_t root_state, TokenMask* mask);
  int32_t dfa_state(State&& state);
  int32_t dfa_step(int32_t state, uint8_t byte);
  void truncate_pool(size_t size);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTable> tokens_;
  std::vector<Frame> pool_;  // [frame id]; pool_[0] is kEmpty
  absl::flat_hash_map<uint64_t, uint32_t> index_;  // (pos, parent) -> id
  State state_;
  // fill_mask's lazy DFA (matcher.cc).
  static constexpr int32_t kUnknown = -2, kDead = -1;
  std::vector<State> dfa_states_;
  absl::flat_hash_map<std::vector<uint32_t>, int32_t> dfa_index_;
  std::vector<int32_t> dfa_next_;  // [state][256]
  // walk()'s stack: the trie node, its DFA state and its next edge to
  // follow (kept, so a mask costs no allocation).
  struct TrieVisit {
    uint32_t node;
    int32_t sid;
    uint32_t edge;
  };
  std::vector<TrieVisit> walk_stack_;
  // expand()'s guard against re-entering (rule, continuation) in one
  // expansion (nullable and tail recursion).
  absl::flat_hash_set<uint64_t> expanding_;
  bool overflow_ = false;
  size_t work_ = 0;  // spent by the step so far (kMaxStepWork)
  // The masks of the last few states (round robin).
  struct CachedMask {
    std::vector<uint32_t> key;  // stacks, partial, need, len
    TokenMask mask;
  };
  static constexpr size_t kMaskCacheSize = 8;
  std::vector<CachedMask> mask_cache_;
  size_t mask_cache_next_ = 0;
  bool broken_ = false;  // overflowed outside fill_mask: every step fails
  int expand_depth_ = 0;
  absl::Status too_ambiguous() const;
  // fill_mask's memo: (stack, code point) -> the stacks it advances to, a
  // run of memo_arena_ (valid for one fill_mask: frames made in it go).
  struct MemoEntry {
    uint32_t first = 0, count = 0;
  };
  bool memo_on_ = false;
  absl::flat_hash_map<uint64_t, MemoEntry> memo_;
  std::vector<uint32_t> memo_arena_;
  std::vector<uint32_t> memo_scratch_;
};

}  // namespace strata::grammar
