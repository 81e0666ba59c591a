// The transport-independent half of attnscope.v1.AttentionService, shared by the gRPC and the
// HTTP/JSON front ends: admission (loading, draining, the concurrency limit), metrics, the response
// size cap, and for each RPC one mapping of the request to the request layer and of its answer
// back (server/query_convert.h, server/proto_convert.h). A front end only turns its transport's
// call into a Call and the returned absl::Status into its own status.
#ifndef ATTNSCOPE_SERVER_SERVICE_CORE_H_
#define ATTNSCOPE_SERVER_SERVICE_CORE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "attnscope/v1/attnscope.pb.h"
#include "common/limits.h"
#include "models/requests/batcher.h"
#include "models/requests/byte_budget.h"
#include "server/metrics.h"
#include "server/security.h"

namespace attnscope {
class LoadedModel;
class RequestRunner;
}  // namespace attnscope

namespace attnscope::server {

struct ServiceOptions {
  // Unary responses whose serialized size would exceed this fail with RESOURCE_EXHAUSTED.
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
  // Calls handled at once, over both transports, running or waiting for their forward pass;
  // more fail with RESOURCE_EXHAUSTED at once. 0 = no limit. 64 takes 32 busy clients without a
  // refusal (16 refused 97% of such a load) while bounding the answers held in memory.
  int max_concurrent_requests = 64;
  // The calls one client may have handled at once, so that one client cannot hold every place of
  // max_concurrent_requests and have everyone else refused; more fail with RESOURCE_EXHAUSTED at
  // once. A client is its API key with --api_keys_file, else its address (Call::client_source);
  // behind a proxy, the proxy is one client. 0 = half of max_concurrent_requests (at least 1);
  // none when max_concurrent_requests is 0; equal to it turns the share off.
  int max_concurrent_requests_per_client = 0;
  // Largest tensor data in one StreamAttention message; bigger layers are sent in pieces. Well
  // under gRPC's default 4 MiB receive limit, so that any client reads any stream.
  int64_t max_stream_message_bytes = int64_t{1} << 20;
  // Most inputs of one Encode and documents of one CrossAttention; more get INVALID_ARGUMENT.
  int max_inputs_per_request = kDefaultMaxInputsPerRequest;
  // Most token passes one call may run (common/limits.h says how they count); a call asking for
  // more gets RESOURCE_EXHAUSTED before its first pass.
  int64_t max_call_tokens = kDefaultMaxCallTokens;
  // Longest a call may run, in seconds, whatever deadline its caller set (or none): then it ends
  // with DEADLINE_EXCEEDED at its next check (between layers, steps or batches of passes).
  double max_call_seconds = kDefaultMaxCallSeconds;
  // Most bytes of attention that GetAttention and StreamAttention answers hold at once, until
  // they are written out; a call that would go over gets RESOURCE_EXHAUSTED before its forward
  // pass (models/requests/byte_budget.h). 0 = no limit.
  int64_t max_answer_bytes_in_flight = kDefaultMaxAnswerBytesInFlight;
  // Most of those bytes the answers of one client (as max_concurrent_requests_per_client counts
  // them) may hold at once, so that one client cannot hold them all with answers it does not
  // read; its first answer is always served. 0 = half of max_answer_bytes_in_flight; equal to it
  // turns the share off.
  int64_t max_answer_bytes_per_client = 0;
  // Dynamic batching of forward passes (models/requests/batcher.h).
  ForwardBatcher::Options batching;
};

// Longest error message sent to a client, in bytes. gRPC carries the message in the trailing
// HTTP/2 headers, and a client refuses headers over its limit (8 KB by default) with a
// RESOURCE_EXHAUSTED of its own that hides the real error; longer messages are cut to this, on
// both transports so that they say the same.
inline constexpr size_t kMaxErrorMessageBytes = 4096;

// The message of `status` as sent to clients: cut to kMaxErrorMessageBytes at a UTF-8 character
// boundary, saying so.
std::string ClientMessage(const absl::Status& status);

// One call as a front end sees it.
struct Call {
  // The `transport` label of the request metrics: "grpc" or "http".
  absl::string_view transport;
  // Deadline and cancellation, checked before the forward pass and between layers; a non-OK
  // status (DeadlineExceeded, Cancelled) ends the call. `when` says at which point. May be empty.
  std::function<absl::Status(absl::string_view when)> check;
  // The `authorization` header's value ("Bearer <key>"), empty when absent.
  std::string authorization;
  // The client's source (SourceOf in server/client_addresses.h: its IPv4 address or IPv6 /64),
  // which max_concurrent_requests_per_client counts calls by when there are no API keys; empty
  // when unknown (then no per-client share applies).
  std::string client_source;
  // Set by a front end that holds a unary answer while it writes it out (HoldAnswerBytes): called
  // with the answer's serialized size, the call's client (ClientOf) and what makes the method's
  // answers smaller (for the refusal's message) once the method has succeeded, before the call is
  // counted, so that a refusal (the answer budget is full) is the call's status and counted as
  // such.
  std::function<absl::Status(int64_t answer_bytes, const std::string& client,
                             absl::string_view fixes)>
      keep_answer;
};

// UNAVAILABLE for a call still running when the shutdown's grace period is over; `when` says at
// which point it stopped.
absl::Status GraceOverError(absl::string_view when);

// A Call whose check fails with DeadlineExceeded once `deadline` has passed, and with Cancelled
// once `cancelled` (may be empty) returns true; the messages say when and what to change.
Call MakeCall(absl::string_view transport, std::chrono::system_clock::time_point deadline,
              std::function<bool()> cancelled, std::string authorization,
              std::string client_source = "");

// Writes one StreamAttention message; a non-OK status (the client went away) ends the stream.
using StreamWriter = std::function<absl::Status(const v1::StreamAttentionResponse&)>;
// Writes one Generate message; a non-OK status (the client went away) ends the generation.
using GenerateWriter = std::function<absl::Status(const v1::GenerateResponse&)>;

class ServiceCore {
 public:
  // `api_keys` (may be null: no authentication) must outlive the core; with keys, every call
  // without a valid one fails with UNAUTHENTICATED before anything else is looked at.
  ServiceCore(ServiceOptions options, Metrics* metrics, const ApiKeys* api_keys = nullptr);
  ~ServiceCore();

