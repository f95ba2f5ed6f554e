#include "coordinator/fill_in_middle.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strata::coordinator {
namespace {

absl::StatusOr<std::vector<int32_t>> text_ids(const tokenizer::Tokenizer& tok,
                                              const std::string& text, bool parse_special) {
  tokenizer::EncodeOptions e;
  e.add_special = false;
  e.parse_special = parse_special;
  return tok.encode(text, e);
}

}  // namespace

absl::Status check_fill_in_middle(const tokenizer::Tokenizer& tok) {
  const tokenizer::SpecialTokens& s = tok.special();
  std::vector<const char*> missing;
  if (!s.fim_pre) missing.push_back("FIM_PRE");
  if (!s.fim_suf) missing.push_back("FIM_SUF");
  if (!s.fim_mid) missing.push_back("FIM_MID");
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("infill: the model has no fill-in-the-middle tokens (missing: ",
                   absl::StrJoin(missing, ", "), ")"));
}

absl::StatusOr<std::vector<int32_t>> fill_in_middle_prompt(const tokenizer::Tokenizer& tok,
                                                           const v1::FillInMiddle& infill,
                                                           bool add_bos, FimBudget budget) {
  if (absl::Status st = check_fill_in_middle(tok); !st.ok()) return st;
  const tokenizer::SpecialTokens& s = tok.special();
  std::vector<int32_t> extra;
  auto append = [&extra](const std::vector<int32_t>& ids) {
    extra.insert(extra.end(), ids.begin(), ids.end());
  };
  auto ids_of = [&tok](const std::string& text, bool parse_special) {
    return text_ids(tok, text, parse_special);
  };
  if (s.fim_rep) {
    auto repo = ids_of("myproject\n", false);
    if (!repo.ok()) return repo.status();
    extra.push_back(*s.fim_rep);
    append(*repo);
  }
  for (const v1::FimFile& file : infill.extra()) {
    if (s.fim_sep) {
      auto name = ids_of(absl::StrCat(file.has_filename() ? file.filename() : "tmp", "\n"), false);
      if (!name.ok()) return name.status();
      extra.push_back(*s.fim_sep);
      append(*name);
    } else {
      auto separator = ids_of("\n\n--- snippet ---\n\n", false);
      if (!separator.ok()) return separator.status();
      append(*separator);
    }
    auto text = ids_of(file.text(), false);
    if (!text.ok()) return text.status();
    append(*text);
  }
  if (s.fim_sep) {
    auto name = ids_of("filename\n", false);
    if (!name.ok()) return name.status();
    extra.push_back(*s.fim_sep);
    append(*name);
  }
  auto prefix = ids_of(infill.prefix(), false);
  if (!prefix.ok()) return prefix.status();
  auto suffix = ids_of(infill.suffix(), false);
  if (!suffix.ok()) return suffix.status();
  auto typed = ids_of(infill.prompt(), true);
  if (!typed.ok()) return typed.status();

  int64_t prefix_take =
      std::min<int64_t>(static_cast<int64_t>(prefix->size()), 3 * (kFimBatch / 4));
  int64_t suffix_take =
      std::min<int64_t>(static_cast<int64_t>(suffix->size()),
                        std::max<int64_t>(0, kFimBatch / 4 - (2 + static_cast<int64_t>(typed->size()))));
  // llama-server's default n_predict (-1) in its n_ctx - B - 2 n_predict.
  int64_t extra_take = std::min<int64_t>(std::max<int64_t>(0, budget.n_ctx - kFimBatch + 2),
                                         static_cast<int64_t>(extra.size()));
  // What does not leave max_tokens (at least 1) of the context: the extra
  // context's start first, then the prefix's start, then the suffix's end.
  const bool bos = add_bos && tok.add_bos() && s.bos;
  const int64_t room = budget.n_ctx - std::max<int64_t>(1, budget.max_tokens);
  int64_t over = (bos ? 1 : 0) + 3 + static_cast<int64_t>(typed->size()) + extra_take +
                 prefix_take + suffix_take - room;
  for (int64_t* take : {&extra_take, &prefix_take, &suffix_take}) {
    const int64_t cut = std::clamp<int64_t>(over, 0, *take);
    *take -= cut;
    over -= cut;
  }

  std::vector<int32_t> pre_part{*s.fim_pre};
  pre_part.insert(pre_part.end(), prefix->end() - prefix_take, prefix->end());
  pre_part.insert(pre_part.end(), typed->begin(), typed->end());
  std::vector<int32_t> suf_part{*s.fim_suf};
  suf_part.insert(suf_part.end(), suffix->begin(), suffix->begin() + suffix_take);

  std::vector<int32_t> ids(extra.end() - extra_take, extra.end());
  if (bos) ids.push_back(*s.bos);
  const std::vector<int32_t>& first = infill.suffix_first() ? suf_part : pre_part;
  const std::vector<int32_t>& second = infill.suffix_first() ? pre_part : suf_part;
  ids.insert(ids.end(), first.begin(), first.end());
  ids.insert(ids.end(), second.begin(), second.end());
  ids.push_back(*s.fim_mid);
  return ids;
}

}  // namespace strata::coordinator
