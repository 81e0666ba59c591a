// GetAttention and StreamAttention: attention of one text or pair (and a decoder text for
// encoder-decoders), selected, aggregated and cut to windows.

#include "models/requests/attention.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"

namespace attnscope {

using requests_internal::CheckHasTokens;
using requests_internal::CheckInput;
using requests_internal::CheckText;
using requests_internal::HeadsOut;
using requests_internal::OriginalTexts;
using requests_internal::Row;
using requests_internal::TooLarge;
using requests_internal::ToTextOptions;
using requests_internal::WordsOf;

namespace {

// The decoder's side of teacher forcing for `text`.
struct DecoderText {
  // What the decoder reads: transformers' shift_tokens_right of the labels,
  // decoder_start_token_id, t1 .. tn.
  EncodedText input;
  // What each position writes: the labels that EncodeTarget gives ("t1 .. tn </s>" for Marian).
  EncodedText labels;
};

// InvalidArgument naming `decoder_text` when it is empty, not UTF-8, yields no token, or is longer
// than the decoder's positions.
absl::StatusOr<DecoderText> DecoderInput(const LoadedModel& model, const std::string& text) {
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(text, "decoder_text"));
  const Tokenizer& tokenizer = model.tokenizer();
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText target, model.TokenizeTarget(text));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(target, "decoder_text"));
  const bool more_than = target.is_prefix;
  ATTNSCOPE_ASSIGN_OR_RETURN(Encoding labels,
                             tokenizer.Assemble(std::move(target), nullptr, EncodeOptions()));
  const int64_t limit = model.config().max_position_embeddings;
  if (static_cast<int64_t>(labels.size()) > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("decoder_text: expected at most ", limit,
                     " tokens with the decoder's start token (", "max_position_embeddings), got ",
                     more_than ? "more than " : "", labels.size(), "; shorten `decoder_text`"));
  }
  const int64_t start_id = model.config().decoder_start_token_id;
  Encoding input;
  const auto push = [&input](const Encoding& from, size_t i) {
    input.input_ids.push_back(from.input_ids[i]);
    input.tokens.push_back(from.tokens[i]);
    input.token_type_ids.push_back(from.token_type_ids[i]);
    input.attention_mask.push_back(1);
    input.special_tokens_mask.push_back(from.special_tokens_mask[i]);
    input.offsets.push_back(from.offsets[i]);
    input.byte_offsets.push_back(from.byte_offsets[i]);
    input.word_ids.push_back(from.word_ids[i]);
    input.sequence_ids.push_back(from.sequence_ids[i]);
  };
  Encoding start;
  start.input_ids = {start_id};
  start.tokens = {tokenizer.IdToToken(start_id)};
  start.token_type_ids = {0};
  start.special_tokens_mask = {1};
  start.offsets = start.byte_offsets = {Offset{}};
  start.word_ids = {-1};
  start.sequence_ids = {-1};
  push(start, 0);
  for (size_t i = 0; i + 1 < labels.size(); ++i) push(labels, i);
  DecoderText decoder;
  decoder.input.original_texts = OriginalTexts(input, text, "");
  decoder.input.encoding = std::move(input);
  decoder.labels.original_texts = OriginalTexts(labels, text, "");
  decoder.labels.encoding = std::move(labels);
  return decoder;
}

// The selected heads of one layer's attention [N, Q, K], cut to `window`, as the answer holds it:
// dense, or the k largest of each row with their key positions (pushed to `indices`). `block`
// names the attention for the message of a top_k over its rows' length: an encoder-decoder's
// answer has three blocks of different lengths.
absl::Status AppendSelected(const torch::Tensor& layer, const std::vector<int64_t>& heads,
                            HeadAggregation aggregation, const AttentionWindow& window,
                            int64_t top_k, absl::string_view block,
                            std::vector<torch::Tensor>* values,
                            std::vector<torch::Tensor>* indices) {
  ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor selected,
                             SelectHeads(layer, heads, aggregation, window));
  if (top_k <= 0) {
    values->push_back(std::move(selected));
    return absl::OkStatus();
  }
  const int64_t keys = selected.size(-1);
  if (top_k > keys) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k ", top_k, ": expected a value in [1, ", keys, "] (the rows of ", block,
                     " have ", keys, " keys), got ", top_k, "; set `top_k` to at most ", keys,
                     " or 0 for dense attention"));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(RowTopK top, TopKPerRow(selected, top_k, window.key_start));
  values->push_back(std::move(top.values));
  indices->push_back(std::move(top.indices));
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> AttentionAnswer::dim_names() const {
  const std::string unit = words.empty() ? "token" : "word";
  return {"layer", "head", "query_" + unit, top_k ? "k" : "key_" + unit};
}