  // Hands over the loaded models; until then every call fails with UNAVAILABLE. Call once.
  void SetModels(std::vector<std::unique_ptr<LoadedModel>> models);
  // New calls fail with UNAVAILABLE from now on; calls in flight finish.
  void StartDraining() { draining_.store(true); }
  // Calls still running at `when` end at their next check with GraceOverError, saying why, before
  // gRPC's own Shutdown deadline, a little later, cancels what is left with a bare "Cancelling
  // all calls".
  void EndGraceAt(absl::Time when) { grace_end_nanos_.store(absl::ToUnixNanos(when)); }

  // The RPCs of attnscope.proto. Each returns the call's status (the codes of the contract) and
  // fills `response` only when it is OK.
  absl::Status ListModels(const Call& call, const v1::ListModelsRequest& request,
                          v1::ListModelsResponse* response);
  absl::Status GetModelInfo(const Call& call, const v1::GetModelInfoRequest& request,
                            v1::ModelInfo* response);
  absl::Status Tokenize(const Call& call, const v1::TokenizeRequest& request,
                        v1::TokenizeResponse* response);
  absl::Status GetAttention(const Call& call, const v1::GetAttentionRequest& request,
                            v1::GetAttentionResponse* response);
  // OK when the server takes no API keys or `call` carries a valid one; UNAUTHENTICATED (counted
  // in the metrics) otherwise. Every RPC method checks it first; the HTTP front end also checks
  // it before it starts a stream, so that a refusal is an HTTP error rather than a stream's last
  // line.
  absl::Status Authenticate(const Call& call) const;
  // A call of method `rpc` refused before the method ran (its request message did not parse, or
  // a front end refused it: too large, unauthenticated, the wrong HTTP method or codec), counted
  // in attnscope_requests_total with `code` and no model, as every call is counted. `seconds`:
  // how long the refusal took (0 for one made on the request's headers).
  void RecordRefused(absl::string_view rpc, absl::string_view transport, absl::StatusCode code,
                     double seconds = 0) const;
  // Holds `bytes` of the answer budget (--max_answer_bytes_in_flight) for `what`, an answer of
  // `client` (Call::keep_answer's, or AnsweredClientOf), while a front end writes out a
  // serialized answer of that size (RequestRunner::ReserveAnswerBytes); an empty hold before the
  // models are loaded. RESOURCE_EXHAUSTED naming the flag when the answers held would take the
  // total, or the client's answers its share (--max_answer_bytes_per_client), over it.
  // `fixes`: what makes the answer smaller, named in the refusal (AnswerFixes).
  absl::StatusOr<ByteBudget::Hold> HoldAnswerBytes(const std::string& client, int64_t bytes,
                                                   absl::string_view what,
                                                   absl::string_view fixes) const;
  // What makes the answers of method `rpc` smaller ("send fewer inputs per call, ..."), as its
  // too-large refusals say; empty for methods whose answers are small.
  static absl::string_view AnswerFixes(absl::string_view rpc);
  // `wide`, a hold of HoldAnswerBytes for `client` of at least `bytes`, made a hold of `bytes`
  // (ByteBudget::Narrow): for a printed answer, held at its printing's bound until printed.
  ByteBudget::Hold NarrowAnswerBytes(const std::string& client, ByteBudget::Hold wide,
                                     int64_t bytes) const;
  // The client of `call`, whose method has run (its key, if the server takes keys, was valid),
  // for a front end that holds its answer outside the call (gRPC's interceptor).
  std::string AnsweredClientOf(const Call& call) const;
  // When the last call that was not refused ended (absl::InfinitePast() before any): its method
  // returned (a stream's last message written), or the answer it held by HoldAnswerBytes was
  // written out, whichever came later. How long ago a client may still have been reading.
  absl::Time LastAnswerEnd() const;
  // True when no call is running, no answer held by HoldAnswerBytes is still being written, and
  // the last answer ended at least `linger` ago: its client has had that long to read it.
  bool QuietFor(absl::Duration linger) const;
  // An HTTP request refused before any method ran because every HTTP thread was busy and
  // --max_concurrent_requests more waited: counted as the concurrency limit's rejection.
  void RecordBusy() const;
  // A call refused by an admission limit of a front end's own, counted with `reason` in
  // attnscope_rejected_requests_total (one of Metrics' reasons).
  void RecordRejection(absl::string_view reason) const;

