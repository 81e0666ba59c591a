#include "client/client.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/stream_assembler.h"
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
  ATTNSCOPE_ASSIGN_OR_RETURN(DecodedTensor decoded, DecodeTensor(tensor));
  return std::optional<DecodedTensor>(std::move(decoded));
}

}  // namespace

namespace {

// FromGrpcStatus without its payload.
absl::Status CallStatusOf(const grpc::Status& status, int64_t receive_limit_bytes) {
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

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status, int64_t receive_limit_bytes) {
  absl::Status converted = CallStatusOf(status, receive_limit_bytes);
  if (!converted.ok()) converted.SetPayload(kCallStatusPayload, absl::Cord());
  return converted;
}

bool IsCallStatus(const absl::Status& status) {
  return status.GetPayload(kCallStatusPayload).has_value();
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
  ATTNSCOPE_RETURN_IF_ERROR(
      Convert(stub_->ListModels(&context, v1::ListModelsRequest(), &response)));
  return std::vector<v1::ModelInfo>(response.models().begin(), response.models().end());
}

absl::StatusOr<v1::ModelInfo> Client::GetModelInfo(const std::string& model,
                                                   const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetModelInfoRequest request;
  request.set_model(model);
  v1::ModelInfo response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->GetModelInfo(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::TokenizeResponse> Client::Tokenize(const v1::TokenizeRequest& request,
                                                      const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::TokenizeResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->Tokenize(&context, request, &response)));
  return response;
}

absl::StatusOr<AttentionResult> Client::GetAttention(const v1::GetAttentionRequest& request,
                                                     const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetAttentionResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->GetAttention(&context, request, &response)));
  AttentionResult result;
  result.model = response.model();
  result.tokens = std::move(*response.mutable_tokens());
  result.layers.assign(response.layers().begin(), response.layers().end());
  result.heads.assign(response.heads().begin(), response.heads().end());
  result.query_start = response.query_start();
  result.key_start = response.key_start();
  result.words.assign(response.words().begin(), response.words().end());
  ATTNSCOPE_ASSIGN_OR_RETURN(result.attentions, DecodeTensor(response.attentions()));
  ATTNSCOPE_ASSIGN_OR_RETURN(result.scores,
                             DecodeOptional(response.has_scores(), response.scores()));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      result.top_k_indices, DecodeOptional(response.has_top_k_indices(), response.top_k_indices()));
  ATTNSCOPE_ASSIGN_OR_RETURN(result.rollout,
                             DecodeOptional(response.has_rollout(), response.rollout()));
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
      ATTNSCOPE_ASSIGN_OR_RETURN(*to, DecodeTensor(*from));
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(
        decoder.top_k_indices,
        DecodeOptional(response.has_decoder_top_k_indices(), response.decoder_top_k_indices()));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        decoder.cross_top_k_indices,
        DecodeOptional(response.has_cross_top_k_indices(), response.cross_top_k_indices()));
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
  ATTNSCOPE_RETURN_IF_ERROR(assembly_status);
  ATTNSCOPE_RETURN_IF_ERROR(call_status);
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
          ATTNSCOPE_ASSIGN_OR_RETURN(token.attention, DecodeTensor(message.token().attention()));
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
  ATTNSCOPE_RETURN_IF_ERROR(stream_status);
  ATTNSCOPE_RETURN_IF_ERROR(call_status);
  if (!have_done)
    return absl::InternalError("Generate: the server's stream ended without GenerateDone");
  return result;
}

absl::StatusOr<EncodeResponse> Client::Encode(const v1::EncodeRequest& request,
                                              const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::EncodeResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->Encode(&context, request, &response)));
  EncodeResponse result;
  result.model = response.model();
  for (v1::EncodeResult& input : *response.mutable_results()) {
    EncodeResult& decoded = result.results.emplace_back();
    decoded.tokens = std::move(*input.mutable_tokens());
    ATTNSCOPE_ASSIGN_OR_RETURN(decoded.last_hidden_state, DecodeTensor(input.last_hidden_state()));
    ATTNSCOPE_ASSIGN_OR_RETURN(decoded.hidden_states,
                               DecodeOptional(input.has_hidden_states(), input.hidden_states()));
    ATTNSCOPE_ASSIGN_OR_RETURN(decoded.pooled, DecodeOptional(input.has_pooled(), input.pooled()));
  }
  return result;
}

absl::StatusOr<CrossAttentionResult> Client::CrossAttention(
    const v1::CrossAttentionRequest& request, const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::CrossAttentionResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->CrossAttention(&context, request, &response)));
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
    ATTNSCOPE_ASSIGN_OR_RETURN(decoded.query_to_document,
                               DecodeTensor(document.query_to_document()));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        decoded.document_to_query,
        DecodeOptional(document.has_document_to_query(), document.document_to_query()));
    decoded.logits.assign(document.logits().begin(), document.logits().end());
    if (document.has_relevance_score()) decoded.relevance_score = document.relevance_score();
    decoded.query_truncated = document.query_truncated();
    decoded.document_truncated = document.document_truncated();
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
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->ListParameters(&context, request, &response)));
  return std::vector<v1::ParameterInfo>(response.parameters().begin(), response.parameters().end());
}

absl::StatusOr<ParameterResult> Client::GetParameter(const v1::GetParameterRequest& request,
                                                     const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetParameterResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->GetParameter(&context, request, &response)));
  ParameterResult result;
  result.model = response.model();
  result.name = response.name();
  result.row_start = response.row_start();
  ATTNSCOPE_ASSIGN_OR_RETURN(result.tensor, DecodeTensor(response.tensor()));
  return result;
}

absl::StatusOr<v1::TrainingRecord> Client::GetTrainingRecord(const std::string& model,
                                                             const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::GetTrainingRecordRequest request;
  request.set_model(model);
  v1::TrainingRecord response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->GetTrainingRecord(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::AttributeResponse> Client::Attribute(const v1::AttributeRequest& request,
                                                        const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  v1::AttributeResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(stub_->Attribute(&context, request, &response)));
  return response;
}

absl::StatusOr<ServingStatus> Client::Health(const std::string& service, const CallOptions& call) {
  grpc::ClientContext context;
  PrepareContext(call, &context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  ATTNSCOPE_RETURN_IF_ERROR(Convert(health_stub_->Check(&context, request, &response)));
  return response.status();
}

}  // namespace attnscope
