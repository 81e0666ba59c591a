#include "server/attention_service.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/attention_ops.h"
#include "models/status_macros.h"
#include "models/unicode.h"
#include "server/tensor_codec.h"

namespace attnscope::server {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const std::vector<std::string> kLayerDims = {"layer", "head", "query_token", "key_token"};
const std::vector<std::string> kTopKDims = {"layer", "head", "query_token", "k"};

// The dimension names of one layer's slice: `dims` without "layer".
std::vector<std::string> WithoutLayer(const std::vector<std::string>& dims) {
  return {dims.begin() + 1, dims.end()};
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

// Honoured between layers: the engine calls this after each one.
absl::Status CheckCall(grpc::ServerContext* context, absl::string_view when) {
  const bool past_deadline = std::chrono::system_clock::now() > context->deadline();
  if (past_deadline) {
    return absl::DeadlineExceededError(absl::StrCat(
        "deadline exceeded ", when, "; give the call a longer deadline or send fewer tokens"));
  }
  if (context->IsCancelled()) {
    return absl::CancelledError(absl::StrCat("call cancelled by the client ", when));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::DType> CheckFloatDType(v1::DType dtype) {
  if (dtype == v1::DTYPE_INT32 || !v1::DType_IsValid(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ",
                     v1::DType_Name(dtype).empty() ? absl::StrCat(static_cast<int>(dtype))
                                                   : v1::DType_Name(dtype),
                     ": expected DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16; fix `dtype`"));
  }
  return ResolveDType(dtype);
}

absl::StatusOr<HeadAggregation> ToAggregation(v1::HeadAggregation aggregation) {
  switch (aggregation) {
    case v1::HEAD_AGGREGATION_UNSPECIFIED:
    case v1::HEAD_AGGREGATION_NONE:
      return HeadAggregation::kNone;
    case v1::HEAD_AGGREGATION_MEAN:
      return HeadAggregation::kMean;
    case v1::HEAD_AGGREGATION_MAX:
      return HeadAggregation::kMax;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "head_aggregation ", static_cast<int>(aggregation),
          ": expected HEAD_AGGREGATION_NONE, HEAD_AGGREGATION_MEAN or HEAD_AGGREGATION_MAX"));
  }
}

absl::StatusOr<Truncation> ToTruncation(v1::Truncation truncation, Truncation unspecified) {
  switch (truncation) {
    case v1::TRUNCATION_UNSPECIFIED:
      return unspecified;
    case v1::TRUNCATION_NONE:
      return Truncation::kNone;
    case v1::TRUNCATION_LONGEST_FIRST:
      return Truncation::kLongestFirst;
    case v1::TRUNCATION_ONLY_FIRST:
      return Truncation::kOnlyFirst;
    case v1::TRUNCATION_ONLY_SECOND:
      return Truncation::kOnlySecond;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenization.truncation ", static_cast<int>(truncation),
          ": expected one of TRUNCATION_NONE, TRUNCATION_LONGEST_FIRST, TRUNCATION_ONLY_FIRST, "
          "TRUNCATION_ONLY_SECOND"));
  }
}

void FillTokens(const Encoding& encoding, v1::Tokens* tokens) {
  for (size_t i = 0; i < encoding.size(); ++i) {
    tokens->add_tokens(encoding.tokens[i]);
    tokens->add_input_ids(encoding.input_ids[i]);
    tokens->add_token_type_ids(encoding.token_type_ids[i]);
    tokens->add_special_tokens_mask(static_cast<int32_t>(encoding.special_tokens_mask[i]));
    v1::Offset* offset = tokens->add_offsets();
    offset->set_start(encoding.offsets[i].start);
    offset->set_end(encoding.offsets[i].end);
    v1::Offset* byte_offset = tokens->add_byte_offsets();
    byte_offset->set_start(encoding.byte_offsets[i].start);
    byte_offset->set_end(encoding.byte_offsets[i].end);
    tokens->add_word_ids(encoding.word_ids[i]);
    tokens->add_sequence_ids(static_cast<int32_t>(encoding.sequence_ids[i]));
  }
}

