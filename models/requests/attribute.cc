// Attribute: token attributions of a cross-encoder's logit (occlusion, gradient x input,
// integrated gradients) and their word sums.

#include "models/requests/attribute.h"

#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"

namespace attnscope {

using requests_internal::CheckInput;
using requests_internal::CheckScoredWithSpecialTokens;
using requests_internal::Row;
using requests_internal::TooLarge;
using requests_internal::ToTextOptions;
using requests_internal::WordsOf;

namespace {

// The id of the first of `spellings` among the first `embeddings` ids of the tokenizer, or -1: a
// tokenizer may add special tokens beyond the model's embedding table. One the tokenizer matches
// in a text as a token of its own (a special token) comes first: MPNet's vocabulary holds BERT's
// [MASK] as a plain word beside its own <mask>. A scan: tokenizers look texts up, not token names,
// and one scan costs far less than the attribution it serves.
int64_t FindTokenId(const Tokenizer& tokenizer, const std::vector<absl::string_view>& spellings,
                    int64_t embeddings) {
  int64_t found = -1;
  for (const absl::string_view token : spellings) {
    for (int64_t id = 0; id < std::min(tokenizer.vocab_size(), embeddings); ++id) {
      if (tokenizer.IdToToken(id) != token) continue;
      const absl::StatusOr<TokenizedText> alone =
          tokenizer.Tokenize(std::string_view(token.data(), token.size()));
      if (alone.ok() && alone->ids == std::vector<int64_t>{id}) return id;
      if (found < 0) found = id;
      break;
    }
  }
  return found;
}

// A word's value per method: the WordSums entry of (sequence id, word id).
using WordKey = std::pair<int64_t, int64_t>;

absl::StatusOr<std::map<WordKey, double>> WordValues(const torch::Tensor& values,
                                                     const Encoding& encoding) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::vector<WordValue> words,
                             WordSums(values, encoding.word_ids, encoding.sequence_ids));
  std::map<WordKey, double> out;
  for (const WordValue& word : words) out[{word.sequence_id, word.word_id}] = word.value;
  return out;
}

}  // namespace

