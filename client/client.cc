#include "client/client.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace attnscope {
namespace {

// Room above max_response_bytes for the non-tensor part of a response; see ClientOptions.
constexpr int64_t kEnvelopeBytes = int64_t{1} << 20;

// The channel's receive limit: the largest answer plus room for its non-tensor fields.
int64_t ReceiveLimitBytes(const ClientOptions& options) {
  return options.max_response_bytes + kEnvelopeBytes;
}

// gRPC message sizes are ints.
constexpr int64_t kMaxChannelMessageBytes = int64_t{2147483647};

// Service-config durations are decimal seconds with an "s" suffix.
std::string ConfigDuration(absl::Duration duration) {
  return absl::StrCat(absl::ToDoubleSeconds(duration), "s");
}

absl::StatusOr<std::optional<DecodedTensor>> DecodeOptional(bool present,
                                                            const v1::Tensor& tensor) {
  if (!present) return std::optional<DecodedTensor>();
  absl::StatusOr<DecodedTensor> decoded = DecodeTensor(tensor);
  if (!decoded.ok()) return decoded.status();
  return std::optional<DecodedTensor>(*std::move(decoded));
}

absl::Status StreamError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("StreamAttention: the server's stream ", what));
}

// Reassembles a stream: the header fixes the full shapes, and the pieces of each layer (whole
// heads, or rows of one head: each a contiguous run of the layer's [head, query, key] slice) are
// decoded straight into buffers preallocated from it, in order: the self-attention block, then
// with decoder_text the decoder's self-attention and cross-attention blocks.
class StreamAssembler {
 public:
  absl::Status Add(v1::StreamAttentionResponse& message) {
    switch (message.message_case()) {
      case v1::StreamAttentionResponse::kHeader:
        return AddHeader(*message.mutable_header());
      case v1::StreamAttentionResponse::kLayer:
        return AddLayer(message.layer());
      case v1::StreamAttentionResponse::kRollout:
        return AddRollout(message.rollout());
      default:
        return StreamError("sent an empty message");
    }
  }

  absl::StatusOr<AttentionResult> Finish() {
    if (!have_header_) return StreamError("ended without a header");
    for (const Block& block : blocks_) {
      if (block.layers == nullptr) continue;
      if (block.next_layer != block.layers->size() || block.layer_filled != 0) {
        return StreamError(absl::StrCat("ended after ", block.next_layer, " of ",
                                        block.layers->size(), " layers of ", block.name));
      }
    }
    if (result_.rollout.has_value() &&
        rollout_rows_ != static_cast<size_t>(result_.rollout->shape[0])) {
      return StreamError(absl::StrCat("ended after ", rollout_rows_, " of ",
                                      result_.rollout->shape[0], " rollout rows"));
    }
    return std::move(result_);
  }

 private:
  // One stacked tensor the layer messages fill, with its top-k indices and scores.
  struct Block {
    const char* name = "";
    // Null for a block the header does not announce.
    const std::vector<int32_t>* layers = nullptr;
    DecodedTensor* attentions = nullptr;
    std::optional<DecodedTensor>* scores = nullptr;
    std::optional<DecodedTensor>* top_k_indices = nullptr;
    size_t next_layer = 0;
    // Elements of the current layer's slice received so far.
    int64_t layer_filled = 0;
    int64_t slice_elements = 0;
  };

  // Sets `block` up from its announced shape: [layers, heads, queries, keys].
  static absl::Status StartBlock(const google::protobuf::RepeatedField<int64_t>& shape,
                                 const google::protobuf::RepeatedPtrField<std::string>& dim_names,
                                 v1::DType dtype, Block& block) {
    DecodedTensor& attentions = *block.attentions;
    attentions.shape.assign(shape.begin(), shape.end());
    attentions.dim_names.assign(dim_names.begin(), dim_names.end());
    attentions.wire_dtype = dtype;
    if (attentions.shape.size() != 4 ||
        attentions.shape[0] != static_cast<int64_t>(block.layers->size())) {
      return StreamError(absl::StrCat("header has ", block.name, " shape [",
                                      absl::StrJoin(attentions.shape, ", "), "] for ",
                                      block.layers->size(), " layers"));
    }
    block.slice_elements = 1;
    for (size_t i = 1; i < attentions.shape.size(); ++i) {
      if (attentions.shape[i] < 0) return StreamError("header has a negative dimension");
      block.slice_elements *= attentions.shape[i];
    }
    attentions.values.resize(block.slice_elements * attentions.shape[0]);
    return absl::OkStatus();
  }