void FillModelInfo(const LoadedModel& model, v1::ModelInfo* info) {
  const ModelConfig& config = model.config();
  info->set_name(model.name());
  info->set_architecture(std::string(ArchitectureName(config.architecture)));
  for (const std::string& name : config.architectures) info->add_architectures(name);
  info->set_num_hidden_layers(static_cast<int32_t>(config.num_hidden_layers));
  info->set_num_attention_heads(static_cast<int32_t>(config.num_attention_heads));
  info->set_num_key_value_heads(static_cast<int32_t>(config.num_key_value_heads));
  info->set_hidden_size(static_cast<int32_t>(config.hidden_size));
  info->set_head_dim(static_cast<int32_t>(config.head_dim));
  info->set_vocab_size(static_cast<int32_t>(config.vocab_size));
  info->set_max_position_embeddings(static_cast<int32_t>(config.max_position_embeddings));
  info->set_tokenizer_kind(model.tokenizer().kind() == TokenizerKind::kWordPiece ? "wordpiece"
                                                                                 : "sentencepiece");
  info->set_has_classifier(model.model().has_classifier());
  if (model.model().has_classifier()) {
    for (const auto& [index, label] : config.id2label) info->add_labels(label);
  }
  info->set_weights_checksum(model.weights_checksum());
  info->set_is_causal(config.architecture == Architecture::kLlama);
}

std::string TooLarge(absl::string_view rpc, int64_t bytes, int64_t cap, absl::string_view fixes) {
  return absl::StrCat(rpc, " response would be ", bytes, " bytes, over this server's cap of ", cap,
                      " bytes (--max_response_bytes); ", fixes);
}

// InvalidArgument naming `field` when `text` gives no tokens of its own (whitespace, or only
// characters the tokenizer drops).
absl::Status CheckYieldsTokens(const LoadedModel& model, const std::string& text,
                               absl::string_view field) {
  EncodeOptions alone;
  alone.add_special_tokens = false;
  absl::StatusOr<Encoding> tokens = model.tokenizer().Encode(text, alone);
  if (!tokens.ok() || tokens->size() > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field,
                   ": expected text that yields at least one token, got none (it is only "
                   "whitespace or characters the tokenizer drops); send text with words in it"));
}

