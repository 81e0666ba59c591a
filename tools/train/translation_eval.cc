#include "tools/train/translation_eval.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "common/status_macros.h"
#include "models/engine.h"
#include "models/generation.h"
#include "tools/train/chrf.h"

namespace attnscope::train {

absl::StatusOr<TranslationEvaluation> EvaluateTranslations(
    const std::string& model_dir, const std::vector<TranslationExample>& examples,
    int64_t max_new_tokens) {
  LoadedModel::Options options;
  options.name = "translation";
  options.model_dir = model_dir;
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<LoadedModel> loaded, LoadedModel::Create(options));
  TranslationEvaluation evaluation;
  GenerationOptions generation;
  generation.method = DecodingMethod::kGreedy;
  generation.eos_token_ids = loaded->config().eos_token_ids;
  generation.max_new_tokens =
      std::min(max_new_tokens, loaded->config().max_position_embeddings - 1);
  evaluation.max_new_tokens = generation.max_new_tokens;
  std::map<std::string, ChrfScorer> model_scores, copy_scores;
  const auto start = std::chrono::steady_clock::now();
  for (const TranslationExample& example : examples) {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string source, PrefixedSource(example));
    TextOptions text_options;
    text_options.truncation = Truncation::kLongestFirst;
    ATTNSCOPE_ASSIGN_OR_RETURN(Encoding encoding,
                               loaded->Encode(source, std::nullopt, text_options));
    ATTNSCOPE_ASSIGN_OR_RETURN(GenerationResult result,
                               Generate(loaded->model(), encoding.input_ids, generation,
                                        [](const GeneratedToken&) { return absl::OkStatus(); }));
    std::vector<int64_t> ids;
    for (const GeneratedToken& token : result.tokens) ids.push_back(token.id);
    std::string translation = loaded->tokenizer().Decode(ids, /*skip_special_tokens=*/true);
    ATTNSCOPE_RETURN_IF_ERROR(model_scores[example.lang].Add(translation, example.target));
    ATTNSCOPE_RETURN_IF_ERROR(copy_scores[example.lang].Add(example.source, example.target));
    ++evaluation.scores[example.lang].pairs;
    evaluation.translations.push_back(std::move(translation));
  }
  evaluation.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& [lang, score] : evaluation.scores) {
    score.chrf = model_scores[lang].Score();
    score.copy_source_chrf = copy_scores[lang].Score();
  }
  return evaluation;
}

}  // namespace attnscope::train
