#include "server/service_core.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "models/requests/requests.h"
#include "server/proto_convert.h"
#include "server/query_convert.h"

namespace attnscope::server {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

std::string ClientMessage(const absl::Status& status) {
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
  return text;
}

absl::Status GraceOverError(absl::string_view when) {
  return absl::UnavailableError(
      absl::StrCat("the server is shutting down and the call ran past its grace period "
                   "(--shutdown_grace_seconds) ",
                   when, "; retry on another replica"));
}

Call MakeCall(absl::string_view transport, std::chrono::system_clock::time_point deadline,
              std::function<bool()> cancelled, std::string authorization,
              std::string client_source) {
  return {transport,
          [deadline, cancelled = std::move(cancelled)](absl::string_view when) -> absl::Status {
            if (std::chrono::system_clock::now() > deadline) {
              return absl::DeadlineExceededError(
                  absl::StrCat("deadline exceeded ", when,
                               "; give the call a longer deadline or send fewer tokens"));
            }
            if (cancelled && cancelled()) {
              return absl::CancelledError(absl::StrCat("call cancelled by the client ", when));
            }
            return absl::OkStatus();
          },
          std::move(authorization), std::move(client_source), /*keep_answer=*/{}};
}

// Request-layer events to Prometheus.
class ServiceCore::Observer : public RequestObserver {
 public:
  explicit Observer(Metrics* metrics) : metrics_(metrics) {}
  void OnTokenized(double seconds, int64_t tokens) override {
    metrics_->RecordTokenization(seconds, tokens);
  }
  void OnQueueWait(const std::string& model, double seconds) override {
    metrics_->RecordQueueWait(model, seconds);
  }
  void OnForward(const std::string& model, int64_t /*calls*/, int64_t sequences,
                 int64_t padded_tokens, double seconds) override {
    metrics_->RecordForwardPass(model, sequences, padded_tokens, seconds);
  }
  void OnAnswerBytesRefused(bool over_client_share) override {
    metrics_->RecordRejection(over_client_share ? "answer_bytes_client_limit"
                                                : "answer_bytes_limit");
  }