// The fixes for an over-cap attention answer that would change something for `request`.
std::string AttentionFixes(const v1::GetAttentionRequest& request) {
  std::vector<std::string> fixes = {"use StreamAttention", "request fewer layers or heads",
                                    "a smaller window"};
  if (request.dtype() != v1::DTYPE_FLOAT16 && request.dtype() != v1::DTYPE_BFLOAT16) {
    fixes.push_back("dtype DTYPE_FLOAT16");
  }
  if (request.top_k() <= 0) fixes.push_back("top_k");
  if (request.include_scores()) fixes.push_back("leave include_scores off");
  return absl::StrJoin(fixes, ", ");
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  absl::string_view message = status.message();
  std::string text(message.substr(0, kMaxErrorMessageBytes));
  if (message.size() > kMaxErrorMessageBytes) {
    // Cut at a character boundary, so the message stays valid UTF-8.
    while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) {
      text.pop_back();
    }
    if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
    absl::StrAppend(&text, "... (message cut from ", message.size(), " bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::move(text));
}

// One GetAttention / StreamAttention answer before encoding. Tensors are per selected layer, in
// request order; most are views of the engine's output (no copy yet).
struct AttentionService::Attention {
  const LoadedModel* model = nullptr;
  Encoding encoding;
  std::vector<int64_t> layers;
  std::vector<int64_t> heads;
  AttentionWindow window;
  v1::DType dtype = v1::DTYPE_FLOAT32;
  bool top_k = false;
  std::vector<torch::Tensor> attentions;  // [head, Q, K] or top-k values [head, Q, k]
  std::vector<torch::Tensor> scores;      // [head, Q, K], when include_scores
  std::vector<torch::Tensor> indices;     // int32 [head, Q, k], when top_k
  torch::Tensor rollout;                  // [Q, K], when rollout

  const std::vector<std::string>& dims() const { return top_k ? kTopKDims : kLayerDims; }
  std::vector<int64_t> shape() const {
    std::vector<int64_t> shape = {static_cast<int64_t>(layers.size())};
    for (const int64_t dim : attentions.front().sizes()) shape.push_back(dim);
    return shape;
  }
  template <typename Message>
  void FillHeader(Message* message) const {
    message->set_model(model->name());
    FillTokens(encoding, message->mutable_tokens());
    for (const int64_t layer : layers) message->add_layers(static_cast<int32_t>(layer));
    for (const int64_t head : heads) message->add_heads(static_cast<int32_t>(head));
    message->set_query_start(static_cast<int32_t>(window.query_start));
    message->set_key_start(static_cast<int32_t>(window.key_start));
  }
};

void AttentionService::SetModels(std::vector<std::unique_ptr<LoadedModel>> models) {
  models_ = std::move(models);
  ready_.store(true);
}

template <typename Handler>
grpc::Status AttentionService::Serve(const char* rpc, const google::protobuf::Message* response,
                                     absl::string_view fixes, Handler&& handler) {
  const Clock::time_point start = Clock::now();
  metrics_->inflight().Increment();
  const int inflight = inflight_.fetch_add(1) + 1;
  absl::Status status;
  if (draining_.load()) {
    status = absl::UnavailableError("the server is shutting down; retry on another replica");
  } else if (!ready_.load()) {
    status = absl::UnavailableError(
        "the server is still loading models; retry when grpc.health.v1 reports SERVING");
  } else if (options_.max_concurrent_requests > 0 && inflight > options_.max_concurrent_requests) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("the server is at its limit of ", options_.max_concurrent_requests,
                     " concurrent requests (--max_concurrent_requests); retry with backoff"));
  } else {
    try {
      status = handler();
    } catch (const std::exception& error) {
      status = absl::InternalError(absl::StrCat(rpc, " failed (a bug): ", error.what()));
    }
  }
  if (status.ok() && response != nullptr) {
    const int64_t bytes = static_cast<int64_t>(response->ByteSizeLong());
    if (bytes > options_.max_response_bytes) {
      status =
          absl::ResourceExhaustedError(TooLarge(rpc, bytes, options_.max_response_bytes, fixes));
    } else {
      metrics_->RecordResponseBytes(bytes);
    }
  }
  inflight_.fetch_sub(1);
  metrics_->inflight().Decrement();
  metrics_->RecordRequest(rpc, absl::StatusCodeToString(status.code()), SecondsSince(start));
  return ToGrpcStatus(status);
}

absl::StatusOr<const LoadedModel*> AttentionService::FindModel(const std::string& name) const {
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

absl::StatusOr<Encoding> AttentionService::EncodeText(const LoadedModel& model,
                                                      const std::string& text,
                                                      const std::string* text_pair,
                                                      const v1::TokenizationOptions& options,
                                                      Truncation default_truncation) const {
  TextOptions text_options;
  ATTNSCOPE_ASSIGN_OR_RETURN(text_options.truncation,
                             ToTruncation(options.truncation(), default_truncation));
  if (options.max_length() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenization.max_length ", options.max_length(),
                     ": expected 0 (the model's limit) or a positive count of tokens, got ",
                     options.max_length(), "; fix `tokenization.max_length`"));
  }
  if (text_options.truncation == Truncation::kNone && options.max_length() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenization.max_length ", options.max_length(),
        ": only applies with truncation, but tokenization.truncation is none; set a truncation "
        "strategy (e.g. TRUNCATION_LONGEST_FIRST) or leave max_length 0"));
  }
  text_options.max_length = options.max_length();
  text_options.add_special_tokens = !options.skip_special_tokens();
  const Clock::time_point start = Clock::now();
  ATTNSCOPE_ASSIGN_OR_RETURN(
      Encoding encoding,
      model.Encode(
          text, text_pair == nullptr ? std::nullopt : std::optional<absl::string_view>(*text_pair),
          text_options));
  metrics_->RecordTokenization(SecondsSince(start), static_cast<int64_t>(encoding.size()));
  return encoding;
}