  absl::Status StreamAttention(const Call& call, const v1::GetAttentionRequest& request,
                               const StreamWriter& write);
  absl::Status Encode(const Call& call, const v1::EncodeRequest& request,
                      v1::EncodeResponse* response);
  absl::Status CrossAttention(const Call& call, const v1::CrossAttentionRequest& request,
                              v1::CrossAttentionResponse* response);
  absl::Status ListParameters(const Call& call, const v1::ListParametersRequest& request,
                              v1::ListParametersResponse* response);
  absl::Status GetParameter(const Call& call, const v1::GetParameterRequest& request,
                            v1::GetParameterResponse* response);
  absl::Status GetTrainingRecord(const Call& call, const v1::GetTrainingRecordRequest& request,
                                 v1::TrainingRecord* response);
  absl::Status Attribute(const Call& call, const v1::AttributeRequest& request,
                         v1::AttributeResponse* response);
  absl::Status Generate(const Call& call, const v1::GenerateRequest& request,
                        const GenerateWriter& write);

 private:
  class Observer;

  // Admission, metrics and the size cap around `handler`, which is called with the call's check
  // bounded by max_call_seconds. `model` is the requested model's name
  // (null for calls about no model), for the metrics' model label. `response` (null for streams)
  // is size-checked and recorded; `fixes` names what shrinks it.
  template <typename Handler>
  absl::Status Serve(const Call& call, absl::string_view rpc, const std::string* model,
                     const google::protobuf::Message* response, absl::string_view fixes,
                     Handler&& handler);
  // The model label of a call: the name of the model `model` resolves to, or "" (see
  // Metrics::RecordRequest).
  std::string ModelLabel(const std::string* model) const;
  // The line of the valid API key `call` carries, nullopt when the server takes no keys;
  // UNAUTHENTICATED (counted in the metrics) otherwise. Authenticate's check, with the key.
  absl::StatusOr<std::optional<int>> KeyOf(const Call& call) const;
  // Who `call` counts under for max_concurrent_requests_per_client and
  // max_answer_bytes_per_client: its `key` (KeyOf) with API keys, else its source; "" when there
  // is no way to tell.
  std::string ClientOf(const Call& call, std::optional<int> key) const;
  // `inner`, a hold of the answer budget, counted among answers_being_written_ (already
  // incremented for it) until it ends.
  ByteBudget::Hold BeingWritten(ByteBudget::Hold inner) const;
  struct ClientCalls {
    int calls = 0;    // of the client
    int clients = 0;  // with calls under way, the client among them if calls > 0
  };
  // Adds `change` (+1 or -1) to the calls `client` has under way and returns the new counts.
  ClientCalls CountClientCall(const std::string& client, int change);
  // The most calls one client may have under way when `inflight` calls are (its own counted) and
  // `clients` clients have some: its share (max_client_inflight_), and in the last quarter of
  // --max_concurrent_requests an equal part of them among those clients and one more, so that
  // two or three busy clients cannot fill the server between them (two addresses each keeping
  // their share of unread streams had every other client refused). Not with the share at the
  // whole limit (one client, such as a balancer, may take every call).
  int ClientCallLimit(int inflight, int clients) const;

  const ServiceOptions options_;
  Metrics* const metrics_;
  const ApiKeys* const api_keys_;
  std::unique_ptr<Observer> observer_;
  std::unique_ptr<RequestRunner> runner_;  // written once before ready_
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> grace_end_nanos_{std::numeric_limits<int64_t>::max()};
  std::atomic<int> inflight_{0};
  // Calls handled now for each client with any (its key's line in the keys file, or its source),
  // and the most each may have.
  absl::Mutex clients_mutex_;
  absl::flat_hash_map<std::string, int> client_inflight_ ABSL_GUARDED_BY(clients_mutex_);
  int max_client_inflight_ = 0;
  // Holds handed out by HoldAnswerBytes and not yet released: answers being written.
  mutable std::atomic<int> answers_being_written_{0};
  std::atomic<int64_t> last_call_end_nanos_{std::numeric_limits<int64_t>::min()};
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_SERVICE_CORE_H_
