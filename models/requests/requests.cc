#include "models/requests/requests.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/file_util.h"
#include "models/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status CheckText(const std::string& text, absl::string_view field) {
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a non-empty UTF-8 text, got an empty one; set `", field, "`"));
  }
  // Checked here so that the message names the field (the tokenizer sees one text at a time).
  if (absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(text); !decoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", decoded.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CheckInput(const TextInput& input, absl::string_view prefix) {
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(input.text, absl::StrCat(prefix, "text")));
  if (input.text_pair.has_value()) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(*input.text_pair, absl::StrCat(prefix, "text_pair")));
  }
  return absl::OkStatus();
}

// The original text of each token: the bytes at its byte offsets in the text it came from.
std::vector<std::string> OriginalTexts(const Encoding& encoding, absl::string_view text,
                                       absl::string_view text_pair) {
  std::vector<std::string> texts(encoding.size());
  for (size_t i = 0; i < encoding.size(); ++i) {
    const int64_t sequence = encoding.sequence_ids[i];
    if (sequence < 0) continue;
    const absl::string_view source = sequence == 0 ? text : text_pair;
    const Offset& span = encoding.byte_offsets[i];
    if (span.start >= 0 && span.end >= span.start &&
        span.end <= static_cast<int64_t>(source.size())) {
      texts[i] = std::string(source.substr(span.start, span.end - span.start));
    }
  }
  return texts;
}

// The words of `tokens` (see WordSpans) with their original text.
std::vector<Word> WordsOf(const EncodedText& tokens, const TextInput& input) {
  const Encoding& encoding = tokens.encoding;
  std::vector<Word> words;
  for (const WordSpan& span : WordSpans(encoding.word_ids, encoding.sequence_ids)) {
    Word& word = words.emplace_back();
    word.tokens = span;
    const int64_t first = span.token_start;
    const int64_t last = span.token_end - 1;
    word.sequence_id = encoding.sequence_ids[first];
    if (word.sequence_id < 0) {
      word.text = encoding.tokens[first];
      continue;
    }
    word.offsets = {encoding.offsets[first].start, encoding.offsets[last].end};
    word.byte_offsets = {encoding.byte_offsets[first].start, encoding.byte_offsets[last].end};
    const std::string& source = word.sequence_id == 0 ? input.text : *input.text_pair;
    word.text =
        source.substr(word.byte_offsets.start, word.byte_offsets.end - word.byte_offsets.start);
  }
  return words;
}

// The one rule for an empty text, on every text field: it must give at least one token of its
// own. An empty string is refused by CheckText already; this catches whitespace and characters the
// tokenizer drops, which would otherwise be served as a sequence of special tokens alone.
absl::Status CheckHasTokens(const TokenizedText& tokens, absl::string_view field) {
  if (tokens.size() > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field,
                   ": expected text that yields at least one token, got none (it is only "
                   "whitespace or characters the tokenizer drops); send text with words in it"));
}

// InvalidArgument when a call carries more than `max` inputs (or documents) in `field`.
absl::Status CheckInputCount(size_t count, absl::string_view field, int max) {
  if (count <= static_cast<size_t>(max)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected at most ", max,
                                                 " per call (--max_inputs_per_request), got ",
                                                 count, "; split them over several calls"));
}

// InvalidArgument for skip_special_tokens on a model with a classifier head: a cross-encoder's score
// reads [CLS] query [SEP] document [SEP], and a score of the texts without them would be a number
// the model was never trained to give. The specials stay in the input; special_tokens_mask marks
// them for a display that leaves them out.
absl::Status CheckScoredWithSpecialTokens(const LoadedModel& model,
                                          const TokenizationQuery& tokenization) {
  if (!tokenization.skip_special_tokens || !model.model().has_classifier()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenization.skip_special_tokens: model '", model.name(),
      "' is a cross-encoder, whose score reads the pair with its special tokens ([CLS] query [SEP] "
      "document [SEP]); expected false, got true; leave `skip_special_tokens` off and use "
      "Tokens.special_tokens_mask to hide them in a display"));
}

absl::Status TooLarge(absl::string_view rpc, int64_t bytes, int64_t cap, absl::string_view fixes) {
  return absl::ResourceExhaustedError(TooLargeMessage(rpc, bytes, cap, fixes));
}

int64_t HeadsOut(HeadAggregation aggregation, size_t heads) {
  return aggregation == HeadAggregation::kNone ? static_cast<int64_t>(heads) : 1;
}

absl::StatusOr<TextOptions> ToTextOptions(const TokenizationQuery& tokenization,
                                          Truncation default_truncation) {
  TextOptions options;
  options.truncation = tokenization.truncation.value_or(default_truncation);
  if (tokenization.max_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenization.max_length ", tokenization.max_length,
                     ": expected 0 (the model's limit) or a positive count of tokens, got ",
                     tokenization.max_length, "; fix `tokenization.max_length`"));
  }
  if (options.truncation == Truncation::kNone && tokenization.max_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenization.max_length ", tokenization.max_length,
        ": only applies with truncation, but tokenization.truncation is none; set a truncation "
        "strategy (e.g. TRUNCATION_LONGEST_FIRST) or leave max_length 0"));
  }
  options.max_length = tokenization.max_length;
  options.add_special_tokens = !tokenization.skip_special_tokens;
  return options;
}