absl::StatusOr<BatchOutput> AttentionService::Run(const LoadedModel& model,
                                                  std::vector<Encoding> encodings,
                                                  ForwardOptions options,
                                                  grpc::ServerContext* context) const {
  options.on_layer_done = [context](int64_t layer) {
    return CheckCall(context, absl::StrCat("after layer ", layer));
  };
  absl::StatusOr<BatchOutput> output;
  inference_thread_.Run([&] {
    // Checked when the call's turn comes, not before it queues: it may expire while it waits.
    if (absl::Status status = CheckCall(context, "before the forward pass"); !status.ok()) {
      output = status;
      return;
    }
    const Clock::time_point start = Clock::now();
    output = model.Run(std::move(encodings), std::move(options));
    if (output.ok()) metrics_->RecordInference(model.name(), SecondsSince(start));
  });
  return output;
}

absl::StatusOr<AttentionService::Attention> AttentionService::ComputeAttention(
    const v1::GetAttentionRequest& request, grpc::ServerContext* context, bool unary) const {
  Attention result;
  ATTNSCOPE_ASSIGN_OR_RETURN(result.model, FindModel(request.model()));
  const ModelConfig& config = result.model->config();
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(request.text(), "text"));
  if (request.has_text_pair())
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(request.text_pair(), "text_pair"));
  if (request.top_k() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k ", request.top_k(), ": expected 0 (dense attention) or a positive count, got ",
        request.top_k(), "; fix `top_k`"));
  }
  if (request.top_k() > 0 && request.include_scores()) {
    return absl::InvalidArgumentError(
        "include_scores with top_k: scores are returned dense only; drop `include_scores` or set "
        "`top_k` to 0");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(result.dtype, CheckFloatDType(request.dtype()));
  ATTNSCOPE_ASSIGN_OR_RETURN(const HeadAggregation aggregation,
                             ToAggregation(request.head_aggregation()));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      result.layers, ResolveIndices(request.layers(), config.num_hidden_layers, "layer", "layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      result.heads, ResolveIndices(request.heads(), config.num_attention_heads, "head", "heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(result.encoding,
                             EncodeText(*result.model, request.text(),
                                        request.has_text_pair() ? &request.text_pair() : nullptr,
                                        request.tokenization(), Truncation::kNone));
  const int64_t length = static_cast<int64_t>(result.encoding.size());
  const v1::Window& window = request.window();
  ATTNSCOPE_ASSIGN_OR_RETURN(result.window, ResolveWindow({window.query_start(), window.query_end(),
                                                           window.key_start(), window.key_end()},
                                                          length));
  result.top_k = request.top_k() > 0;

  const int64_t queries = result.window.query_end - result.window.query_start;
  const int64_t keys = result.window.key_end - result.window.key_start;
  if (unary) {
    // Refuse before the forward pass: an over-cap answer would be computed only to be dropped.
    const int64_t heads =
        aggregation == HeadAggregation::kNone ? static_cast<int64_t>(result.heads.size()) : 1;
    const int64_t columns = result.top_k ? std::min<int64_t>(request.top_k(), keys) : keys;
    const int64_t cells = static_cast<int64_t>(result.layers.size()) * heads * queries * columns;
    int64_t bytes = cells * BytesPerElement(result.dtype);
    if (request.include_scores()) bytes *= 2;
    if (result.top_k) bytes += cells * BytesPerElement(v1::DTYPE_INT32);
    if (request.rollout()) bytes += queries * keys * BytesPerElement(result.dtype);
    if (bytes > options_.max_response_bytes) {
      return absl::ResourceExhaustedError(
          TooLarge("GetAttention", bytes, options_.max_response_bytes, AttentionFixes(request)));
    }
  }

  ForwardOptions forward;
  forward.output_attention_scores = request.include_scores();
  forward.output_logits = false;
  std::vector<Encoding> batch_input;
  batch_input.push_back(result.encoding);
  ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                             Run(*result.model, std::move(batch_input), forward, context));
  for (const int64_t layer : result.layers) {
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor selected,
                               SelectHeads(StripPadding(batch.forward.attentions[layer], 0, length),
                                           result.heads, aggregation, result.window));
    if (result.top_k) {
      ATTNSCOPE_ASSIGN_OR_RETURN(RowTopK top,
                                 TopKPerRow(selected, request.top_k(), result.window.key_start));
      result.attentions.push_back(std::move(top.values));
      result.indices.push_back(std::move(top.indices));
    } else {
      result.attentions.push_back(std::move(selected));
    }
    if (request.include_scores()) {
      ATTNSCOPE_ASSIGN_OR_RETURN(
          torch::Tensor scores,
          SelectHeads(StripPadding(batch.forward.attention_scores[layer], 0, length), result.heads,
                      aggregation, result.window));
      result.scores.push_back(std::move(scores));
    }
  }
  if (request.rollout()) {
    std::vector<torch::Tensor> all_layers;
    for (const torch::Tensor& layer : batch.forward.attentions) {
      all_layers.push_back(StripPadding(layer, 0, length));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor rollout, AttentionRollout(all_layers));
    result.rollout = rollout.narrow(0, result.window.query_start, queries)
                         .narrow(1, result.window.key_start, keys);
  }
  return result;
}