std::vector<int64_t> AttentionAnswer::shape() const {
  std::vector<int64_t> shape = {static_cast<int64_t>(layers.size())};
  for (const int64_t dim : attentions.front().sizes()) shape.push_back(dim);
  return shape;
}

std::vector<std::string> AttentionAnswer::decoder_dim_names() const {
  return {"layer", "head", "decoder_token", top_k ? "k" : "decoder_token"};
}

std::vector<std::string> AttentionAnswer::cross_dim_names() const {
  return {"layer", "head", "decoder_token", top_k ? "k" : "encoder_token"};
}

std::vector<int64_t> AttentionAnswer::decoder_shape() const {
  if (decoder_attentions.empty()) return {};
  std::vector<int64_t> shape = {static_cast<int64_t>(decoder_layers.size())};
  for (const int64_t dim : decoder_attentions.front().sizes()) shape.push_back(dim);
  return shape;
}

std::vector<int64_t> AttentionAnswer::cross_shape() const {
  if (cross_attentions.empty()) return {};
  std::vector<int64_t> shape = {static_cast<int64_t>(decoder_layers.size())};
  for (const int64_t dim : cross_attentions.front().sizes()) shape.push_back(dim);
  return shape;
}

std::string AttentionFixes(const AttentionQuery& query) {
  std::vector<std::string> fixes = {"use StreamAttention", "request fewer layers or heads",
                                    "a smaller window"};
  if (query.dtype == OutputDType::kFloat32) fixes.push_back("dtype DTYPE_FLOAT16");
  if (query.top_k <= 0) fixes.push_back("top_k");
  if (query.include_scores) fixes.push_back("leave include_scores off");
  return absl::StrJoin(fixes, ", ");
}

namespace {

// RunAttention's first step: options that contradict each other or the model. InvalidArgument
// naming them and what to drop.
absl::Status ValidateAttentionQuery(const AttentionQuery& query, const LoadedModel& model) {
  const ModelConfig& config = model.config();
  ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.input, ""));
  if (query.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k ", query.top_k, ": expected 0 (dense attention) or a positive count, got ",
        query.top_k, "; fix `top_k`"));
  }
  if (query.top_k > 0 && query.include_scores) {
    return absl::InvalidArgumentError(
        "include_scores with top_k: scores are returned dense only; drop `include_scores` or set "
        "`top_k` to 0");
  }
  if (query.aggregate_words && query.include_scores) {
    return absl::InvalidArgumentError(
        "include_scores with aggregate_words: pre-softmax scores do not add up over a word's "
        "tokens; drop `include_scores` or `aggregate_words`");
  }
  if (query.decoder_text.has_value()) {
    if (!config.is_encoder_decoder) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decoder_text: model '", model.name(), "' (model_type '", config.model_type,
          "') is not an encoder-decoder, it reads one text; drop `decoder_text`, or use an "
          "encoder-decoder model (marian, bart or t5)"));
    }
    for (const auto& [set, option] :
         {std::pair{query.include_scores, "include_scores"}, std::pair{query.rollout, "rollout"},
          std::pair{query.aggregate_words, "aggregate_words"}}) {
      if (set) {
        return absl::InvalidArgumentError(absl::StrCat(
            option, " with decoder_text: not available for encoder-decoders yet; drop `", option,
            "` (or `decoder_text` for the encoder's attention alone)"));
      }
    }
  }
  return absl::OkStatus();
}