// The id of `token` among the first `embeddings` ids of the tokenizer, or -1: a tokenizer may add
// special tokens beyond the model's embedding table. A scan: tokenizers look texts up, not token
// names, and one scan costs far less than the attribution it serves.
int64_t FindTokenId(const Tokenizer& tokenizer, absl::string_view token, int64_t embeddings) {
  for (int64_t id = 0; id < std::min(tokenizer.vocab_size(), embeddings); ++id) {
    if (tokenizer.IdToToken(id) == token) return id;
  }
  return -1;
}

// [1, S] int64.
torch::Tensor Row(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64).view({1, -1});
}

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
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText target, tokenizer.TokenizeTarget(text));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(target, "decoder_text"));
  ATTNSCOPE_ASSIGN_OR_RETURN(Encoding labels,
                             tokenizer.Assemble(std::move(target), nullptr, EncodeOptions()));
  const int64_t limit = model.config().max_position_embeddings;
  if (static_cast<int64_t>(labels.size()) > limit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "decoder_text: expected at most ", limit, " tokens with the decoder's start token (",
        "max_position_embeddings), got ", labels.size(), "; shorten `decoder_text`"));
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
// dense, or the k largest of each row with their key positions (pushed to `indices`).
absl::Status AppendSelected(const torch::Tensor& layer, const std::vector<int64_t>& heads,
                            HeadAggregation aggregation, const AttentionWindow& window,
                            int64_t top_k, std::vector<torch::Tensor>* values,
                            std::vector<torch::Tensor>* indices) {
  ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor selected,
                             SelectHeads(layer, heads, aggregation, window));
  if (top_k <= 0) {
    values->push_back(std::move(selected));
    return absl::OkStatus();
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(RowTopK top, TopKPerRow(selected, top_k, window.key_start));
  values->push_back(std::move(top.values));
  indices->push_back(std::move(top.indices));
  return absl::OkStatus();
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

int64_t BytesPerElement(OutputDType dtype) { return dtype == OutputDType::kFloat32 ? 4 : 2; }

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

std::string TooLargeMessage(absl::string_view rpc, int64_t bytes, int64_t cap,
                            absl::string_view fixes) {
  return absl::StrCat(rpc, " response would be ", bytes, " bytes, over this server's cap of ", cap,
                      " bytes (--max_response_bytes); ", fixes);
}

RequestRunner::RequestRunner(const Options& options,
                             std::vector<std::unique_ptr<LoadedModel>> models,
                             RequestObserver* observer)
    : options_(options),
      models_(std::move(models)),
      observer_(observer),
      batcher_(options.batching, observer),
      gate_(kComputeSlots) {}

absl::StatusOr<const LoadedModel*> RequestRunner::FindModel(const std::string& name) const {
  if (models_.empty()) return absl::UnavailableError("no model is loaded yet");
  if (name.empty()) return models_.front().get();
  std::vector<std::string> names;
  for (const auto& model : models_) {
    if (model->name() == name) return model.get();
    names.push_back(model->name());
  }
  // A name is echoed only in part: it comes from the caller and can be of any length.
  constexpr size_t kEchoedBytes = 64;
  const std::string echoed = name.size() <= kEchoedBytes
                                 ? name
                                 : absl::StrCat(absl::string_view(name).substr(0, kEchoedBytes),
                                                "... (", name.size(), " bytes)");
  return absl::NotFoundError(
      absl::StrCat("model '", echoed, "': not loaded; loaded models: ", absl::StrJoin(names, ", "),
                   "; set `model` to one of them or leave it empty for '", names.front(), "'"));
}

absl::StatusOr<EncodedText> RequestRunner::EncodeInput(const LoadedModel& model,
                                                       const TextInput& input,
                                                       const TextOptions& options,
                                                       absl::string_view field_prefix) const {
  const Clock::time_point start = Clock::now();
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, model.Tokenize(input.text));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(first, absl::StrCat(field_prefix, "text")));
  std::optional<TokenizedText> second;
  if (input.text_pair.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(second, model.Tokenize(*input.text_pair));
    ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(*second, absl::StrCat(field_prefix, "text_pair")));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(Encoding encoding,
                             model.Assemble(std::move(first), std::move(second), options));
  if (observer_ != nullptr) {
    observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding.size()));
  }
  EncodedText encoded;
  encoded.original_texts = OriginalTexts(encoding, input.text, input.text_pair.value_or(""));
  encoded.encoding = std::move(encoding);
  return encoded;
}