 private:
  Metrics* const metrics_;
};

ServiceCore::ServiceCore(ServiceOptions options, Metrics* metrics, const ApiKeys* api_keys)
    : options_(options),
      metrics_(metrics),
      api_keys_(api_keys),
      observer_(std::make_unique<Observer>(metrics)),
      max_client_inflight_(options_.max_concurrent_requests_per_client > 0
                               ? options_.max_concurrent_requests_per_client
                               : (options_.max_concurrent_requests + 1) / 2) {}

ServiceCore::~ServiceCore() = default;

void ServiceCore::SetModels(std::vector<std::unique_ptr<LoadedModel>> models) {
  RequestRunner::Options options;
  options.max_response_bytes = options_.max_response_bytes;
  options.batching = options_.batching;
  options.max_inputs_per_request = options_.max_inputs_per_request;
  options.max_call_tokens = options_.max_call_tokens;
  options.max_answer_bytes_in_flight = options_.max_answer_bytes_in_flight;
  options.max_answer_bytes_per_client = options_.max_answer_bytes_per_client > 0
                                            ? options_.max_answer_bytes_per_client
                                            : options_.max_answer_bytes_in_flight / 2;
  runner_ = std::make_unique<RequestRunner>(options, std::move(models), observer_.get());
  ready_.store(true);
}

template <typename Handler>
absl::Status ServiceCore::Serve(const Call& call, absl::string_view rpc, const std::string* model,
                                const google::protobuf::Message* response, absl::string_view fixes,
                                Handler&& handler) {
  const Clock::time_point start = Clock::now();
  // A call whose client has gone (or whose deadline has passed) before it began takes no place
  // among --max_concurrent_requests: clients that sent calls and left at once held them all, and
  // others were refused while the server worked for nobody.
  if (call.check) {
    if (absl::Status gone = call.check("before it began"); !gone.ok()) {
      metrics_->RecordRequest(rpc, call.transport, ModelLabel(model),
                              absl::StatusCodeToString(gone.code()),
                              std::chrono::duration<double>(Clock::now() - start).count());
      return gone;
    }
  }
  metrics_->inflight().Increment();
  const int inflight = inflight_.fetch_add(1) + 1;
  bool ran = false;
  const absl::StatusOr<std::optional<int>> key = KeyOf(call);
  absl::Status status = key.status();
  // The client's own count, taken once its key (if any) is known to be valid, given back at the
  // end.
  const std::string client = status.ok() ? ClientOf(call, *key) : std::string();
  const bool counted = !client.empty() && max_client_inflight_ > 0;
  const ClientCalls client_calls =
      counted ? CountClientCall(client, +1) : ClientCalls{/*calls=*/0, /*clients=*/0};
  const int client_limit = ClientCallLimit(inflight, client_calls.clients);
  if (!status.ok()) {
    // Counted by Authenticate.
  } else if (draining_.load()) {
    status = absl::UnavailableError("the server is shutting down; retry on another replica");
    metrics_->RecordRejection("draining");
  } else if (!ready_.load()) {
    status = absl::UnavailableError(
        "the server is still loading models; retry when grpc.health.v1 reports SERVING");
    metrics_->RecordRejection("loading");
  } else if (options_.max_concurrent_requests > 0 && inflight > options_.max_concurrent_requests) {
    status = absl::ResourceExhaustedError(
        absl::StrCat("the server is at its limit of ", options_.max_concurrent_requests,
                     " concurrent requests (--max_concurrent_requests); retry with backoff"));
    metrics_->RecordRejection("concurrency_limit");
  } else if (counted && client_calls.calls > client_limit) {
    const std::string why =
        client_limit < max_client_inflight_
            ? absl::StrCat("while the server is near its --max_concurrent_requests and ",
                           client_calls.clients,
                           " clients have calls under way, each may have an equal part of them "
                           "with room left for one more (--max_concurrent_requests_per_client's "
                           "share otherwise)")
            : "--max_concurrent_requests_per_client; by default half of "
              "--max_concurrent_requests, so that one client cannot hold them all";
    status = absl::ResourceExhaustedError(
        absl::StrCat("calls of this client (", api_keys_ != nullptr ? "its API key" : "its address",
                     "): expected at most ", client_limit, " at once (", why, "), got ",
                     client_calls.calls, "; retry with backoff once one of them has ended"));
    metrics_->RecordRejection("client_limit");
  } else {
    // The server's ceiling on the call's time, whatever deadline the caller set (or none).
    const Clock::time_point ceiling =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(options_.max_call_seconds));
    const CallCheck check = [this, &call, ceiling, seconds = options_.max_call_seconds](
                                absl::string_view when) -> absl::Status {
      if (absl::ToUnixNanos(absl::Now()) > grace_end_nanos_.load()) return GraceOverError(when);
      if (Clock::now() > ceiling) {
        return absl::DeadlineExceededError(absl::StrCat(
            "the call ran past this server's ceiling of ", seconds, " s (--max_call_seconds) ",
            when, "; ask for less work per call (fewer tokens, documents, steps or new tokens)"));
      }
      return call.check ? call.check(when) : absl::OkStatus();
    };
    ran = true;
    try {
      // Methods that compute learn their client: its passes take turns with other clients', and
      // its answers hold its share of the answer budget.
      if constexpr (std::is_invocable_v<Handler, const CallCheck&, const std::string&>) {
        status = handler(check, client);
      } else {
        status = handler(check);
      }
    } catch (const std::exception& error) {
      status = absl::InternalError(absl::StrCat(rpc, " failed (a bug): ", error.what()));
    }
  }
  if (status.ok() && response != nullptr) {
    const int64_t bytes = static_cast<int64_t>(response->ByteSizeLong());
    if (bytes > options_.max_response_bytes) {
      status = absl::ResourceExhaustedError(
          TooLargeMessage(rpc, bytes, options_.max_response_bytes, fixes));
    } else {
      if (call.keep_answer) status = call.keep_answer(bytes, client, AnswerFixes(rpc));
      if (status.ok()) metrics_->RecordResponseBytes(bytes);
    }
  }
  // A refusal's few bytes need no time to be read (LastAnswerEnd): a client retrying against a
  // draining server would otherwise keep it from shutting down until the grace ran out.
  if (ran) last_call_end_nanos_.store(absl::ToUnixNanos(absl::Now()));
  if (counted) CountClientCall(client, -1);
  inflight_.fetch_sub(1);
  metrics_->inflight().Decrement();
  metrics_->RecordRequest(rpc, call.transport, ModelLabel(model),
                          absl::StatusCodeToString(status.code()),
                          std::chrono::duration<double>(Clock::now() - start).count());
  return status;
}