  absl::Status AddHeader(v1::StreamAttentionHeader& header) {
    if (have_header_) return StreamError("sent two headers");
    have_header_ = true;
    result_.model = header.model();
    result_.tokens = std::move(*header.mutable_tokens());
    result_.layers.assign(header.layers().begin(), header.layers().end());
    result_.heads.assign(header.heads().begin(), header.heads().end());
    result_.query_start = header.query_start();
    result_.key_start = header.key_start();
    result_.words.assign(header.words().begin(), header.words().end());
    blocks_[v1::ATTENTION_BLOCK_SELF] = {"attentions", &result_.layers, &result_.attentions,
                                         &result_.scores, &result_.top_k_indices};
    absl::Status status = StartBlock(header.attentions_shape(), header.dim_names(), header.dtype(),
                                     blocks_[v1::ATTENTION_BLOCK_SELF]);
    if (!status.ok() || !header.has_decoder_tokens()) return status;
    AttentionResult::Decoder& decoder = result_.decoder.emplace();
    decoder.tokens = std::move(*header.mutable_decoder_tokens());
    decoder.labels = std::move(*header.mutable_decoder_labels());
    decoder.layers.assign(header.decoder_layers().begin(), header.decoder_layers().end());
    decoder.heads.assign(header.decoder_heads().begin(), header.decoder_heads().end());
    decoder.query_start = header.decoder_query_start();
    decoder.key_start = header.decoder_key_start();
    blocks_[v1::ATTENTION_BLOCK_DECODER_SELF] = {"decoder_attentions", &decoder.layers,
                                                 &decoder.attentions, nullptr,
                                                 &decoder.top_k_indices};
    blocks_[v1::ATTENTION_BLOCK_CROSS] = {"cross_attentions", &decoder.layers,
                                          &decoder.cross_attentions, nullptr,
                                          &decoder.cross_top_k_indices};
    status = StartBlock(header.decoder_attentions_shape(), header.decoder_dim_names(),
                        header.dtype(), blocks_[v1::ATTENTION_BLOCK_DECODER_SELF]);
    if (!status.ok()) return status;
    return StartBlock(header.cross_attentions_shape(), header.cross_dim_names(), header.dtype(),
                      blocks_[v1::ATTENTION_BLOCK_CROSS]);
  }

  // Checks that `tensor` is the piece of the block's current layer at (head_offset,
  // query_offset), the next contiguous run of the layer's slice, and decodes it into `target`
  // there, allocating the target on the first piece.
  static absl::Status AddPiece(const Block& block, const v1::Tensor& tensor, const char* name,
                               int64_t head_offset, int64_t query_offset, DecodedTensor& target) {
    const DecodedTensor& full = *block.attentions;
    const int64_t heads = full.shape[1];
    const int64_t rows = full.shape[2];
    const int64_t keys = full.shape[3];
    const bool fits = tensor.shape_size() == 3 && tensor.shape(0) >= 1 && tensor.shape(1) >= 1 &&
                      tensor.shape(2) == keys && head_offset + tensor.shape(0) <= heads &&
                      query_offset + tensor.shape(1) <= rows &&
                      (tensor.shape(1) == rows || tensor.shape(0) == 1);
    const int64_t start = (head_offset * rows + query_offset) * keys;
    const int32_t layer = (*block.layers)[block.next_layer];
    if (!fits || start != block.layer_filled) {
      return StreamError(absl::StrCat(
          "sent a piece of layer ", layer, " ", name, " of shape [",
          absl::StrJoin(tensor.shape(), ", "), "] at head ", head_offset, ", query row ",
          query_offset, "; expected whole heads or rows of one head of [", heads, ", ", rows, ", ",
          keys, "], continuing at element ", block.layer_filled));
    }
    if (target.shape.empty()) {
      target.shape = full.shape;
      target.dim_names = full.dim_names;
      target.wire_dtype = tensor.dtype();
      if (tensor.dtype() == v1::DTYPE_INT32) {
        target.int_values.resize(full.values.size());
      } else {
        target.values.resize(full.values.size());
      }
    } else if (target.wire_dtype != tensor.dtype()) {
      return StreamError(absl::StrCat("sent layer ", layer, " ", name, " as ",
                                      DTypeName(tensor.dtype()), ", expected ",
                                      DTypeName(target.wire_dtype)));
    }
    const int64_t offset = static_cast<int64_t>(block.next_layer) * block.slice_elements + start;
    const int64_t count = tensor.shape(0) * tensor.shape(1) * keys;
    return DecodeTensorDataInto(tensor, count,
                                target.is_int() ? nullptr : target.values.data() + offset,
                                target.is_int() ? target.int_values.data() + offset : nullptr);
  }