absl::Status RequestRunner::CheckWork(absl::string_view rpc, int64_t token_passes,
                                      absl::string_view work, absl::string_view fixes) const {
  if (token_passes <= options_.max_call_tokens) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      rpc, ": ", work, " = ", token_passes, " token passes, over this server's limit of ",
      options_.max_call_tokens, " per call (--max_call_tokens); ", fixes));
}

absl::StatusOr<TokenizeAnswer> RequestRunner::Tokenize(const TokenizeQuery& query) const {
  TokenizeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.input, ""));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.tokens, EncodeInput(*answer.model, query.input, options, ""));
  return answer;
}

absl::StatusOr<AttentionAnswer> RequestRunner::RunAttention(const AttentionQuery& query,
                                                            const CallCheck& check,
                                                            Delivery delivery) const {
  AttentionAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const ModelConfig& config = answer.model->config();
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
          "decoder_text: model '", answer.model->name(), "' (model_type '", config.model_type,
          "') is not an encoder-decoder, it reads one text; drop `decoder_text`, or use a marian "
          "or bart "
          "model"));
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
  answer.dtype = query.dtype;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.layers, ResolveIndices(query.layers, config.num_hidden_layers, "layer", "layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.heads, ResolveIndices(query.heads, config.num_attention_heads, "head", "heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.tokens, EncodeInput(*answer.model, query.input, options, ""));
  const int64_t length = static_cast<int64_t>(answer.tokens.encoding.size());
  std::vector<WordSpan> spans;
  if (query.aggregate_words) {
    answer.words = WordsOf(answer.tokens, query.input);
    for (const Word& word : answer.words) spans.push_back(word.tokens);
  }
  // The units of the query and key axes: tokens, or words.
  const int64_t units = query.aggregate_words ? static_cast<int64_t>(spans.size()) : length;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.window, ResolveWindow(query.window, units));
  answer.top_k = query.top_k > 0;
  int64_t decoder_length = 0;
  if (query.decoder_text.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(DecoderText decoder,
                               DecoderInput(*answer.model, *query.decoder_text));
    answer.decoder_tokens = std::move(decoder.input);
    answer.decoder_labels = std::move(decoder.labels);
    decoder_length = static_cast<int64_t>(answer.decoder_tokens->encoding.size());
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer.decoder_layers,
        ResolveIndices(query.layers, config.decoder_layers, "decoder layer", "layers"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer.decoder_heads,
        ResolveIndices(query.heads, config.decoder_attention_heads, "decoder head", "heads"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        answer.decoder_window,
        ResolveWindow(query.decoder_window, decoder_length, "decoder_window"));
  }
  // The cross-attention's rectangle: decoder rows, encoder columns.
  const AttentionWindow cross_window = {answer.decoder_window.query_start,
                                        answer.decoder_window.query_end, answer.window.key_start,
                                        answer.window.key_end};

  const int64_t queries = answer.window.query_end - answer.window.query_start;
  const int64_t keys = answer.window.key_end - answer.window.key_start;
  if (delivery == Delivery::kUnary) {
    // Refuse before the forward pass: an over-cap answer would be computed only to be dropped.
    const auto columns = [&](int64_t keys) {
      return answer.top_k ? std::min<int64_t>(query.top_k, keys) : keys;
    };
    int64_t cells = static_cast<int64_t>(answer.layers.size()) *
                    HeadsOut(query.head_aggregation, answer.heads.size()) * queries * columns(keys);
    if (answer.decoder_tokens.has_value()) {
      const int64_t decoder_queries =
          answer.decoder_window.query_end - answer.decoder_window.query_start;
      cells += static_cast<int64_t>(answer.decoder_layers.size()) *
               HeadsOut(query.head_aggregation, answer.decoder_heads.size()) * decoder_queries *
               (columns(answer.decoder_window.key_end - answer.decoder_window.key_start) +
                columns(keys));
    }
    int64_t bytes = cells * BytesPerElement(answer.dtype);
    if (query.include_scores) bytes *= 2;
    if (answer.top_k) bytes += cells * BytesPerElement(OutputDType::kFloat32);
    if (query.rollout) bytes += queries * keys * BytesPerElement(answer.dtype);
    if (bytes > options_.max_response_bytes) {
      return TooLarge("GetAttention", bytes, options_.max_response_bytes, AttentionFixes(query));
    }
  }

  ForwardOptions forward;
  forward.output_attention_scores = query.include_scores;
  forward.output_logits = false;
  BatchOutput batch;
  if (answer.decoder_tokens.has_value()) {
    // One teacher-forced pass on this thread: the batcher's passes carry no decoder input.
    ComputeGate::Turn turn(gate_, check);
    ATTNSCOPE_RETURN_IF_ERROR(turn.Take("before the forward pass"));
    forward.on_layer_done = [&check](int64_t) { return check("between layers"); };
    ForwardInput input;
    input.input_ids = Row(answer.tokens.encoding.input_ids);
    input.decoder_input_ids = Row(answer.decoder_tokens->encoding.input_ids);
    ATTNSCOPE_ASSIGN_OR_RETURN(batch.forward, answer.model->model().Forward(input, forward));
    for (const int64_t layer : answer.decoder_layers) {
      ATTNSCOPE_RETURN_IF_ERROR(
          AppendSelected(StripPadding(batch.forward.decoder_attentions[layer], 0, decoder_length),
                         answer.decoder_heads, query.head_aggregation, answer.decoder_window,
                         query.top_k, &answer.decoder_attentions, &answer.decoder_top_k_indices));
      ATTNSCOPE_RETURN_IF_ERROR(AppendSelected(batch.forward.cross_attentions[layer].select(0, 0),
                                               answer.decoder_heads, query.head_aggregation,
                                               cross_window, query.top_k, &answer.cross_attentions,
                                               &answer.cross_top_k_indices));
    }
  } else {
    std::vector<Encoding> batch_input = {answer.tokens.encoding};
    ATTNSCOPE_ASSIGN_OR_RETURN(batch,
                               batcher_.Run(*answer.model, std::move(batch_input), forward, check));
  }
  auto unit_attention = [&](const torch::Tensor& tokens) -> absl::StatusOr<torch::Tensor> {
    if (!query.aggregate_words) return tokens;
    return AggregateWords(tokens, spans);
  };
  for (const int64_t layer : answer.layers) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        const torch::Tensor full,
        unit_attention(StripPadding(batch.forward.attentions[layer], 0, length)));
    ATTNSCOPE_RETURN_IF_ERROR(AppendSelected(full, answer.heads, query.head_aggregation,
                                             answer.window, query.top_k, &answer.attentions,
                                             &answer.top_k_indices));
    if (query.include_scores) {
      ATTNSCOPE_ASSIGN_OR_RETURN(
          torch::Tensor scores,
          SelectHeads(StripPadding(batch.forward.attention_scores[layer], 0, length), answer.heads,
                      query.head_aggregation, answer.window));
      answer.scores.push_back(std::move(scores));
    }
  }
  if (query.rollout) {
    std::vector<torch::Tensor> all_layers;
    for (const torch::Tensor& layer : batch.forward.attentions) {
      all_layers.push_back(StripPadding(layer, 0, length));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor rollout, AttentionRollout(all_layers));
    ATTNSCOPE_ASSIGN_OR_RETURN(rollout, unit_attention(rollout.unsqueeze(0)));
    answer.rollout = rollout.squeeze(0)
                         .narrow(0, answer.window.query_start, queries)
                         .narrow(1, answer.window.key_start, keys);
  }
  return answer;
}