std::string ServiceCore::ClientOf(const Call& call, std::optional<int> key) const {
  if (key.has_value()) return absl::StrCat("key ", *key);
  return call.client_source.empty() ? "" : absl::StrCat("source ", call.client_source);
}

ServiceCore::ClientCalls ServiceCore::CountClientCall(const std::string& client, int change) {
  absl::MutexLock lock(&clients_mutex_);
  int& calls = client_inflight_[client];
  calls += change;
  const int now = calls;
  // A client with nothing under way leaves the table, which so holds at most the calls' clients.
  if (now <= 0) client_inflight_.erase(client);
  return {now, static_cast<int>(client_inflight_.size())};
}

int ServiceCore::ClientCallLimit(int inflight, int clients) const {
  const int limit = options_.max_concurrent_requests;
  if (limit <= 0 || max_client_inflight_ >= limit || inflight <= limit - limit / 4) {
    return max_client_inflight_;
  }
  return std::min(max_client_inflight_, std::max(1, limit / (clients + 1)));
}

absl::Time ServiceCore::LastAnswerEnd() const {
  const int64_t call_end = last_call_end_nanos_.load();
  const absl::Time method_end = call_end == std::numeric_limits<int64_t>::min()
                                    ? absl::InfinitePast()
                                    : absl::FromUnixNanos(call_end);
  return ready_.load() ? std::max(method_end, runner_->LastAnswerReleased()) : method_end;
}

void ServiceCore::RecordRefused(absl::string_view rpc, absl::string_view transport,
                                absl::StatusCode code, double seconds) const {
  metrics_->RecordRequest(rpc, transport, "", absl::StatusCodeToString(code), seconds);
}

absl::StatusOr<ByteBudget::Hold> ServiceCore::HoldAnswerBytes(const std::string& client,
                                                              int64_t bytes, absl::string_view what,
                                                              absl::string_view fixes) const {
  if (!ready_.load()) return ByteBudget::Hold();
  absl::StatusOr<ByteBudget::Hold> hold = runner_->ReserveAnswerBytes(bytes, what, client, fixes);
  if (!hold.ok()) return hold;
  answers_being_written_.fetch_add(1);
  return BeingWritten(*std::move(hold));
}

ByteBudget::Hold ServiceCore::NarrowAnswerBytes(const std::string& client, ByteBudget::Hold wide,
                                                int64_t bytes) const {
  if (!ready_.load()) return ByteBudget::Hold();
  // Counted before the wide hold ends, so that the count never falls to 0 in between.
  answers_being_written_.fetch_add(1);
  return BeingWritten(runner_->NarrowAnswerBytes(std::move(wide), bytes, client));
}