  absl::Status AddLayer(const v1::StreamAttentionLayer& layer) {
    if (!have_header_) return StreamError("sent a layer before the header");
    const int kind = layer.block();
    if (kind < 0 || kind >= static_cast<int>(blocks_.size()) || blocks_[kind].layers == nullptr) {
      return StreamError(
          absl::StrCat("sent a layer of block ", kind, ", which its header does not announce"));
    }
    // Blocks come in order, each complete before the next starts.
    for (int earlier = 0; earlier < kind; ++earlier) {
      const Block& block = blocks_[earlier];
      if (block.layers != nullptr && block.next_layer != block.layers->size()) {
        return StreamError(
            absl::StrCat("sent ", blocks_[kind].name, " before the end of ", block.name));
      }
    }
    Block& block = blocks_[kind];
    if (block.next_layer >= block.layers->size()) {
      return StreamError(absl::StrCat("sent more than the ", block.layers->size(), " layers of ",
                                      block.name, " its header announced"));
    }
    if (layer.layer() != (*block.layers)[block.next_layer]) {
      return StreamError(absl::StrCat("sent ", block.name, " layer ", layer.layer(),
                                      " where the header announced ",
                                      (*block.layers)[block.next_layer]));
    }
    const int64_t head_offset = layer.head_offset();
    const int64_t query_offset = layer.query_offset();
    absl::Status status = AddPiece(block, layer.attentions(), block.name, head_offset, query_offset,
                                   *block.attentions);
    if (!status.ok()) return status;
    if (layer.has_scores()) {
      if (block.scores == nullptr) return StreamError("sent scores of a decoder block");
      if (!block.scores->has_value()) block.scores->emplace();
      status = AddPiece(block, layer.scores(), "scores", head_offset, query_offset, **block.scores);
      if (!status.ok()) return status;
    }
    if (layer.has_top_k_indices()) {
      if (!block.top_k_indices->has_value()) block.top_k_indices->emplace();
      status = AddPiece(block, layer.top_k_indices(), "top_k_indices", head_offset, query_offset,
                        **block.top_k_indices);
      if (!status.ok()) return status;
    }
    block.layer_filled +=
        layer.attentions().shape(0) * layer.attentions().shape(1) * block.attentions->shape[3];
    if (block.layer_filled == block.slice_elements) {
      block.layer_filled = 0;
      ++block.next_layer;
    }
    return absl::OkStatus();
  }