absl::StatusOr<EncodeAnswer> RequestRunner::RunEncode(const EncodeQuery& query,
                                                      const CallCheck& check) const {
  EncodeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  if (query.inputs.empty()) {
    return absl::InvalidArgumentError("inputs: expected at least one input, got none; add one");
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckInputCount(query.inputs.size(), "inputs", options_.max_inputs_per_request));
  answer.dtype = query.dtype;
  if (query.normalize && !query.pooling.has_value()) {
    return absl::InvalidArgumentError(
        "normalize: L2 normalisation applies to the pooled vector, but pooling is none; set "
        "`pooling` to POOLING_CLS or POOLING_MEAN, or leave `normalize` false");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  std::vector<Encoding> encodings;
  for (size_t i = 0; i < query.inputs.size(); ++i) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.inputs[i], absl::StrCat("inputs[", i, "].")));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        EncodedText tokens,
        EncodeInput(*answer.model, query.inputs[i], options, absl::StrCat("inputs[", i, "].")));
    encodings.push_back(tokens.encoding);
    answer.results.emplace_back().tokens = std::move(tokens);
  }
  // Refuse before the forward pass, as GetAttention does: the tensors' size is known from the
  // token counts, and an over-cap answer would hold the forward pass only to be dropped.
  const ModelConfig& config = answer.model->config();
  int64_t tokens = 0;
  for (const Encoding& encoding : encodings) tokens += static_cast<int64_t>(encoding.size());
  ATTNSCOPE_RETURN_IF_ERROR(CheckWork("Encode", tokens,
                                      absl::StrCat(encodings.size(), " inputs, one pass each"),
                                      "send fewer or shorter inputs per call"));
  const int64_t states = query.output_hidden_states ? config.num_hidden_layers + 2 : 1;
  const int64_t pooled_vectors =
      query.pooling.has_value() ? static_cast<int64_t>(encodings.size()) : 0;
  const int64_t bytes =
      (tokens * states + pooled_vectors) * config.hidden_size * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    return TooLarge("Encode", bytes, options_.max_response_bytes, kEncodeFixes);
  }
  ForwardOptions forward;
  forward.output_attentions = false;
  forward.output_logits = false;
  forward.output_hidden_states = query.output_hidden_states;
  ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                             batcher_.Run(*answer.model, std::move(encodings), forward, check));
  torch::Tensor pooled;
  if (query.pooling.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(pooled, PoolHiddenStates(batch.forward.last_hidden_state,
                                                        batch.attention_mask, *query.pooling));
    if (query.normalize) {
      ATTNSCOPE_ASSIGN_OR_RETURN(pooled, L2Normalize(pooled));
    }
  }
  for (size_t b = 0; b < answer.results.size(); ++b) {
    EncodedInput& result = answer.results[b];
    const int64_t length = static_cast<int64_t>(result.tokens.encoding.size());
    result.last_hidden_state = batch.forward.last_hidden_state[b].narrow(0, 0, length);
    if (query.output_hidden_states) {
      for (const torch::Tensor& hidden : batch.forward.hidden_states) {
        result.hidden_states.push_back(hidden[b].narrow(0, 0, length));
      }
    }
    if (pooled.defined()) result.pooled = pooled[b];
  }
  return answer;
}