// RunAttention's third step: the bytes of the answer in `dtype`, known from the resolved counts
// before the forward pass. An over-cap answer is refused here rather than computed only to be
// dropped.
int64_t EstimateAttentionBytes(const AttentionQuery& query, const AttentionAnswer& answer,
                               OutputDType dtype) {
  const int64_t queries = answer.window.query_end - answer.window.query_start;
  const int64_t keys = answer.window.key_end - answer.window.key_start;
  const auto columns = [&](int64_t keys) {
    return answer.top_k ? std::min<int64_t>(query.top_k, keys) : keys;
  };
  int64_t cells = static_cast<int64_t>(answer.layers.size()) *
                  HeadsOut(query.head_aggregation, answer.heads.size()) * queries * columns(keys);
  if (answer.decoder_tokens.has_value()) {
    const int64_t decoder_queries =
        answer.decoder_window.query_end - answer.decoder_window.query_start;
    cells +=
        static_cast<int64_t>(answer.decoder_layers.size()) *
        HeadsOut(query.head_aggregation, answer.decoder_heads.size()) * decoder_queries *
        (columns(answer.decoder_window.key_end - answer.decoder_window.key_start) + columns(keys));
  }
  int64_t bytes = cells * BytesPerElement(dtype);
  if (query.include_scores) bytes *= 2;
  if (answer.top_k) bytes += cells * BytesPerElement(OutputDType::kFloat32);
  if (query.rollout) bytes += queries * keys * BytesPerElement(dtype);
  return bytes;
}