  // Rollout pieces are runs of rows of [query_token, key_token]; the rows are the attentions'.
  absl::Status AddRollout(const v1::StreamAttentionRollout& piece) {
    if (!have_header_) return StreamError("sent the rollout before the header");
    const v1::Tensor& tensor = piece.rollout();
    const int64_t rows = result_.attentions.shape[2];
    if (!result_.rollout.has_value() && tensor.shape_size() == 2) {
      DecodedTensor& rollout = result_.rollout.emplace();
      rollout.shape = {rows, tensor.shape(1)};
      rollout.dim_names.assign(tensor.dim_names().begin(), tensor.dim_names().end());
      rollout.wire_dtype = tensor.dtype();
      rollout.values.resize(rows * tensor.shape(1));
    }
    if (tensor.shape_size() != 2 || !result_.rollout.has_value() ||
        tensor.shape(1) != result_.rollout->shape[1] ||
        piece.query_offset() != static_cast<int64_t>(rollout_rows_) ||
        piece.query_offset() + tensor.shape(0) > rows) {
      return StreamError(absl::StrCat(
          "sent rollout rows of shape [", absl::StrJoin(tensor.shape(), ", "), "] at row ",
          piece.query_offset(), "; expected rows from ", rollout_rows_, " of ", rows));
    }
    const int64_t offset = piece.query_offset() * tensor.shape(1);
    absl::Status status = DecodeTensorDataInto(tensor, tensor.shape(0) * tensor.shape(1),
                                               result_.rollout->values.data() + offset, nullptr);
    if (!status.ok()) return status;
    rollout_rows_ += tensor.shape(0);
    return absl::OkStatus();
  }

  AttentionResult result_;
  bool have_header_ = false;
  // Indexed by v1::AttentionBlock.
  std::array<Block, 3> blocks_;
  size_t rollout_rows_ = 0;
};

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status, int64_t receive_limit_bytes) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  // gRPC core's wording for a message over a channel's receive limit: "Received message larger
  // than max (SIZE vs. LIMIT)". Either side may have refused: LIMIT tells which.
  constexpr absl::string_view kTooLarge = "Received message larger than max (";
  const std::string& message = status.error_message();
  if (code != absl::StatusCode::kResourceExhausted || !absl::StartsWith(message, kTooLarge)) {
    return absl::Status(code, message);
  }
  int64_t size = 0;
  int64_t limit = 0;
  const std::vector<absl::string_view> numbers = absl::StrSplit(
      absl::StripSuffix(absl::string_view(message).substr(kTooLarge.size()), ")"), " vs. ");
  if (numbers.size() != 2 || !absl::SimpleAtoi(numbers[0], &size) ||
      !absl::SimpleAtoi(numbers[1], &limit)) {
    return absl::Status(code, message);
  }
  if (limit == receive_limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        message,
        ": the answer is larger than this client accepts (ClientOptions.max_response_bytes plus ",
        kEnvelopeBytes,
        " bytes; CLI --max_response_bytes); raise it to the server's "
        "--max_response_bytes, ask for less (layers, heads, window, top_k, float16) or use "
        "StreamAttention"));
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      message, ": the request is ", size, " bytes, over the ", limit,
      " bytes the server accepts; send shorter texts, or fewer inputs or documents per call"));
}

std::string ServiceConfigJson(const ClientOptions& options) {
  // gRPC rejects a retryPolicy with maxAttempts < 2; one attempt simply means no policy.
  std::string retry_policy;
  if (options.max_attempts >= 2) {
    retry_policy = absl::StrCat(R"(,"retryPolicy":{"maxAttempts":)", options.max_attempts,
                                R"(,"initialBackoff":")", ConfigDuration(options.initial_backoff),
                                R"(","maxBackoff":")", ConfigDuration(options.max_backoff),
                                R"(","backoffMultiplier":)", options.backoff_multiplier,
                                R"(,"retryableStatusCodes":["UNAVAILABLE"]})");
  }
  return absl::StrCat(
      R"({"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[)",
      R"({"service":"attnscope.v1.AttentionService"},{"service":"grpc.health.v1.Health"}])",
      retry_policy, "}]}");
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const ClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("ClientOptions.target is empty; pass e.g. 127.0.0.1:50051");
  }
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.max_attempts is ", options.max_attempts, "; it must be >= 1"));
  }
  if (options.max_response_bytes < 1 ||
      options.max_response_bytes > kMaxChannelMessageBytes - kEnvelopeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.max_response_bytes is ", options.max_response_bytes,
                     "; it must be in [1, ", kMaxChannelMessageBytes - kEnvelopeBytes, "]"));
  }
  if (options.default_timeout <= absl::ZeroDuration() ||
      options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff <= absl::ZeroDuration() || options.backoff_multiplier <= 0) {
    return absl::InvalidArgumentError(
        "ClientOptions.default_timeout, initial_backoff, max_backoff and backoff_multiplier must "
        "be positive");
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(static_cast<int>(ReceiveLimitBytes(options)));
  arguments.SetServiceConfigJSON(ServiceConfigJson(options));
  arguments.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials ? options.credentials : grpc::InsecureChannelCredentials();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.target, credentials, arguments);
  return std::unique_ptr<Client>(new Client(options, std::move(channel)));
}