absl::StatusOr<AttributeAnswer> RequestRunner::RunAttribute(const AttributeQuery& query,
                                                            const CallCheck& check,
                                                            absl::string_view client) const {
  AttributeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const LoadedModel& model = *answer.model;
  const ModelConfig& config = model.config();
  if (!IsBertFamily(config.architecture)) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", model.name(),
        "': token attributions support BERT, RoBERTa, DistilBERT, MPNet and ELECTRA "
        "cross-encoders only, got a ",
        IsDecoderOnly(config.architecture) ? "decoder-only " : "",
        ArchitectureName(config.architecture),
        " model (next-token log-probabilities are not attributed yet); set `model` to a "
        "cross-encoder (ModelInfo.has_classifier)"));
  }
  if (!model.model().has_classifier()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.name(),
        "': expected a cross-encoder with a classifier head (BertForSequenceClassification, "
        "XLMRobertaForSequenceClassification) whose "
        "logit is attributed, got a model without one (ModelInfo.has_classifier is false); set "
        "`model` to a cross-encoder"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckScoredWithSpecialTokens(model, query.tokenization));
  if (query.target < 0 || query.target >= config.num_labels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target ", query.target, ": expected a classifier label index in [0, ", config.num_labels,
        ") of model '", model.name(), "', got ", query.target, "; fix `target`"));
  }
  if (query.integrated_gradients_steps < 0 ||
      query.integrated_gradients_steps > kMaxIntegratedGradientsSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("integrated_gradients_steps ", query.integrated_gradients_steps,
                     ": expected 0 (the default, ", kDefaultIntegratedGradientsSteps, ") to ",
                     kMaxIntegratedGradientsSteps, ", got ", query.integrated_gradients_steps,
                     "; fix `integrated_gradients_steps`"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.input, ""));

  AttributionOptions options;
  options.target = query.target;
  if (!query.methods.empty()) {
    options.occlusion = options.gradient_x_input = options.integrated_gradients = false;
    for (const AttributionMethod method : query.methods) {
      switch (method) {
        case AttributionMethod::kOcclusion:
          options.occlusion = true;
          break;
        case AttributionMethod::kGradientXInput:
          options.gradient_x_input = true;
          break;
        case AttributionMethod::kIntegratedGradients:
          options.integrated_gradients = true;
          break;
      }
    }
  }
  if (options.occlusion) {
    // BERT's vocabularies spell them [MASK] and [UNK], RoBERTa's and XLM-R's <mask> and <unk>.
    const bool mask = query.occlusion_token == OcclusionToken::kMask;
    const std::vector<absl::string_view> spellings =
        mask ? std::vector<absl::string_view>{"[MASK]", "<mask>"}
             : std::vector<absl::string_view>{"[UNK]", "<unk>"};
    options.occlusion_token_id = FindTokenId(model.tokenizer(), spellings, config.vocab_size);
    if (options.occlusion_token_id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("occlusion_token: expected a ", spellings[0], " or ", spellings[1],
                       " token among the ", config.vocab_size, " token embeddings of model '",
                       model.name(), "', got none; set `occlusion_token` to ",
                       mask ? "OCCLUSION_TOKEN_UNK" : "OCCLUSION_TOKEN_MASK",
                       " or leave occlusion out of `methods`"));
    }
  }
  options.baseline = query.baseline;
  // The pad token of config.json (the engine's default), else the tokenizer's.
  if (config.pad_token_id < 0) options.baseline_token_id = model.tokenizer().pad_token_id();
  if (options.integrated_gradients && options.baseline == AttributionBaseline::kTokenEmbedding &&
      options.baseline_token_id < 0 && config.pad_token_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "baseline: model '", model.name(),
        "' has no pad token (config.json pad_token_id, tokenizer [PAD]) whose embedding is the "
        "baseline; set `baseline` to ATTRIBUTION_BASELINE_ZERO"));
  }
  options.integrated_gradients_steps = query.integrated_gradients_steps == 0
                                           ? kDefaultIntegratedGradientsSteps
                                           : query.integrated_gradients_steps;
  // Taken before the passes, given to the next waiting call after each batch of them.
  ComputeGate::Turn turn(gate_, check, client);
  options.on_batch_done = [&turn]() {
    turn.Leave();
    return turn.Take("after a batch of attribution passes");
  };

  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions text_options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.tokens, TokenizeInput(model, query.input, text_options, ""));
  const Encoding& encoding = answer.tokens.encoding;
  std::vector<Word> words;
  for (Word& word : WordsOf(answer.tokens, query.input)) {
    if (word.sequence_id >= 0) words.push_back(std::move(word));
  }
  // Refused before the passes, as the other RPCs do: the values' size is known from the counts.
  const int64_t methods = int64_t{options.occlusion} + int64_t{options.gradient_x_input} +
                          int64_t{options.integrated_gradients};
  const int64_t bytes = static_cast<int64_t>(encoding.size() + words.size()) * methods *
                        BytesPerElement(OutputDType::kFloat32);
  if (bytes > options_.max_response_bytes) {
    return TooLarge("Attribute", bytes, options_.max_response_bytes, kAttributeFixes);
  }
  // Occlusion runs the input once as it is and once per occluded token (the text's tokens), each
  // integrated-gradients step and gradient x input one forward and backward pass.
  const int64_t length = static_cast<int64_t>(encoding.size());
  const int64_t passes =
      (options.occlusion ? length + 1 : 0) + (options.gradient_x_input ? 1 : 0) +
      (options.integrated_gradients ? options.integrated_gradients_steps + 1 : 0);
  ATTNSCOPE_RETURN_IF_ERROR(CheckWork(
      "Attribute", passes * length, absl::StrCat(passes, " passes over ", length, " tokens"),
      "ask for fewer integrated_gradients_steps or methods, or send shorter texts"));
  ATTNSCOPE_RETURN_IF_ERROR(turn.Take("before the attribution passes"));

  // Segment ids only for architectures with token type embeddings, as the engine's passes give
  // them: DistilBERT's pair template numbers its second text 1 too, which it has no embedding for.
  const AttributionInput input{
      Row(encoding.input_ids), Row(encoding.attention_mask),
      config.type_vocab_size > 0 ? Row(encoding.token_type_ids) : torch::Tensor(),
      Row(encoding.special_tokens_mask)};
  ATTNSCOPE_ASSIGN_OR_RETURN(const Attributions values, Attribute(model.model(), input, options));
  answer.target = query.target;
  if (auto label = config.id2label.find(query.target); label != config.id2label.end()) {
    answer.target_label = label->second;
  }
  answer.score = values.score;
  answer.baseline_score = values.baseline_score;
  if (options.integrated_gradients) {
    answer.integrated_gradients_steps = options.integrated_gradients_steps;
    answer.convergence_delta =
        values.integrated_gradients.sum().item<double>() - (values.score - values.baseline_score);
  }
  // Per method: the token values, and the word sums by (sequence id, word id).
  std::map<WordKey, double> occlusion, gradient_x_input, integrated_gradients;
  for (const auto& [tensor, tokens, word_values] :
       {std::tuple{&values.occlusion, &answer.occlusion, &occlusion},
        std::tuple{&values.gradient_x_input, &answer.gradient_x_input, &gradient_x_input},
        std::tuple{&values.integrated_gradients, &answer.integrated_gradients,
                   &integrated_gradients}}) {
    if (!tensor->defined()) continue;
    const torch::Tensor contiguous = tensor->to(torch::kFloat32).contiguous();
    tokens->assign(contiguous.data_ptr<float>(), contiguous.data_ptr<float>() + contiguous.numel());
    ATTNSCOPE_ASSIGN_OR_RETURN(*word_values, WordValues(*tensor, encoding));
  }
  auto find = [](const std::map<WordKey, double>& sums,
                 const WordKey& key) -> std::optional<double> {
    const auto it = sums.find(key);
    return it == sums.end() ? std::nullopt : std::optional<double>(it->second);
  };
  for (Word& word : words) {
    AttributedWord& out = answer.words.emplace_back();
    out.word_id = encoding.word_ids[word.tokens.token_start];
    const WordKey key = {word.sequence_id, out.word_id};
    out.occlusion = find(occlusion, key);
    out.gradient_x_input = find(gradient_x_input, key);
    out.integrated_gradients = find(integrated_gradients, key);
    out.word = std::move(word);
  }
  return answer;
}

}  // namespace attnscope