absl::string_view ServiceCore::AnswerFixes(absl::string_view rpc) {
  if (rpc == "GetAttention" || rpc == "StreamAttention") return kAttentionAnswerFixes;
  if (rpc == "Encode") return kEncodeFixes;
  if (rpc == "CrossAttention") return kCrossAttentionFixes;
  if (rpc == "Attribute") return kAttributeFixes;
  if (rpc == "Tokenize") return kTokenizeFixes;
  return "";
}

std::string ServiceCore::AnsweredClientOf(const Call& call) const {
  return ClientOf(call, api_keys_ == nullptr ? std::nullopt : api_keys_->Find(call.authorization));
}

ByteBudget::Hold ServiceCore::BeingWritten(ByteBudget::Hold inner) const {
  // The budget's hold goes back before the count falls, so that QuietFor never sees no answer
  // being written while LastAnswerEnd still predates this one.
  return ByteBudget::Hold(nullptr, [this, inner = std::move(inner)](const void*) mutable {
    inner.reset();
    answers_being_written_.fetch_sub(1);
  });
}

bool ServiceCore::QuietFor(absl::Duration linger) const {
  return inflight_.load() == 0 && answers_being_written_.load() == 0 &&
         absl::Now() >= LastAnswerEnd() + linger;
}

void ServiceCore::RecordBusy() const { metrics_->RecordRejection("concurrency_limit"); }

void ServiceCore::RecordRejection(absl::string_view reason) const {
  metrics_->RecordRejection(reason);
}

absl::Status ServiceCore::Authenticate(const Call& call) const { return KeyOf(call).status(); }

absl::StatusOr<std::optional<int>> ServiceCore::KeyOf(const Call& call) const {
  if (api_keys_ == nullptr) return std::nullopt;
  if (const std::optional<int> key = api_keys_->Find(call.authorization); key.has_value()) {
    return key;
  }
  metrics_->RecordRejection("unauthenticated");
  // "Bearer" alone sends no key either.
  const absl::string_view authorization = absl::StripAsciiWhitespace(call.authorization);
  if (authorization.empty() || absl::EqualsIgnoreCase(authorization, "bearer")) {
    return absl::UnauthenticatedError(
        "no API key: send the header `authorization: Bearer <key>` with a key of the server's "
        "--api_keys_file");
  }
  // The scheme alone is named: the rest may be a credential.
  const absl::string_view scheme = authorization.substr(0, authorization.find(' '));
  if (!absl::EqualsIgnoreCase(scheme, "bearer")) {
    return absl::UnauthenticatedError(absl::StrCat(
        "authorization scheme '", absl::CHexEscape(scheme.substr(0, 32)),
        "': expected Bearer; send `authorization: Bearer <key>` with a key of the server's "
        "--api_keys_file"));
  }
  return absl::UnauthenticatedError(
      "the API key is not one of the server's --api_keys_file keys: send "
      "`authorization: Bearer <key>` with a valid key");
}

std::string ServiceCore::ModelLabel(const std::string* model) const {
  if (model == nullptr || !ready_.load()) return "";
  absl::StatusOr<const LoadedModel*> found = runner_->FindModel(*model);
  return found.ok() ? (*found)->name() : "";
}

absl::Status ServiceCore::ListModels(const Call& call, const v1::ListModelsRequest&,
                                     v1::ListModelsResponse* response) {
  return Serve(call, "ListModels", /*model=*/nullptr, response, "", [&](const CallCheck& /*check*/) -> absl::Status {
    for (const auto& model : runner_->models()) ToProto(*model, response->add_models());
    return absl::OkStatus();
  });
}

absl::Status ServiceCore::GetModelInfo(const Call& call, const v1::GetModelInfoRequest& request,
                                       v1::ModelInfo* response) {
  return Serve(call, "GetModelInfo", &request.model(), response, "", [&](const CallCheck& /*check*/) -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const LoadedModel* model, runner_->FindModel(request.model()));
    ToProto(*model, response);
    return absl::OkStatus();
  });
}