Client::Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      stub_(v1::AttentionService::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)) {}

absl::Status Client::Convert(const grpc::Status& status) const {
  return FromGrpcStatus(status, ReceiveLimitBytes(options_));
}

void Client::PrepareContext(const CallOptions& call, grpc::ClientContext* context) const {
  const absl::Duration timeout = call.timeout.value_or(options_.default_timeout);
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!options_.api_key.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.api_key));
  }
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const std::string& ca_file, const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert_file '", cert_file, "' and --tls_key_file '", key_file,
                     "': expected both (a client certificate) or neither, got one"));
  }
  auto read = [](absl::string_view flag, const std::string& path) -> absl::StatusOr<std::string> {
    std::ifstream file(path, std::ios::binary);
    std::stringstream contents;
    if (file) contents << file.rdbuf();
    if (!file) {
      return absl::NotFoundError(
          absl::StrCat(flag, " '", path, "': expected a readable PEM file, got none there"));
    }
    return contents.str();
  };
  grpc::SslCredentialsOptions ssl;
  if (!ca_file.empty()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(ssl.pem_root_certs, read("--tls_ca_file", ca_file));
  }
  if (!cert_file.empty()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(ssl.pem_cert_chain, read("--tls_cert_file", cert_file));
    ATTNSCOPE_ASSIGN_OR_RETURN(ssl.pem_private_key, read("--tls_key_file", key_file));
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::vector<v1::ModelInfo>> Client::ListModels(const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::ListModelsResponse response;
  absl::Status status = Convert(stub_->ListModels(&context, v1::ListModelsRequest(), &response));
  if (!status.ok()) return status;
  return std::vector<v1::ModelInfo>(response.models().begin(), response.models().end());
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo(const std::string& model,
                                                   const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetModelInfoRequest request;
  request.set_model(model);
  v1::ModelInfo response;
  absl::Status status = Convert(stub_->GetModelInfo(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                      const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::TokenizeResponse response;
  absl::Status status = Convert(stub_->Tokenize(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<AttentionResult> Client::GetAttention(const v1::GetAttentionRequest& request,
                                                     const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetAttentionResponse response;
  absl::Status status = Convert(stub_->GetAttention(&context, request, &response));
  if (!status.ok()) return status;
  AttentionResult result;
  result.model = response.model();
  result.tokens = std::move(*response.mutable_tokens());
  result.layers.assign(response.layers().begin(), response.layers().end());
  result.heads.assign(response.heads().begin(), response.heads().end());
  result.query_start = response.query_start();
  result.key_start = response.key_start();
  result.words.assign(response.words().begin(), response.words().end());
  absl::StatusOr<DecodedTensor> attentions = DecodeTensor(response.attentions());
  if (!attentions.ok()) return attentions.status();
  result.attentions = *std::move(attentions);
  absl::StatusOr<std::optional<DecodedTensor>> optional =
      DecodeOptional(response.has_scores(), response.scores());
  if (!optional.ok()) return optional.status();
  result.scores = *std::move(optional);
  optional = DecodeOptional(response.has_top_k_indices(), response.top_k_indices());
  if (!optional.ok()) return optional.status();
  result.top_k_indices = *std::move(optional);
  optional = DecodeOptional(response.has_rollout(), response.rollout());
  if (!optional.ok()) return optional.status();
  result.rollout = *std::move(optional);
  if (response.has_decoder_tokens()) {
    AttentionResult::Decoder& decoder = result.decoder.emplace();
    decoder.tokens = std::move(*response.mutable_decoder_tokens());
    decoder.labels = std::move(*response.mutable_decoder_labels());
    decoder.layers.assign(response.decoder_layers().begin(), response.decoder_layers().end());
    decoder.heads.assign(response.decoder_heads().begin(), response.decoder_heads().end());
    decoder.query_start = response.decoder_query_start();
    decoder.key_start = response.decoder_key_start();
    for (auto [from, to] : {std::pair{&response.decoder_attentions(), &decoder.attentions},
                            std::pair{&response.cross_attentions(), &decoder.cross_attentions}}) {
      absl::StatusOr<DecodedTensor> decoded = DecodeTensor(*from);
      if (!decoded.ok()) return decoded.status();
      *to = *std::move(decoded);
    }
    optional =
        DecodeOptional(response.has_decoder_top_k_indices(), response.decoder_top_k_indices());
    if (!optional.ok()) return optional.status();
    decoder.top_k_indices = *std::move(optional);
    optional = DecodeOptional(response.has_cross_top_k_indices(), response.cross_top_k_indices());
    if (!optional.ok()) return optional.status();
    decoder.cross_top_k_indices = *std::move(optional);
  }
  return result;
}

absl::StatusOr<AttentionResult> Client::StreamAttention(const v1::GetAttentionRequest& request,
                                                        const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>> reader =
      stub_->StreamAttention(&context, request);
  StreamAssembler assembler;
  v1::StreamAttentionResponse message;
  absl::Status assembly_status;
  while (reader->Read(&message)) {
    assembly_status = assembler.Add(message);
    if (!assembly_status.ok()) {
      // Stop the server's work and drain the stream so that Finish() returns promptly.
      context.TryCancel();
      while (reader->Read(&message)) {
      }
      break;
    }
  }
  const absl::Status call_status = Convert(reader->Finish());
  if (!assembly_status.ok()) return assembly_status;
  if (!call_status.ok()) return call_status;
  return assembler.Finish();
}

absl::StatusOr<GenerateResult> Client::Generate(
    const v1::GenerateRequest& request,
    const std::function<void(const GeneratedTokenResult&)>& on_token, const CallOptions& call,
    const std::function<void(const v1::GenerateHeader&)>& on_header) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub_->Generate(&context, request);
  GenerateResult result;
  bool have_header = false, have_done = false;
  v1::GenerateResponse message;
  auto add = [&]() -> absl::Status {
    auto error = [](absl::string_view what) {
      return absl::InternalError(absl::StrCat("Generate: the server's stream ", what));
    };
    if (have_done) return error("went on after GenerateDone");
    switch (message.kind_case()) {
      case v1::GenerateResponse::kHeader:
        if (have_header) return error("sent a second header");
        have_header = true;
        result.header = std::move(*message.mutable_header());
        if (on_header) on_header(result.header);
        return absl::OkStatus();
      case v1::GenerateResponse::kToken: {
        if (!have_header) return error("sent a token before the header");
        if (message.token().index() != static_cast<int32_t>(result.tokens.size())) {
          return error(absl::StrCat("sent token ", message.token().index(), " where ",
                                    result.tokens.size(), " was due"));
        }
        GeneratedTokenResult& token = result.tokens.emplace_back();
        if (message.token().has_attention()) {
          absl::StatusOr<DecodedTensor> attention = DecodeTensor(message.token().attention());
          if (!attention.ok()) return attention.status();
          token.attention = *std::move(attention);
        }
        token.token = std::move(*message.mutable_token());
        token.token.clear_attention();
        if (on_token) on_token(token);
        return absl::OkStatus();
      }
      case v1::GenerateResponse::kDone:
        if (!have_header) return error("ended before the header");
        have_done = true;
        result.done = std::move(*message.mutable_done());
        return absl::OkStatus();
      default:
        return error("sent an empty message");
    }
  };
  absl::Status stream_status;
  while (reader->Read(&message)) {
    stream_status = add();
    if (!stream_status.ok()) {
      // Stop the server's work and drain the stream so that Finish() returns promptly.
      context.TryCancel();
      while (reader->Read(&message)) {
      }
      break;
    }
  }
  const absl::Status call_status = Convert(reader->Finish());
  if (!stream_status.ok()) return stream_status;
  if (!call_status.ok()) return call_status;
  if (!have_done)
    return absl::InternalError("Generate: the server's stream ended without GenerateDone");
  return result;
}

absl::StatusOr<EncodeResponse> Client::Encode(const v1::EncodeRequest& request,
                                              const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::EncodeResponse response;
  absl::Status status = Convert(stub_->Encode(&context, request, &response));
  if (!status.ok()) return status;
  EncodeResponse result;
  result.model = response.model();
  for (v1::EncodeResult& input : *response.mutable_results()) {
    EncodeResult& decoded = result.results.emplace_back();
    decoded.tokens = std::move(*input.mutable_tokens());
    absl::StatusOr<DecodedTensor> last = DecodeTensor(input.last_hidden_state());
    if (!last.ok()) return last.status();
    decoded.last_hidden_state = *std::move(last);
    absl::StatusOr<std::optional<DecodedTensor>> optional =
        DecodeOptional(input.has_hidden_states(), input.hidden_states());
    if (!optional.ok()) return optional.status();
    decoded.hidden_states = *std::move(optional);
    optional = DecodeOptional(input.has_pooled(), input.pooled());
    if (!optional.ok()) return optional.status();
    decoded.pooled = *std::move(optional);
  }
  return result;
}

absl::StatusOr<CrossAttentionResult> Client::CrossAttention(
    const v1::CrossAttentionRequest& request, const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::CrossAttentionResponse response;
  absl::Status status = Convert(stub_->CrossAttention(&context, request, &response));
  if (!status.ok()) return status;
  CrossAttentionResult result;
  result.model = response.model();
  result.layers.assign(response.layers().begin(), response.layers().end());
  result.heads.assign(response.heads().begin(), response.heads().end());
  for (v1::DocumentAttention& document : *response.mutable_documents()) {
    DocumentAttentionResult& decoded = result.documents.emplace_back();
    decoded.tokens = std::move(*document.mutable_tokens());
    decoded.query_positions.assign(document.query_positions().begin(),
                                   document.query_positions().end());
    decoded.document_positions.assign(document.document_positions().begin(),
                                      document.document_positions().end());
    absl::StatusOr<DecodedTensor> block = DecodeTensor(document.query_to_document());
    if (!block.ok()) return block.status();
    decoded.query_to_document = *std::move(block);
    absl::StatusOr<std::optional<DecodedTensor>> optional =
        DecodeOptional(document.has_document_to_query(), document.document_to_query());
    if (!optional.ok()) return optional.status();
    decoded.document_to_query = *std::move(optional);
    decoded.logits.assign(document.logits().begin(), document.logits().end());
    if (document.has_relevance_score()) decoded.relevance_score = document.relevance_score();
  }
  return result;
}

absl::StatusOr<std::vector<v1::ParameterInfo>> Client::ListParameters(const std::string& model,
                                                                      const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::ListParametersRequest request;
  request.set_model(model);
  v1::ListParametersResponse response;
  absl::Status status = Convert(stub_->ListParameters(&context, request, &response));
  if (!status.ok()) return status;
  return std::vector<v1::ParameterInfo>(response.parameters().begin(), response.parameters().end());
}

absl::StatusOr<ParameterResult> Client::GetParameter(const v1::GetParameterRequest& request,
                                                     const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetParameterResponse response;
  absl::Status status = Convert(stub_->GetParameter(&context, request, &response));
  if (!status.ok()) return status;
  ParameterResult result;
  result.model = response.model();
  result.name = response.name();
  result.row_start = response.row_start();
  absl::StatusOr<DecodedTensor> tensor = DecodeTensor(response.tensor());
  if (!tensor.ok()) return tensor.status();
  result.tensor = *std::move(tensor);
  return result;
}

absl::StatusOr<v1::TrainingRecord> Client::GetTrainingRecord(const std::string& model,
                                                             const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetTrainingRecordRequest request;
  request.set_model(model);
  v1::TrainingRecord response;
  absl::Status status = Convert(stub_->GetTrainingRecord(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::AttributeResponse> Client::Attribute(const v1::AttributeRequest& request,
                                                        const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::AttributeResponse response;
  absl::Status status = Convert(stub_->Attribute(&context, request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<ServingStatus> Client::Health(const std::string& service, const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  absl::Status status = Convert(health_stub_->Check(&context, request, &response));
  if (!status.ok()) return status;
  return response.status();
}

}  // namespace attnscope
