// SentencePiece-style tokenizer ("llama" in GGUF), as llama.cpp runs it
// (src/llama-vocab.cpp, llm_tokenizer_spm_session):
//
//   1. A space goes before the text when add_space_prefix is set and the
//      text starts the input or follows a special token; every ' ' becomes
//      U+2581 ("▁"). No other normalization.
//   2. The text is cut into characters by their UTF-8 lead byte (a stray
//      byte is a character of its own).
//   3. Repeatedly, of all adjacent pairs whose concatenation is a token, the
//      pair whose token has the highest score merges (ties: the leftmost).
//   4. Each final piece is its token, or, if it is not a token (a character
//      outside the vocabulary), one <0xNN> byte token per byte.
#include <queue>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/unicode.h"

namespace strata::tokenizer {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocabulary& vocab) : Tokenizer(vocab) {
    for (int b = 0; b < 256; ++b) {
      TokenId id = find_token(absl::StrFormat("<0x%02X>", b));
      if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
      // llama.cpp stops with an exception here; we fall back to <unk>.
      if (id < 0 && special_.unk.has_value()) id = *special_.unk;
      byte_tokens_[b] = id;
    }
    build_pieces();
  }

 protected:
  absl::Status encode_text(std::string_view text, bool after_special,
                           std::vector<TokenId>* out) const override {
    std::string escaped;
    escaped.reserve(text.size() + 8);
    if (add_space_prefix_ && after_special) escaped.append(kSpaceMarker);
    for (char c : text) {
      if (c == ' ') {
        escaped.append(kSpaceMarker);
      } else {
        escaped.push_back(c);
      }
    }
    merge(escaped, out);
    return absl::OkStatus();
  }

  std::string normal_piece(TokenId id) const override {
    const std::string& text = token_text(id);
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        out.push_back(' ');
        i += kSpaceMarker.size();
      } else {
        out.push_back(text[i++]);
      }
    }
    return out;
  }

 private:
  using Symbol = MergeSymbol;
  struct Pair {
    float score;
    int left;
    int right;
    size_t size;  // bytes of left + right when the pair was found
  };
  struct PairOrder {  // top of the queue: highest score, then leftmost
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };
  using PairQueue = std::priority_queue<Pair, std::vector<Pair>, PairOrder>;

  void merge(const std::string& text, std::vector<TokenId>* out) const {
    std::vector<Symbol> symbols = utf8_symbols(text);
    PairQueue queue;
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string_view joined(text.data() + symbols[left].begin,
                                    symbols[left].size + symbols[right].size);
      const TokenId id = find_token(joined);
      if (id < 0) return;
      queue.push({scores_[id], left, right, joined.size()});
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
      if (left.size == 0 || right.size == 0 ||
          left.size + right.size != pair.size) {
        continue;
      }
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = pair.left;
      try_pair(left.prev, pair.left);
      try_pair(pair.left, left.next);
    }
    // Merged pieces are always tokens; a piece that is not is one character
    // that is not in the vocabulary.
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
      const std::string_view piece(text.data() + symbols[i].begin,
                                   symbols[i].size);
      const TokenId id = find_token(piece);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
      for (char c : piece) {
        const TokenId b = byte_tokens_[static_cast<uint8_t>(c)];
        if (b >= 0) out->push_back(b);
      }
    }
  }

  TokenId byte_tokens_[256];  // <0xNN> (or the byte itself); -1 if none
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocabulary& vocab) {
  return std::make_unique<SpmTokenizer>(vocab);
}

}  // namespace strata::tokenizer
