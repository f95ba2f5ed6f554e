// GPT-2-style byte-level BPE tokenizer ("gpt2" in GGUF), as llama.cpp runs
// it (src/llama-vocab.cpp, llm_tokenizer_bpe_session):
//
//   1. The pre-tokenizer cuts the text into words, each written in the
//      byte-to-unicode alphabet (pre_tokenizer.h).
//   2. With ignore_merges (Llama-3 family), a word that is itself a token is
//      that token.
//   3. A word starts as its characters; repeatedly the adjacent pair with
//      the lowest merge rank merges (ties: the leftmost).
//   4. Each final piece is its token; a piece that is not a token gives, for
//      each of its bytes, the token whose text is that single byte, if any.
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(Vocabulary& vocab, std::unique_ptr<PreTokenizer> pre)
      : Tokenizer(vocab), pre_(std::move(pre)) {
    pre_name_ = pre_->name();
    // A merge "left right" splits at its first space after the first byte;
    // llama.cpp keys a line without one as ("", ""), which never matches.
    // The first rank of a repeated line wins.
    ranks_.reserve(vocab.merges.size());
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      const std::string& line = vocab.merges[i];
      const size_t space = line.find(' ', 1);
      ranks_.emplace(space == std::string::npos ? std::string(" ") : line,
                     static_cast<int32_t>(i));
    }
    for (int b = 0; b < 256; ++b) {
      single_byte_tokens_[b] = find_token(std::string(1, static_cast<char>(b)));
    }
    build_pieces();
  }

 protected:
  absl::Status encode_text(std::string_view text, bool /*after_special*/,
                           std::vector<TokenId>* out) const override {
    absl::StatusOr<std::vector<std::string>> words = pre_->split_words(text);
    if (!words.ok()) return words.status();
    std::string key;  // reused "left right" lookup key
    for (const std::string& word : *words) merge_word(word, &key, out);
    return absl::OkStatus();
  }

  // The token's text in the byte-to-unicode alphabet, turned back into
  // bytes. A character outside the alphabet gives llama.cpp's marker text.
  std::string normal_piece(TokenId id) const override {
    const std::string& text = token_text(id);
    std::string out;
    for (uint32_t cp : unicode::decode_lenient(text)) {
      const int byte = unicode::unicode_to_byte(cp);
      if (byte >= 0) {
        out.push_back(static_cast<char>(byte));
        continue;
      }
      std::string utf8;
      unicode::append_utf8(cp, &utf8);
      out += "[UNK_BYTE_0x";
      for (char c : utf8) {
        out += absl::StrFormat("%02x", static_cast<unsigned char>(c));
      }
      out += text + "]";
    }
    return out;
  }

 private:
  using Symbol = MergeSymbol;
  struct Pair {
    int32_t rank;
    int left;
    int right;
    size_t left_size;  // sizes when the pair was found
    size_t right_size;
  };
  struct PairOrder {  // top of the queue: lowest rank, then leftmost
    bool operator()(const Pair& a, const Pair& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };
  using PairQueue = std::priority_queue<Pair, std::vector<Pair>, PairOrder>;

  void merge_word(const std::string& word, std::string* key,
                  std::vector<TokenId>* out) const {
    if (pre_->ignore_merges()) {
      const TokenId id = find_token(word);
      if (id >= 0) {
        out->push_back(id);
        return;
      }
    }
    std::vector<Symbol> symbols = utf8_symbols(word);
    PairQueue queue;
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const Symbol& l = symbols[left];
      const Symbol& r = symbols[right];
      key->assign(word, l.begin, l.size);
      key->push_back(' ');
      key->append(word, r.begin, r.size);
      auto it = ranks_.find(*key);
      if (it == ranks_.end()) return;
      queue.push({it->second, left, right, l.size, r.size});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) {
      try_pair(i - 1, i);
    }
    while (!queue.empty()) {
      const Pair pair = queue.top();
      queue.pop();
      Symbol& left = symbols[pair.left];
      Symbol& right = symbols[pair.right];
      // Stale: one side has merged since the pair was found.
      if (left.size == 0 || right.size == 0 || left.size != pair.left_size ||
          right.size != pair.right_size) {
        continue;
      }
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = pair.left;
      try_pair(left.prev, pair.left);
      try_pair(pair.left, left.next);
    }
    for (const Symbol& s : symbols) {
      if (s.size == 0) continue;
      const std::string_view piece(word.data() + s.begin, s.size);
      const TokenId id = find_token(piece);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
      for (char c : piece) {
        const TokenId b = single_byte_tokens_[static_cast<uint8_t>(c)];
        if (b >= 0) out->push_back(b);
      }
    }
  }

  std::unique_ptr<PreTokenizer> pre_;
  absl::flat_hash_map<std::string, int32_t> ranks_;  // "left right" -> rank
  TokenId single_byte_tokens_[256];  // token whose text is the byte; -1
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(
    Vocabulary& vocab, std::unique_ptr<PreTokenizer> pre) {
  return std::make_unique<BpeTokenizer>(vocab, std::move(pre));
}

}  // namespace strata::tokenizer