absl::StatusOr<CrossAttentionAnswer> RequestRunner::RunCrossAttention(
    const CrossAttentionQuery& query, const CallCheck& check) const {
  CrossAttentionAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const LoadedModel& model = *answer.model;
  const ModelConfig& config = model.config();
  // Decoder-only models see the document first so that the query, last, can attend to it.
  const bool causal = config.architecture == Architecture::kLlama;
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(query.query, "query"));
  if (query.documents.empty()) {
    return absl::InvalidArgumentError(
        "documents: expected at least one document, got none; add `documents`");
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckInputCount(query.documents.size(), "documents", options_.max_inputs_per_request));
  if (causal && query.include_document_to_query) {
    return absl::InvalidArgumentError(absl::StrCat(
        "include_document_to_query: model '", model.name(),
        "' is causal, so the document (first) never attends to the query (after it); leave "
        "`include_document_to_query` false or use an encoder model"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckScoredWithSpecialTokens(model, query.tokenization));
  answer.dtype = query.dtype;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.layers, ResolveIndices(query.layers, config.num_hidden_layers, "layer", "layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.heads, ResolveIndices(query.heads, config.num_attention_heads, "head", "heads"));

  const int64_t query_sequence = causal ? 1 : 0;
  // The query is tokenized once and paired with each document.
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kLongestFirst));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TokenizedText query_tokens, model.Tokenize(query.query));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(query_tokens, "query"));
  std::vector<Encoding> encodings;
  int64_t cells = 0;
  for (size_t i = 0; i < query.documents.size(); ++i) {
    const std::string& document = query.documents[i];
    const std::string field = absl::StrCat("documents[", i, "]");
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(document, field));
    const Clock::time_point start = Clock::now();
    ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText document_tokens, model.Tokenize(document));
    ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(document_tokens, field));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        Encoding encoding, causal
                               ? model.Assemble(std::move(document_tokens), query_tokens, options)
                               : model.Assemble(query_tokens, std::move(document_tokens), options));
    if (observer_ != nullptr) {
      observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding.size()));
    }
    EncodedText tokens;
    tokens.original_texts = causal ? OriginalTexts(encoding, document, query.query)
                                   : OriginalTexts(encoding, query.query, document);
    tokens.encoding = std::move(encoding);
    DocumentAnswer& result = answer.documents.emplace_back();
    result.query_positions = PositionsOfSequence(tokens.encoding.sequence_ids, query_sequence);
    result.document_positions =
        PositionsOfSequence(tokens.encoding.sequence_ids, 1 - query_sequence);
    if (result.query_positions.empty() || result.document_positions.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": expected query and document tokens after truncation, got ",
          result.query_positions.size(), " query and ", result.document_positions.size(),
          " document tokens; raise `tokenization.max_length` or shorten the query"));
    }
    cells += static_cast<int64_t>(result.query_positions.size() * result.document_positions.size());
    encodings.push_back(tokens.encoding);
    result.tokens = std::move(tokens);
  }
  int64_t token_passes = 0;
  for (const Encoding& encoding : encodings) token_passes += static_cast<int64_t>(encoding.size());
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckWork("CrossAttention",
                token_passes, absl::StrCat(encodings.size(), " documents, one pass each"),
                "send fewer or shorter documents per call"));
  // Refuse before the forward pass: the blocks' size is known from the token counts.
  const int64_t blocks = static_cast<int64_t>(answer.layers.size()) *
                         HeadsOut(query.head_aggregation, answer.heads.size()) *
                         (query.include_document_to_query ? 2 : 1);
  const int64_t bytes = blocks * cells * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    return TooLarge("CrossAttention", bytes, options_.max_response_bytes, kCrossAttentionFixes);
  }

  ForwardOptions forward;
  forward.output_logits = model.model().has_classifier();
  ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                             batcher_.Run(model, std::move(encodings), forward, check));
  for (size_t b = 0; b < answer.documents.size(); ++b) {
    DocumentAnswer& result = answer.documents[b];
    const int64_t length = static_cast<int64_t>(result.tokens.encoding.size());
    for (const int64_t layer : answer.layers) {
      const torch::Tensor full = StripPadding(batch.forward.attentions[layer], b, length);
      ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor block, AttentionBlock(full, result.query_positions,
                                                                     result.document_positions));
      ATTNSCOPE_ASSIGN_OR_RETURN(block,
                                 SelectHeads(block, answer.heads, query.head_aggregation, {}));
      result.query_to_document.push_back(std::move(block));
      if (query.include_document_to_query) {
        ATTNSCOPE_ASSIGN_OR_RETURN(
            torch::Tensor reverse,
            AttentionBlock(full, result.document_positions, result.query_positions));
        ATTNSCOPE_ASSIGN_OR_RETURN(reverse,
                                   SelectHeads(reverse, answer.heads, query.head_aggregation, {}));
        result.document_to_query.push_back(std::move(reverse));
      }
    }
    if (batch.forward.logits.defined()) {
      const torch::Tensor logits = batch.forward.logits[b].contiguous();
      const float* values = logits.data_ptr<float>();
      result.logits.assign(values, values + logits.numel());
      if (!result.logits.empty()) result.relevance_score = result.logits.back();
    }
  }
  return answer;
}