grpc::Status AttentionService::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                          v1::ListModelsResponse* response) {
  return Serve("ListModels", response, "", [&]() -> absl::Status {
    for (const auto& model : models_) FillModelInfo(*model, response->add_models());
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::GetModelInfo(grpc::ServerContext*,
                                            const v1::GetModelInfoRequest* request,
                                            v1::ModelInfo* response) {
  return Serve("GetModelInfo", response, "", [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const LoadedModel* model, FindModel(request->model()));
    FillModelInfo(*model, response);
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  return Serve("Tokenize", response, "send a shorter text", [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const LoadedModel* model, FindModel(request->model()));
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(request->text(), "text"));
    if (request->has_text_pair()) {
      ATTNSCOPE_RETURN_IF_ERROR(CheckText(request->text_pair(), "text_pair"));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(
        Encoding encoding, EncodeText(*model, request->text(),
                                      request->has_text_pair() ? &request->text_pair() : nullptr,
                                      request->tokenization(), Truncation::kNone));
    response->set_model(model->name());
    FillTokens(encoding, response->mutable_tokens());
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::GetAttention(grpc::ServerContext* context,
                                            const v1::GetAttentionRequest* request,
                                            v1::GetAttentionResponse* response) {
  return Serve("GetAttention", response, AttentionFixes(*request), [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(Attention attention,
                               ComputeAttention(*request, context, /*unary=*/true));
    attention.FillHeader(response);
    ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(attention.attentions, attention.dims(), attention.dtype,
                                            response->mutable_attentions()));
    if (!attention.scores.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(
          EncodeStacked(attention.scores, kLayerDims, attention.dtype, response->mutable_scores()));
    }
    if (attention.top_k) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(attention.indices, kTopKDims, v1::DTYPE_INT32,
                                              response->mutable_top_k_indices()));
    }
    if (attention.rollout.defined()) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(attention.rollout, {"query_token", "key_token"},
                                             attention.dtype, response->mutable_rollout()));
    }
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::StreamAttention(
    grpc::ServerContext* context, const v1::GetAttentionRequest* request,
    grpc::ServerWriter<v1::StreamAttentionResponse>* writer) {
  return Serve("StreamAttention", nullptr, "", [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(Attention attention,
                               ComputeAttention(*request, context, /*unary=*/false));
    int64_t bytes = 0;
    auto write = [&](const v1::StreamAttentionResponse& message) -> absl::Status {
      bytes += static_cast<int64_t>(message.ByteSizeLong());
      if (!writer->Write(message)) {
        return absl::CancelledError("the client closed the stream before it was complete");
      }
      return absl::OkStatus();
    };
    v1::StreamAttentionResponse message;
    v1::StreamAttentionHeader* header = message.mutable_header();
    attention.FillHeader(header);
    for (const int64_t dim : attention.shape()) header->add_attentions_shape(dim);
    for (const std::string& name : attention.dims()) header->add_dim_names(name);
    header->set_dtype(attention.dtype);
    ATTNSCOPE_RETURN_IF_ERROR(write(message));
    for (size_t i = 0; i < attention.layers.size(); ++i) {
      message.Clear();
      v1::StreamAttentionLayer* layer = message.mutable_layer();
      layer->set_layer(static_cast<int32_t>(attention.layers[i]));
      ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(attention.attentions[i],
                                             WithoutLayer(attention.dims()), attention.dtype,
                                             layer->mutable_attentions()));
      if (!attention.scores.empty()) {
        ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(attention.scores[i], WithoutLayer(kLayerDims),
                                               attention.dtype, layer->mutable_scores()));
      }
      if (attention.top_k) {
        ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(attention.indices[i], WithoutLayer(kTopKDims),
                                               v1::DTYPE_INT32, layer->mutable_top_k_indices()));
      }
      ATTNSCOPE_RETURN_IF_ERROR(write(message));
    }
    if (attention.rollout.defined()) {
      message.Clear();
      ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(attention.rollout, {"query_token", "key_token"},
                                             attention.dtype, message.mutable_rollout()));
      ATTNSCOPE_RETURN_IF_ERROR(write(message));
    }
    metrics_->RecordResponseBytes(bytes);
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::Encode(grpc::ServerContext* context,
                                      const v1::EncodeRequest* request,
                                      v1::EncodeResponse* response) {
  constexpr absl::string_view kFixes =
      "send fewer inputs per call, leave output_hidden_states off, or use dtype DTYPE_FLOAT16";
  return Serve("Encode", response, kFixes, [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const LoadedModel* model, FindModel(request->model()));
    if (request->inputs().empty()) {
      return absl::InvalidArgumentError("inputs: expected at least one input, got none; add one");
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(const v1::DType dtype, CheckFloatDType(request->dtype()));
    if (!v1::Pooling_IsValid(request->pooling())) {
      return absl::InvalidArgumentError(
          absl::StrCat("pooling ", static_cast<int>(request->pooling()),
                       ": expected POOLING_NONE, POOLING_CLS or POOLING_MEAN"));
    }
    const bool pool =
        request->pooling() == v1::POOLING_CLS || request->pooling() == v1::POOLING_MEAN;
    if (request->normalize() && !pool) {
      return absl::InvalidArgumentError(
          "normalize: L2 normalisation applies to the pooled vector, but pooling is none; set "
          "`pooling` to POOLING_CLS or POOLING_MEAN, or leave `normalize` false");
    }
    std::vector<Encoding> encodings;
    for (int i = 0; i < request->inputs_size(); ++i) {
      const v1::EncodeInput& input = request->inputs(i);
      ATTNSCOPE_RETURN_IF_ERROR(CheckText(input.text(), absl::StrCat("inputs[", i, "].text")));
      if (input.has_text_pair()) {
        ATTNSCOPE_RETURN_IF_ERROR(
            CheckText(input.text_pair(), absl::StrCat("inputs[", i, "].text_pair")));
      }
      ATTNSCOPE_ASSIGN_OR_RETURN(
          Encoding encoding,
          EncodeText(*model, input.text(), input.has_text_pair() ? &input.text_pair() : nullptr,
                     request->tokenization(), Truncation::kNone));
      encodings.push_back(std::move(encoding));
    }
    // Refuse before the forward pass, as GetAttention does: the tensors' size is known from the
    // token counts, and an over-cap answer would hold the inference thread only to be dropped.
    const ModelConfig& config = model->config();
    int64_t tokens = 0;
    for (const Encoding& encoding : encodings) tokens += static_cast<int64_t>(encoding.size());
    const int64_t states = request->output_hidden_states() ? config.num_hidden_layers + 2 : 1;
    const int64_t pooled_vectors = pool ? static_cast<int64_t>(encodings.size()) : 0;
    const int64_t bytes =
        (tokens * states + pooled_vectors) * config.hidden_size * BytesPerElement(dtype);
    if (bytes > options_.max_response_bytes) {
      return absl::ResourceExhaustedError(
          TooLarge("Encode", bytes, options_.max_response_bytes, kFixes));
    }
    ForwardOptions forward;
    forward.output_attentions = false;
    forward.output_logits = false;
    forward.output_hidden_states = request->output_hidden_states();
    ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                               Run(*model, std::move(encodings), forward, context));
    torch::Tensor pooled;
    if (pool) {
      ATTNSCOPE_ASSIGN_OR_RETURN(
          pooled,
          PoolHiddenStates(batch.forward.last_hidden_state, batch.attention_mask,
                           request->pooling() == v1::POOLING_CLS ? Pooling::kCls : Pooling::kMean));
      if (request->normalize()) {
        ATTNSCOPE_ASSIGN_OR_RETURN(pooled, L2Normalize(pooled));
      }
    }
    response->set_model(model->name());
    for (size_t b = 0; b < batch.encodings.size(); ++b) {
      const int64_t length = static_cast<int64_t>(batch.encodings[b].size());
      v1::EncodeResult* result = response->add_results();
      FillTokens(batch.encodings[b], result->mutable_tokens());
      ATTNSCOPE_RETURN_IF_ERROR(
          EncodeTensor(batch.forward.last_hidden_state[b].narrow(0, 0, length), {"token", "hidden"},
                       dtype, result->mutable_last_hidden_state()));
      if (request->output_hidden_states()) {
        std::vector<torch::Tensor> layers;
        for (const torch::Tensor& hidden : batch.forward.hidden_states) {
          layers.push_back(hidden[b].narrow(0, 0, length));
        }
        ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(layers, {"layer", "token", "hidden"}, dtype,
                                                result->mutable_hidden_states()));
      }
      if (pool) {
        ATTNSCOPE_RETURN_IF_ERROR(
            EncodeTensor(pooled[b], {"hidden"}, dtype, result->mutable_pooled()));
      }
    }
    return absl::OkStatus();
  });
}

grpc::Status AttentionService::CrossAttention(grpc::ServerContext* context,
                                              const v1::CrossAttentionRequest* request,
                                              v1::CrossAttentionResponse* response) {
  constexpr absl::string_view kFixes =
      "send fewer documents per call, request fewer layers or heads, use head_aggregation, or "
      "dtype DTYPE_FLOAT16";
  return Serve("CrossAttention", response, kFixes, [&]() -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const LoadedModel* model, FindModel(request->model()));
    const ModelConfig& config = model->config();
    // Decoder-only models see the document first so that the query, last, can attend to it.
    const bool causal = config.architecture == Architecture::kLlama;
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(request->query(), "query"));
    if (request->documents().empty()) {
      return absl::InvalidArgumentError(
          "documents: expected at least one document, got none; add `documents`");
    }
    if (causal && request->include_document_to_query()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "include_document_to_query: model '", model->name(),
          "' is causal, so the document (first) never attends to the query (after it); leave "
          "`include_document_to_query` false or use an encoder model"));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(const v1::DType dtype, CheckFloatDType(request->dtype()));
    ATTNSCOPE_ASSIGN_OR_RETURN(const HeadAggregation aggregation,
                               ToAggregation(request->head_aggregation()));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        const std::vector<int64_t> layers,
        ResolveIndices(request->layers(), config.num_hidden_layers, "layer", "layers"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        const std::vector<int64_t> heads,
        ResolveIndices(request->heads(), config.num_attention_heads, "head", "heads"));

    const int64_t query_sequence = causal ? 1 : 0;
    std::vector<Encoding> encodings;
    std::vector<std::vector<int64_t>> query_positions;
    std::vector<std::vector<int64_t>> document_positions;
    for (int i = 0; i < request->documents_size(); ++i) {
      const std::string& document = request->documents(i);
      ATTNSCOPE_RETURN_IF_ERROR(CheckText(document, absl::StrCat("documents[", i, "]")));
      ATTNSCOPE_ASSIGN_OR_RETURN(
          Encoding encoding, causal
                                 ? EncodeText(*model, document, &request->query(),
                                              request->tokenization(), Truncation::kLongestFirst)
                                 : EncodeText(*model, request->query(), &document,
                                              request->tokenization(), Truncation::kLongestFirst));
      query_positions.push_back(PositionsOfSequence(encoding.sequence_ids, query_sequence));
      document_positions.push_back(PositionsOfSequence(encoding.sequence_ids, 1 - query_sequence));
      if (query_positions.back().empty() || document_positions.back().empty()) {
        // A text that yields no tokens at all cannot be fixed by a larger budget.
        ATTNSCOPE_RETURN_IF_ERROR(CheckYieldsTokens(*model, request->query(), "query"));
        ATTNSCOPE_RETURN_IF_ERROR(
            CheckYieldsTokens(*model, document, absl::StrCat("documents[", i, "]")));
        return absl::InvalidArgumentError(absl::StrCat(
            "documents[", i, "]: expected query and document tokens after truncation, got ",
            query_positions.back().size(), " query and ", document_positions.back().size(),
            " document tokens; raise `tokenization.max_length` or shorten the query"));
      }
      encodings.push_back(std::move(encoding));
    }
    ForwardOptions forward;
    forward.output_logits = model->model().has_classifier();
    ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                               Run(*model, std::move(encodings), forward, context));

    response->set_model(model->name());
    for (const int64_t layer : layers) response->add_layers(static_cast<int32_t>(layer));
    for (const int64_t head : heads) response->add_heads(static_cast<int32_t>(head));
    for (size_t b = 0; b < batch.encodings.size(); ++b) {
      const Encoding& encoding = batch.encodings[b];
      const int64_t length = static_cast<int64_t>(encoding.size());
      v1::DocumentAttention* result = response->add_documents();
      FillTokens(encoding, result->mutable_tokens());
      for (const int64_t p : query_positions[b])
        result->add_query_positions(static_cast<int32_t>(p));
      for (const int64_t p : document_positions[b]) {
        result->add_document_positions(static_cast<int32_t>(p));
      }
      std::vector<torch::Tensor> to_document;
      std::vector<torch::Tensor> to_query;
      for (const int64_t layer : layers) {
        const torch::Tensor full = StripPadding(batch.forward.attentions[layer], b, length);
        ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor block,
                                   AttentionBlock(full, query_positions[b], document_positions[b]));
        ATTNSCOPE_ASSIGN_OR_RETURN(block, SelectHeads(block, heads, aggregation, {}));
        to_document.push_back(std::move(block));
        if (request->include_document_to_query()) {
          ATTNSCOPE_ASSIGN_OR_RETURN(
              torch::Tensor reverse,
              AttentionBlock(full, document_positions[b], query_positions[b]));
          ATTNSCOPE_ASSIGN_OR_RETURN(reverse, SelectHeads(reverse, heads, aggregation, {}));
          to_query.push_back(std::move(reverse));
        }
      }
      ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(to_document,
                                              {"layer", "head", "query_token", "document_token"},
                                              dtype, result->mutable_query_to_document()));
      if (!to_query.empty()) {
        ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(to_query,
                                                {"layer", "head", "document_token", "query_token"},
                                                dtype, result->mutable_document_to_query()));
      }
      if (batch.forward.logits.defined()) {
        const torch::Tensor logits = batch.forward.logits[b].contiguous();
        const float* values = logits.data_ptr<float>();
        for (int64_t i = 0; i < logits.numel(); ++i) result->add_logits(values[i]);
        if (logits.numel() > 0) result->set_relevance_score(values[logits.numel() - 1]);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace attnscope::server