absl::Status ServiceCore::Tokenize(const Call& call, const v1::TokenizeRequest& request,
                                   v1::TokenizeResponse* response) {
  return Serve(call, "Tokenize", &request.model(), response, kTokenizeFixes, [&](const CallCheck& /*check*/) -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const TokenizeQuery query, ToQuery(request));
    ATTNSCOPE_ASSIGN_OR_RETURN(const TokenizeAnswer answer, runner_->Tokenize(query));
    response->set_model(answer.model->name());
    ToProto(answer.tokens, response->mutable_tokens());
    return absl::OkStatus();
  });
}

absl::Status ServiceCore::GetAttention(const Call& call, const v1::GetAttentionRequest& request,
                                       v1::GetAttentionResponse* response) {
  absl::StatusOr<AttentionQuery> query = ToQuery(request);
  const std::string fixes = query.ok() ? AttentionFixes(*query) : "";
  return Serve(call, "GetAttention", &request.model(), response, fixes,
               [&](const CallCheck& check, const std::string& client) -> absl::Status {
                 if (!query.ok()) return query.status();
                 ATTNSCOPE_ASSIGN_OR_RETURN(
                     const AttentionAnswer answer,
                     runner_->RunAttention(*query, check, Delivery::kUnary, client));
                 return ToProto(answer, response);
               });
}

absl::Status ServiceCore::StreamAttention(const Call& call, const v1::GetAttentionRequest& request,
                                          const StreamWriter& write) {
  return Serve(
      call, "StreamAttention", &request.model(), nullptr, "",
      [&](const CallCheck& check, const std::string& client) -> absl::Status {
        ATTNSCOPE_ASSIGN_OR_RETURN(const AttentionQuery query, ToQuery(request));
        ATTNSCOPE_ASSIGN_OR_RETURN(const AttentionAnswer answer,
                                   runner_->RunAttention(query, check, Delivery::kStream, client));
        int64_t bytes = 0;
        ATTNSCOPE_RETURN_IF_ERROR(WriteStream(answer, options_.max_stream_message_bytes,
                                              [&](const v1::StreamAttentionResponse& message) {
                                                bytes +=
                                                    static_cast<int64_t>(message.ByteSizeLong());
                                                return write(message);
                                              }));
        metrics_->RecordResponseBytes(bytes);
        return absl::OkStatus();
      });
}

absl::Status ServiceCore::Encode(const Call& call, const v1::EncodeRequest& request,
                                 v1::EncodeResponse* response) {
  return Serve(call, "Encode", &request.model(), response, kEncodeFixes,
               [&](const CallCheck& check, const std::string& client) -> absl::Status {
                 ATTNSCOPE_ASSIGN_OR_RETURN(const EncodeQuery query, ToQuery(request));
                 ATTNSCOPE_ASSIGN_OR_RETURN(const EncodeAnswer answer,
                                            runner_->RunEncode(query, check, client));
                 return ToProto(answer, response);
               });
}

absl::Status ServiceCore::CrossAttention(const Call& call, const v1::CrossAttentionRequest& request,
                                         v1::CrossAttentionResponse* response) {
  return Serve(call, "CrossAttention", &request.model(), response, kCrossAttentionFixes,
               [&](const CallCheck& check, const std::string& client) -> absl::Status {
                 ATTNSCOPE_ASSIGN_OR_RETURN(const CrossAttentionQuery query, ToQuery(request));
                 ATTNSCOPE_ASSIGN_OR_RETURN(const CrossAttentionAnswer answer,
                                            runner_->RunCrossAttention(query, check, client));
                 return ToProto(answer, response);
               });
}

absl::Status ServiceCore::ListParameters(const Call& call, const v1::ListParametersRequest& request,
                                         v1::ListParametersResponse* response) {
  return Serve(call, "ListParameters", &request.model(), response, "", [&](const CallCheck& /*check*/) -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const ParameterListAnswer answer,
                               runner_->ListParameters(request.model()));
    ToProto(answer, response);
    return absl::OkStatus();
  });
}

