// Held-out evaluation of a translation model through attnscope's own serving path (LoadedModel:
// its tokenizer and weights, greedy Generate): chrF of the translations against the references per
// language, next to the chrF of the English source copied unchanged, what a model that learnt
// nothing but to copy would score (shared names and numbers keep it above 0).
#ifndef ATTNSCOPE_TOOLS_TRAIN_TRANSLATION_EVAL_H_
#define ATTNSCOPE_TOOLS_TRAIN_TRANSLATION_EVAL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/train/marian_trainer.h"

namespace attnscope::train {

struct LanguageScore {
  int64_t pairs = 0;
  // chrF2 in [0, 100] (chrf.h).
  double chrf = 0;
  double copy_source_chrf = 0;
};

struct TranslationEvaluation {
  // By target language ("vi", "ko").
  std::map<std::string, LanguageScore> scores;
  // One per example, in order: the greedy translation, special tokens left out.
  std::vector<std::string> translations;
  int64_t max_new_tokens = 0;
  // Wall time of the translations.
  double seconds = 0;
};

// Loads `model_dir` as the server does and translates each example's PrefixedSource greedily,
// at most `max_new_tokens` tokens (and the decoder's positions). Errors: LoadedModel::Create's
// (a missing or malformed checkpoint), InvalidArgument for an unknown language or invalid UTF-8.
absl::StatusOr<TranslationEvaluation> EvaluateTranslations(
    const std::string& model_dir, const std::vector<TranslationExample>& examples,
    int64_t max_new_tokens);

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_TRANSLATION_EVAL_H_