absl::StatusOr<AttributeAnswer> RequestRunner::RunAttribute(const AttributeQuery& query,
                                                            const CallCheck& check) const {
  AttributeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const LoadedModel& model = *answer.model;
  const ModelConfig& config = model.config();
  if (config.architecture != Architecture::kBert) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", model.name(), "': token attributions support BERT cross-encoders only, got a ",
        config.architecture == Architecture::kLlama ? "decoder-only " : "",
        ArchitectureName(config.architecture),
        " model (next-token log-probabilities are not attributed yet); set `model` to a "
        "cross-encoder (ModelInfo.has_classifier)"));
  }
  if (!model.model().has_classifier()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.name(),
        "': expected a cross-encoder with a classifier head (BertForSequenceClassification) whose "
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
    const char* token = query.occlusion_token == OcclusionToken::kMask ? "[MASK]" : "[UNK]";
    options.occlusion_token_id = FindTokenId(model.tokenizer(), token, config.vocab_size);
    if (options.occlusion_token_id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "occlusion_token: expected a ", token, " token among the ", config.vocab_size,
          " token embeddings of model '", model.name(), "', got none; set `occlusion_token` to ",
          query.occlusion_token == OcclusionToken::kMask ? "OCCLUSION_TOKEN_UNK"
                                                         : "OCCLUSION_TOKEN_MASK",
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
  ComputeGate::Turn turn(gate_, check);
  options.on_batch_done = [&turn]() {
    turn.Leave();
    return turn.Take("after a batch of attribution passes");
  };

  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions text_options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.tokens, EncodeInput(model, query.input, text_options, ""));
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

  const AttributionInput input{Row(encoding.input_ids), Row(encoding.attention_mask),
                               Row(encoding.token_type_ids), Row(encoding.special_tokens_mask)};
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

// Prompt tokens before the first generated one that its text is decoded after: enough for a
// decoder to see the piece boundary before it.
constexpr size_t kDecodeContext = 5;

absl::StatusOr<GenerateSummary> RequestRunner::RunGenerate(
    const GenerateQuery& query, const CallCheck& check,
    const std::function<absl::Status(const GenerateHeader&)>& on_header,
    const std::function<absl::Status(const GenerateStep&)>& on_step) const {
  GenerateHeader header;
  ATTNSCOPE_ASSIGN_OR_RETURN(header.model, FindModel(query.model));
  const LoadedModel& model = *header.model;
  const ModelConfig& config = model.config();
  const bool seq2seq = config.is_encoder_decoder;
  if (!model.model().is_decoder() && !seq2seq) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.name(),
                     "': expected a decoder-only (llama) or encoder-decoder (marian, bart, t5) ",
                     "model to generate with, got an encoder-only ",
                     ArchitectureName(config.architecture), " model; set `model` to one of those"));
  }
  // An encoder-decoder writes from a source text, which must not be empty.
  if (!query.prompt.empty() || seq2seq) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(query.prompt, "prompt"));
  }
  header.method = query.generation.method;
  header.dtype = query.dtype;
  if (query.output_attentions) {
    // An encoder-decoder's tokens come with the decoder's cross-attention.
    ATTNSCOPE_ASSIGN_OR_RETURN(
        header.layers,
        ResolveIndices(query.layers, seq2seq ? config.decoder_layers : config.num_hidden_layers,
                       seq2seq ? "decoder layer" : "layer", "layers"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        header.heads,
        ResolveIndices(query.heads,
                       seq2seq ? config.decoder_attention_heads : config.num_attention_heads,
                       seq2seq ? "decoder head" : "head", "heads"));
  }
  const Clock::time_point start = Clock::now();
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText text, model.Tokenize(query.prompt));
  if (seq2seq) ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(text, "prompt"));
  const int64_t text_tokens = static_cast<int64_t>(text.size());
  const bool more_than = text.is_prefix;
  absl::StatusOr<Encoding> encoding = model.Assemble(std::move(text), std::nullopt, TextOptions());
  if (!encoding.ok()) {
    // Generate takes no truncation option: name the prompt and its fix instead.
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: expected at most ", model.max_tokens(),
        " tokens (the model's limit, special tokens included), got ", more_than ? "more than " : "",
        text_tokens, " tokens of text; shorten the prompt"));
  }
  if (observer_ != nullptr) {
    observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding->size()));
  }
  header.prompt_tokens.original_texts = OriginalTexts(*encoding, query.prompt, "");
  header.prompt_tokens.encoding = *std::move(encoding);
  const std::vector<int64_t>& prompt_ids = header.prompt_tokens.encoding.input_ids;

  GenerationOptions options = query.generation;
  options.eos_token_id = query.ignore_eos ? -1 : config.eos_token_id;
  options.output_attentions = query.output_attentions;
  // Taken for each step, given to the next waiting call between steps, and left while a step's
  // token is handed on, which may wait for the client to read it.
  ComputeGate::Turn turn(gate_, check);
  options.check = [&turn]() {
    turn.Leave();
    return turn.Take("before a generation step");
  };
  // Every option is checked before the header goes out, so that a refusal is the whole answer.
  ATTNSCOPE_RETURN_IF_ERROR(CheckGenerationOptions(model.model(), prompt_ids, options));
  const int64_t beams =
      options.method == DecodingMethod::kBeamSearch ? options.num_beams : int64_t{1};
  const int64_t prompt_length = static_cast<int64_t>(prompt_ids.size());
  // An encoder-decoder's source is encoded once; a decoder-only model's prompt is in each beam.
  const int64_t token_passes = seq2seq ? prompt_length + beams * options.max_new_tokens
                                       : beams * (prompt_length + options.max_new_tokens);
  ATTNSCOPE_RETURN_IF_ERROR(CheckWork(
      "Generate", token_passes,
      absl::StrCat(beams, " beams over ", prompt_length, " prompt and ", options.max_new_tokens,
                   " new tokens"),
      "ask for fewer max_new_tokens or num_beams, or send a shorter prompt"));
  if (query.output_attentions) {
    // The last token's attention, over the longest context, is the largest message (an
    // encoder-decoder's is over the source, whatever the step).
    const int64_t context =
        seq2seq ? static_cast<int64_t>(prompt_ids.size())
                : static_cast<int64_t>(prompt_ids.size()) + options.max_new_tokens - 1;
    const int64_t bytes = static_cast<int64_t>(header.layers.size()) *
                          HeadsOut(query.head_aggregation, header.heads.size()) * context *
                          BytesPerElement(query.dtype);
    if (bytes > options_.max_response_bytes) {
      return TooLarge("Generate token", bytes, options_.max_response_bytes,
                      "request fewer layers or heads, a head_aggregation, dtype DTYPE_FLOAT16 or "
                      "fewer max_new_tokens");
    }
  }
  ATTNSCOPE_RETURN_IF_ERROR(on_header(header));

  // A token's text is what decoding a short run of tokens ending with it adds to decoding the
  // same run without it (text-generation-inference's incremental decoding): both decodes start at
  // the same token, so a piece's leading space and multi-piece characters come out as the
  // tokenizer's decoder writes them, and each step decodes a few tokens, not the whole sequence.
  // An encoder-decoder's output is in the target vocabulary and decodes on its own; its decoder
  // starts from decoder_start_token_id at position 0.
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<int64_t> ids = seq2seq ? std::vector<int64_t>() : prompt_ids;
  const int64_t first_position = seq2seq ? 1 : static_cast<int64_t>(prompt_ids.size());
  size_t prefix_offset = ids.size() > kDecodeContext ? ids.size() - kDecodeContext : 0;
  size_t read_offset = ids.size();
  std::string text_so_far;
  int64_t index = 0;
  auto handle = [&](const GeneratedToken& token) -> absl::Status {
    GenerateStep step;
    step.index = index++;
    step.position = first_position + step.index;
    step.id = token.id;
    step.token = tokenizer.IdToToken(token.id);
    step.logprob = token.logprob;
    ids.push_back(token.id);
    auto decode = [&](size_t begin, size_t end) {
      return tokenizer.Decode(std::vector<int64_t>(ids.begin() + begin, ids.begin() + end),
                              /*skip_special_tokens=*/true);
    };
    const std::string before = decode(prefix_offset, read_offset);
    const std::string now = decode(prefix_offset, ids.size());
    constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: an incomplete character
    if (now.size() > before.size() && absl::StartsWith(now, before) &&
        !absl::EndsWith(now, kReplacement)) {
      step.text = now.substr(before.size());
      text_so_far += step.text;
      prefix_offset = read_offset;
      read_offset = ids.size();
    }
    if (token.attention.defined()) {
      std::vector<torch::Tensor> layers;
      for (const int64_t layer : header.layers) {
        // [head, context] as one query row: [head, 1, context].
        ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor selected,
                                   SelectHeads(token.attention[layer].unsqueeze(1), header.heads,
                                               query.head_aggregation, AttentionWindow()));
        layers.push_back(selected.squeeze(1));
      }
      step.attention = torch::stack(layers);
    }
    turn.Leave();
    return on_step(step);
  };
  ATTNSCOPE_ASSIGN_OR_RETURN(const GenerationResult result,
                             Generate(model.model(), prompt_ids, options, handle));
  GenerateSummary summary;
  summary.finish_reason = result.finish_reason;
  summary.score = result.score;
  for (const GeneratedToken& token : result.tokens) summary.ids.push_back(token.id);
  // The streamed texts joined: a character the last tokens left incomplete is not in it.
  summary.text = std::move(text_so_far);
  return summary;
}