absl::Status ServiceCore::GetParameter(const Call& call, const v1::GetParameterRequest& request,
                                       v1::GetParameterResponse* response) {
  return Serve(call, "GetParameter", &request.model(), response,
               "ask for fewer rows or dtype DTYPE_FLOAT16", [&](const CallCheck& /*check*/) -> absl::Status {
                 ATTNSCOPE_ASSIGN_OR_RETURN(const ParameterQuery query, ToQuery(request));
                 ATTNSCOPE_ASSIGN_OR_RETURN(const ParameterAnswer answer,
                                            runner_->GetParameter(query));
                 return ToProto(answer, response);
               });
}

absl::Status ServiceCore::GetTrainingRecord(const Call& call,
                                            const v1::GetTrainingRecordRequest& request,
                                            v1::TrainingRecord* response) {
  return Serve(call, "GetTrainingRecord", &request.model(), response, "", [&](const CallCheck& /*check*/) -> absl::Status {
    ATTNSCOPE_ASSIGN_OR_RETURN(const TrainingRecordAnswer answer,
                               runner_->GetTrainingRecord(request.model()));
    ToProto(answer, response);
    return absl::OkStatus();
  });
}

absl::Status ServiceCore::Attribute(const Call& call, const v1::AttributeRequest& request,
                                    v1::AttributeResponse* response) {
  return Serve(call, "Attribute", &request.model(), response, kAttributeFixes,
               [&](const CallCheck& check, const std::string& client) -> absl::Status {
                 ATTNSCOPE_ASSIGN_OR_RETURN(const AttributeQuery query, ToQuery(request));
                 ATTNSCOPE_ASSIGN_OR_RETURN(const AttributeAnswer answer,
                                            runner_->RunAttribute(query, check, client));
                 ToProto(answer, response);
                 return absl::OkStatus();
               });
}

absl::Status ServiceCore::Generate(const Call& call, const v1::GenerateRequest& request,
                                   const GenerateWriter& write) {
  return Serve(call, "Generate", &request.model(), nullptr, "",
               [&](const CallCheck& check, const std::string& client) -> absl::Status {
                 ATTNSCOPE_ASSIGN_OR_RETURN(const GenerateQuery query, ToQuery(request));
                 int64_t bytes = 0;
                 // The tokens sent count whether or not the call ends well: a cancelled or
                 // timed-out generation did that work too.
                 int64_t tokens_sent = 0;
                 absl::Cleanup count_tokens = [&] {
                   metrics_->RecordGeneratedTokens(ModelLabel(&request.model()), tokens_sent);
                 };
                 auto send = [&](const v1::GenerateResponse& message) {
                   bytes += static_cast<int64_t>(message.ByteSizeLong());
                   return write(message);
                 };
                 ATTNSCOPE_ASSIGN_OR_RETURN(const GenerateSummary summary,
                                            runner_->RunGenerate(
                                                query, check,
                                                [&](const GenerateHeader& header) {
                                                  v1::GenerateResponse message;
                                                  ToProto(header, message.mutable_header());
                                                  return send(message);
                                                },
                                                [&](const GenerateStep& step) -> absl::Status {
                                                  v1::GenerateResponse message;
                                                  ATTNSCOPE_RETURN_IF_ERROR(ToProto(
                                                      step, query.dtype, message.mutable_token()));
                                                  ATTNSCOPE_RETURN_IF_ERROR(send(message));
                                                  ++tokens_sent;
                                                  return absl::OkStatus();
                                                },
                                                client));
                 v1::GenerateResponse done;
                 ToProto(summary, done.mutable_done());
                 ATTNSCOPE_RETURN_IF_ERROR(send(done));
                 metrics_->RecordResponseBytes(bytes);
                 return absl::OkStatus();
               });
}

}  // namespace attnscope::server