// RunAttention's last step: the forward pass's attentions (and scores, rollout, the decoder's
// self- and cross-attention) stripped of padding, summed over words, cut to the windows and
// reduced to the selected heads, into `answer`.
absl::Status PostProcessAttention(const AttentionQuery& query, const std::vector<WordSpan>& spans,
                                  const ForwardOutput& forward, AttentionAnswer* answer) {
  const int64_t length = static_cast<int64_t>(answer->tokens.encoding.size());
  if (answer->decoder_tokens.has_value()) {
    const int64_t decoder_length = static_cast<int64_t>(answer->decoder_tokens->encoding.size());
    // The cross-attention's rectangle: decoder rows, encoder columns.
    const AttentionWindow cross_window = {answer->decoder_window.query_start,
                                          answer->decoder_window.query_end,
                                          answer->window.key_start, answer->window.key_end};
    for (const int64_t layer : answer->decoder_layers) {
      ATTNSCOPE_RETURN_IF_ERROR(
          AppendSelected(StripPadding(forward.decoder_attentions[layer], 0, decoder_length),
                         answer->decoder_heads, query.head_aggregation, answer->decoder_window,
                         query.top_k, "the decoder's self-attention (its tokens in decoder_window)",
                         &answer->decoder_attentions, &answer->decoder_top_k_indices));
      ATTNSCOPE_RETURN_IF_ERROR(
          AppendSelected(forward.cross_attentions[layer].select(0, 0), answer->decoder_heads,
                         query.head_aggregation, cross_window, query.top_k,
                         "the cross-attention (the encoder's tokens in window)",
                         &answer->cross_attentions, &answer->cross_top_k_indices));
    }
  }
  auto unit_attention = [&](const torch::Tensor& tokens) -> absl::StatusOr<torch::Tensor> {
    if (!query.aggregate_words) return tokens;
    return AggregateWords(tokens, spans);
  };
  for (const int64_t layer : answer->layers) {
    ATTNSCOPE_ASSIGN_OR_RETURN(const torch::Tensor full,
                               unit_attention(StripPadding(forward.attentions[layer], 0, length)));
    ATTNSCOPE_RETURN_IF_ERROR(AppendSelected(
        full, answer->heads, query.head_aggregation, answer->window, query.top_k,
        answer->decoder_tokens.has_value() ? "the encoder's self-attention (its tokens in window)"
                                           : "the attention (its keys in window)",
        &answer->attentions, &answer->top_k_indices));
    if (query.include_scores) {
      ATTNSCOPE_ASSIGN_OR_RETURN(
          torch::Tensor scores,
          SelectHeads(StripPadding(forward.attention_scores[layer], 0, length), answer->heads,
                      query.head_aggregation, answer->window));
      answer->scores.push_back(std::move(scores));
    }
  }
  if (query.rollout) {
    std::vector<torch::Tensor> all_layers;
    for (const torch::Tensor& layer : forward.attentions) {
      all_layers.push_back(StripPadding(layer, 0, length));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor rollout, AttentionRollout(all_layers));
    ATTNSCOPE_ASSIGN_OR_RETURN(rollout, unit_attention(rollout.unsqueeze(0)));
    answer->rollout =
        rollout.squeeze(0)
            .narrow(0, answer->window.query_start,
                    answer->window.query_end - answer->window.query_start)
            .narrow(1, answer->window.key_start, answer->window.key_end - answer->window.key_start);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RequestRunner::ResolveAttention(const AttentionQuery& query, AttentionAnswer* answer,
                                             std::vector<WordSpan>* spans) const {
  const ModelConfig& config = answer->model->config();
  answer->dtype = query.dtype;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer->layers, ResolveIndices(query.layers, config.num_hidden_layers, "layer", "layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer->heads, ResolveIndices(query.heads, config.num_attention_heads, "head", "heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer->tokens,
                             TokenizeInput(*answer->model, query.input, options, ""));
  const int64_t length = static_cast<int64_t>(answer->tokens.encoding.size());
  if (query.aggregate_words) {
    answer->words = WordsOf(answer->tokens, query.input);
    for (const Word& word : answer->words) spans->push_back(word.tokens);
  }
  // The units of the query and key axes: tokens, or words.
  const int64_t units = query.aggregate_words ? static_cast<int64_t>(spans->size()) : length;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer->window,
      ResolveWindow(query.window, units, "window", query.aggregate_words ? "words" : "tokens"));
  answer->top_k = query.top_k > 0;
  if (query.decoder_text.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(DecoderText decoder,
                               DecoderInput(*answer->model, *query.decoder_text));
    answer->decoder_tokens = std::move(decoder.input);
    answer->decoder_labels = std::move(decoder.labels);
    const int64_t decoder_length = static_cast<int64_t>(answer->decoder_tokens->encoding.size());
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer->decoder_layers,
        ResolveIndices(query.layers, config.decoder_layers, "decoder layer", "layers"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer->decoder_heads,
        ResolveIndices(query.heads, config.decoder_attention_heads, "decoder head", "heads"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer->decoder_window,
        ResolveWindow(query.decoder_window, decoder_length, "decoder_window"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardOutput> RequestRunner::RunAttentionPass(const AttentionQuery& query,
                                                              const AttentionAnswer& answer,
                                                              const CallCheck& check,
                                                              absl::string_view client) const {
  ForwardOptions forward;
  forward.output_attention_scores = query.include_scores;
  forward.output_logits = false;
  if (!answer.decoder_tokens.has_value()) {
    std::vector<Encoding> batch_input = {answer.tokens.encoding};
    ATTNSCOPE_ASSIGN_OR_RETURN(
        BatchOutput batch,
        batcher_.Run(*answer.model, std::move(batch_input), forward, check, client));
    return std::move(batch.forward);
  }
  // One teacher-forced pass on this thread: the batcher's passes carry no decoder input.
  ComputeGate::Turn turn(gate_, check, client);
  ATTNSCOPE_RETURN_IF_ERROR(turn.Take("before the forward pass"));
  forward.on_layer_done = [&check](int64_t) { return check("between layers"); };
  ForwardInput input;
  input.input_ids = Row(answer.tokens.encoding.input_ids);
  input.decoder_input_ids = Row(answer.decoder_tokens->encoding.input_ids);
  return answer.model->model().Forward(input, forward);
}

absl::StatusOr<AttentionAnswer> RequestRunner::RunAttention(const AttentionQuery& query,
                                                            const CallCheck& check,
                                                            Delivery delivery,
                                                            absl::string_view client) const {
  AttentionAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  ATTNSCOPE_RETURN_IF_ERROR(ValidateAttentionQuery(query, *answer.model));
  std::vector<WordSpan> spans;
  ATTNSCOPE_RETURN_IF_ERROR(ResolveAttention(query, &answer, &spans));
  if (delivery == Delivery::kUnary) {
    const int64_t bytes = EstimateAttentionBytes(query, answer, answer.dtype);
    if (bytes > options_.max_response_bytes) {
      return TooLarge("GetAttention", bytes, options_.max_response_bytes, AttentionFixes(query));
    }
  }
  // The answer's tensors are float32 until the front end copies them out.
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.budget_hold,
      answer_budget_.Reserve(
          EstimateAttentionBytes(query, answer, OutputDType::kFloat32),
          delivery == Delivery::kStream ? "StreamAttention's answer" : "GetAttention's answer",
          client, kAttentionAnswerFixes));
  ATTNSCOPE_ASSIGN_OR_RETURN(const ForwardOutput forward,
                             RunAttentionPass(query, answer, check, client));
  ATTNSCOPE_RETURN_IF_ERROR(PostProcessAttention(query, spans, forward, &answer));
  return answer;
}

}  // namespace attnscope