absl::StatusOr<ParameterListAnswer> RequestRunner::ListParameters(const std::string& model) const {
  ParameterListAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(model));
  const Checkpoint* checkpoint = answer.model->model().checkpoint();
  if (checkpoint == nullptr) return answer;
  for (const std::string& name : checkpoint->Names()) {
    answer.parameters.push_back({name, checkpoint->Get(name).sizes().vec()});
  }
  return answer;
}

absl::StatusOr<ParameterAnswer> RequestRunner::GetParameter(const ParameterQuery& query) const {
  ParameterAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const Checkpoint* checkpoint = answer.model->model().checkpoint();
  if (checkpoint == nullptr || !checkpoint->Contains(query.name)) {
    // Names that share the last part of the requested one, e.g. "position_embeddings.weight"
    // finds "bert.embeddings.position_embeddings.weight".
    std::vector<std::string> similar;
    const std::string tail = query.name.substr(query.name.find('.') + 1);
    if (checkpoint != nullptr) {
      for (const std::string& name : checkpoint->Names()) {
        if (!tail.empty() && name.find(tail) != std::string::npos) similar.push_back(name);
      }
    }
    return absl::NotFoundError(absl::StrCat(
        "parameter '", query.name.substr(0, 200), "' of model '", answer.model->name(),
        "': not in its checkpoint; ",
        similar.empty() ? "ListParameters lists the names"
                        : absl::StrCat("did you mean ", absl::StrJoin(similar, ", "), "?")));
  }
  answer.name = query.name;
  answer.dtype = query.dtype;
  const torch::Tensor tensor = checkpoint->Get(query.name);
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  const int64_t row_end = query.row_end == 0 ? rows : query.row_end;
  if (query.row_start < 0 || query.row_start >= row_end || row_end > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", query.row_start, ", ", query.row_end, ") of parameter '", query.name,
                     "': expected 0 <= row_start < row_end <= ", rows,
                     " (its first dimension; an end of 0 means the last row); fix `row_start` / "
                     "`row_end`"));
  }
  answer.row_start = query.row_start;
  answer.tensor =
      tensor.dim() == 0 ? tensor : tensor.narrow(0, query.row_start, row_end - query.row_start);
  const int64_t bytes = answer.tensor.numel() * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    std::string fixes = "ask for fewer rows (`row_start`, `row_end`)";
    if (answer.dtype == OutputDType::kFloat32) absl::StrAppend(&fixes, " or dtype DTYPE_FLOAT16");
    return TooLarge("GetParameter", bytes, options_.max_response_bytes, fixes);
  }
  return answer;
}

