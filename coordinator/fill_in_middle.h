// Fill-in-the-middle prompts: a v1::FillInMiddle (inference.proto: prefix,
// suffix, what was typed, other files) becomes the prompt's token ids in the
// layout of llama.cpp's server's /infill (tools/server, format_prompt_infill,
// which follows the repo-level pattern of Qwen2.5-Coder, arXiv:2409.12186):
//
//   extra context:  [FIM_REP] "myproject\n"          when the model has FIM_REP
//                   per file: [FIM_SEP] "{filename}\n" "{text}"
//                             (no FIM_SEP: "\n\n--- snippet ---\n\n" "{text}")
//                   [FIM_SEP] "filename\n"           when the model has FIM_SEP
//   then            [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
//   (suffix_first:  [BOS] [FIM_SUF] suffix [FIM_PRE] prefix prompt [FIM_MID])
//
// Each quoted piece is tokenized on its own, without BOS/EOS; prefix, suffix,
// filenames and file texts as plain text, `prompt` with special-token text
// read as the tokens. BOS comes when the vocabulary adds one and add_bos
// allows. Budgets: llama.cpp's server's with its defaults (batch B = 2048,
// n_predict -1): the prefix keeps its last 3B/4 tokens, the suffix its
// first max(0, B/4 - 2 - |prompt|) tokens, the extra context its last
// max(0, n_ctx - B + 2) tokens (a cut may fall inside a file). Where that
// prompt would leave less than max_tokens (at least 1) of the context,
// more is cut: the extra context's start first, then the prefix's start,
// then the suffix's end (llama.cpp's server takes no such prompt whole).
//
// Errors: FAILED_PRECONDITION "infill: the model has no fill-in-the-middle
// tokens (missing: FIM_PRE, FIM_MID)"; a tokenizer error as it comes.
//
// Threads: a pure function of its arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"
#include "strata/v1/inference.pb.h"

namespace strata::coordinator {

inline constexpr int kFimBatch = 2048;  // B above: llama-server's --batch-size

struct FimBudget {
  int64_t n_ctx = 0;       // the served context, tokens
  int64_t max_tokens = 0;  // the request's, room kept for them; 0 (none): 1
};

// OK when the model has FIM_PRE, FIM_SUF and FIM_MID; else the error above.
absl::Status check_fill_in_middle(const tokenizer::Tokenizer& tok);

absl::StatusOr<std::vector<int32_t>> fill_in_middle_prompt(const tokenizer::Tokenizer& tok,
                                                           const v1::FillInMiddle& infill,
                                                           bool add_bos, FimBudget budget);

}  // namespace strata::coordinator