absl::StatusOr<TrainingRecordAnswer> RequestRunner::GetTrainingRecord(
    const std::string& model_name) const {
  TrainingRecordAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(model_name));
  const std::string path = JoinPath(answer.model->model_dir(), "training_record.json");
  if (!FileExists(path)) {
    return absl::NotFoundError(absl::StrCat("model '", answer.model->name(),
                                            "' has no training record (", path,
                                            "); only models trained by attnscope-train keep one"));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.record_json, ReadFileToString(path));
  const nlohmann::json json =
      nlohmann::json::parse(answer.record_json, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training record '", path, "': expected a JSON object as attnscope-train writes it"));
  }
  std::vector<const nlohmann::json*> steps;
  auto add = [&steps](const nlohmann::json& entry) {
    if (entry.is_object() && entry.contains("step") && entry["step"].is_number()) {
      steps.push_back(&entry);
    }
  };
  if (json.contains("history") && json["history"].is_array()) {
    for (const nlohmann::json& entry : json["history"]) add(entry);
  } else {
    if (json.contains("first_steps") && json["first_steps"].is_array()) {
      for (const nlohmann::json& entry : json["first_steps"]) add(entry);
    }
    if (json.contains("last_window")) add(json["last_window"]);
  }
  for (const nlohmann::json* entry : steps) {
    TrainingPoint& point = answer.points.emplace_back();
    point.step = (*entry)["step"].get<int64_t>();
    for (const auto& item : entry->items()) {
      if (item.key() != "step" && item.value().is_number()) {
        point.values.emplace_back(item.key(), item.value().get<double>());
      }
    }
  }
  return answer;
}

}  // namespace attnscope
