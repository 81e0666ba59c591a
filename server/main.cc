// attnscope-server: serves what transformer checkpoints attend to over gRPC, HTTP/JSON and Connect,
// with Prometheus metrics and the dashboard. Every flag is defined here; the rest of the server
// takes Options structs.
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "models/kernels/gemm.h"
#include "server/server.h"

namespace {

// The value of the repeatable --model flag: every NAME=DIR given so far. Abseil replaces a flag's
// value on each occurrence, so the parser accumulates the occurrences itself (commas also separate
// entries).
struct ModelSpecs {
  std::vector<std::string> specs;
};

std::vector<std::string>& AllModelSpecs() {
  static auto* specs = new std::vector<std::string>();
  return *specs;
}

bool AbslParseFlag(absl::string_view text, ModelSpecs* value, std::string* /*error*/) {
  for (absl::string_view spec : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    AllModelSpecs().emplace_back(spec);
  }
  value->specs = AllModelSpecs();
  return true;
}

std::string AbslUnparseFlag(const ModelSpecs& value) { return absl::StrJoin(value.specs, ","); }

const attnscope::server::ServerOptions kDefaults;

// Abseil reads a --flagfile whole, whatever it is: /dev/zero or a FIFO would never end. Each file
// named by --flagfile (--flagfile=A,B or --flagfile A, one or two dashes) must be a regular file
// of at most 1 MB; OK or the reason, naming the file.
absl::Status CheckFlagfiles(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    absl::ConsumePrefix(&arg, "-");
    absl::ConsumePrefix(&arg, "-");
    if (!absl::ConsumePrefix(&arg, "flagfile")) continue;
    absl::string_view files;
    if (absl::ConsumePrefix(&arg, "=")) {
      files = arg;
    } else if (arg.empty() && i + 1 < argc) {
      files = argv[++i];
    } else {
      continue;
    }
    for (absl::string_view file : absl::StrSplit(files, ',', absl::SkipEmpty())) {
      const absl::Status status =
          attnscope::CheckRegularFile(std::string(file), /*max_bytes=*/1 << 20);
      if (!status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--flagfile: ", status.message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

ABSL_FLAG(ModelSpecs, model, {},
          "A model to serve as NAME=DIR (a Hugging Face checkpoint directory); repeatable. With "
          "no --model and no --model_repository, the built-in checkpoints/default is served.");
ABSL_FLAG(std::string, model_repository, "",
          "A folder whose subdirectories containing a config.json are served, each named after "
          "its subdirectory; hidden ones (.ipynb_checkpoints, .git) are skipped.");
ABSL_FLAG(std::string, listen, kDefaults.listen,
          "gRPC listen address host:port; port 0 picks a free port (printed at start-up).");
ABSL_FLAG(int, metrics_port, kDefaults.metrics_port,
          "Port of the Prometheus /metrics endpoint; 0 disables it.");
ABSL_FLAG(std::string, metrics_host, kDefaults.metrics_host,
          "Address /metrics binds: 0.0.0.0 for a Prometheus elsewhere, 127.0.0.1 to keep it on "
          "the machine. Plain HTTP without API keys.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain: the gRPC and HTTP listeners speak TLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA certificates: clients must present a certificate signed by one (mutual TLS).");
ABSL_FLAG(std::string, api_keys_file, "",
          "File of API keys, one per line ('#' starts a comment): every RPC must send "
          "`authorization: Bearer <key>` or gets UNAUTHENTICATED; health checks and /metrics "
          "need none.");
ABSL_FLAG(std::string, http_listen, kDefaults.http.listen,
          "HTTP/JSON API and dashboard address host:port (POST "
          "/attnscope.v1.AttentionService/<Method>, the dashboard at /); port 0 picks a free "
          "port; empty disables HTTP.");
ABSL_FLAG(int, http_threads, kDefaults.http.threads,
          "Most HTTP requests answered at once (each unary call and each stream holds a thread "
          "while it is answered); more wait for a free one. Idle connections and requests still "
          "being sent hold none.");
ABSL_FLAG(int, max_http_connections, kDefaults.http.max_connections,
          "HTTP connections open at once on --http_listen (each holds a descriptor): at the limit "
          "the one that has waited longest for a request (idle, or still sending its headers) is "
          "closed to make room for a new one; a new one is refused only while every connection "
          "is being answered.");
ABSL_FLAG(double, http_header_timeout_seconds,
          absl::ToDoubleSeconds(kDefaults.http.limits.header_timeout),
          "Longest an HTTP client may take to send a request's headers (and a new connection's "
          "first byte); then the connection is closed. Also on the /metrics port.");
ABSL_FLAG(double, http_body_timeout_seconds,
          absl::ToDoubleSeconds(kDefaults.http.limits.body_timeout),
          "Longest an HTTP client may take to send a request's body after its headers; then the "
          "connection is closed.");
ABSL_FLAG(double, http_idle_timeout_seconds,
          absl::ToDoubleSeconds(kDefaults.http.limits.idle_timeout),
          "How long a kept-alive HTTP connection may wait for its next request before it is "
          "closed; keep it above the idle timeout of a load balancer in front.");
ABSL_FLAG(double, write_timeout_seconds, absl::ToDoubleSeconds(kDefaults.http.limits.write_timeout),
          "Longest one write of an answer may wait for a client that does not read it, on both "
          "transports (a gRPC stream's message, an HTTP answer or a piece of an HTTP stream); "
          "then the call is cancelled and its slot freed.");
ABSL_FLAG(std::vector<std::string>, http_allowed_origins, {},
          "Comma-separated origins (scheme://host[:port]) whose web pages may call the HTTP API "
          "(CORS), besides the server's own, which the dashboard uses; * allows every origin. "
          "Requests with any other Origin get 403.");
ABSL_FLAG(std::vector<std::string>, http_allowed_hosts, {},
          "Comma-separated host names that requests to a loopback --http_listen or "
          "--metrics_host may carry in their Host header besides localhost, 127.0.0.1 and [::1] "
          "(others get 403, against DNS rebinding), e.g. the name a local proxy uses.");
ABSL_FLAG(std::string, dashboard_dir, ATTNSCOPE_DASHBOARD_DIR,
          "Folder of the built dashboard, served at / on --http_listen.");
ABSL_FLAG(int64_t, max_response_bytes, kDefaults.service.max_response_bytes,
          "Largest unary response in bytes; bigger ones fail with RESOURCE_EXHAUSTED. Clients "
          "need a receive limit at least this large.");
ABSL_FLAG(int64_t, max_stream_message_bytes, kDefaults.service.max_stream_message_bytes,
          "Largest tensor data in one StreamAttention message; larger layers are sent in pieces "
          "(by heads, then by query rows) that clients reassemble.");
ABSL_FLAG(int64_t, max_tokens, 0,
          "Longest accepted input in tokens, special tokens included; 0 = each model's own limit, "
          "its max_position_embeddings (less pad_token_id + 1 for RoBERTa) (a larger value is "
          "capped to it).");
ABSL_FLAG(std::string, compute_dtype, "float32",
          "Arithmetic of every model's projections: float32, or bfloat16 (weights converted at "
          "load, float32 sums; needs a CPU with AVX512_BF16 and a BERT-family or decoder-only "
          "model; attention probabilities within about 0.03 of float32's on trained weights, "
          "see docs/models.md).");
ABSL_FLAG(int, worker_threads, kDefaults.worker_threads,
          "Most gRPC threads serving calls, and HTTP/2 streams one connection may hold open (at "
          "least 100); calls beyond it get RESOURCE_EXHAUSTED. 0 = --max_concurrent_requests + "
          "16.");
ABSL_FLAG(int, max_concurrent_requests, kDefaults.service.max_concurrent_requests,
          "Calls handled at once, running or waiting their turn; more fail at once with "
          "RESOURCE_EXHAUSTED. 0 = no limit.");
ABSL_FLAG(int, max_concurrent_requests_per_client,
          kDefaults.service.max_concurrent_requests_per_client,
          "Calls one client may have handled at once, so that one client cannot hold every place "
          "of --max_concurrent_requests; more fail at once with RESOURCE_EXHAUSTED. A client is "
          "its API key with --api_keys_file, else its address (behind a proxy: the proxy). 0 = "
          "half of --max_concurrent_requests; equal to it: no share.");
ABSL_FLAG(int, max_grpc_connections, kDefaults.max_grpc_connections,
          "gRPC connections open at once: at the limit the one idle longest (else the one whose "
          "latest call began longest ago, 10 s or more) is closed with a GOAWAY to make room, "
          "else a new one is refused. 0 = as many as a third of the descriptor limit (ulimit "
          "-n), less 512, allows.");
ABSL_FLAG(int64_t, max_request_bytes, kDefaults.max_request_bytes,
          "Largest request in bytes on both transports: gRPC answers a bigger message with "
          "RESOURCE_EXHAUSTED, HTTP a bigger body with 413.");
ABSL_FLAG(int, max_inputs_per_request, kDefaults.service.max_inputs_per_request,
          "Most inputs of one Encode and documents of one CrossAttention; more get "
          "INVALID_ARGUMENT.");
ABSL_FLAG(int64_t, max_call_tokens, kDefaults.service.max_call_tokens,
          "Most token passes one call may run, every pass counted: a CrossAttention's documents, "
          "an Attribute's occluded tokens and integrated-gradients steps, a Generate's beams over "
          "the prompt and new tokens, each times their tokens. More get RESOURCE_EXHAUSTED before "
          "the first pass.");
ABSL_FLAG(int64_t, max_answer_bytes_in_flight, kDefaults.service.max_answer_bytes_in_flight,
          "Most bytes answers hold at once until their clients have read them: GetAttention's and "
          "StreamAttention's attention from before their forward pass, every other unary answer "
          "while it is written out (HTTP JSON at six times its binary size while printed); a call "
          "that would go over gets RESOURCE_EXHAUSTED (one call alone is always served). 0 = no "
          "limit.");
ABSL_FLAG(int64_t, max_answer_bytes_per_client, kDefaults.service.max_answer_bytes_per_client,
          "Most of --max_answer_bytes_in_flight the answers of one client (as "
          "--max_concurrent_requests_per_client counts clients) hold at once, so that one client "
          "reading slowly or not at all cannot hold it all; more get RESOURCE_EXHAUSTED (a "
          "client's first answer is always served; in the budget's last quarter at most an equal "
          "part among the clients holding answers and one more). 0 = half of "
          "--max_answer_bytes_in_flight; equal to it: no share.");
ABSL_FLAG(double, max_call_seconds, kDefaults.service.max_call_seconds,
          "Longest a call may run, in seconds, whatever deadline its caller sets (or none); then "
          "it ends with DEADLINE_EXCEEDED.");
ABSL_FLAG(int, max_batch_size, kDefaults.service.batching.max_batch_size,
          "Most inputs in one forward pass: concurrent GetAttention, StreamAttention, Encode and "
          "CrossAttention calls for the same model run as one padded batch. 1 = no batching "
          "across calls (one call's own inputs, an Encode of several texts, still run together).");
ABSL_FLAG(int64_t, max_batch_tokens, kDefaults.service.batching.max_batch_tokens,
          "Most padded tokens (inputs x longest input) in one forward pass of calls batched "
          "together; bounds its memory. One call's inputs longer than this still run, alone.");
ABSL_FLAG(int64_t, max_queue_delay_microseconds,
          absl::ToInt64Microseconds(kDefaults.service.batching.max_queue_delay),
          "How long a call may wait for others to fill its batch; 0 = batch only what queued "
          "while the previous pass ran (no added latency).");
ABSL_FLAG(double, shutdown_grace_seconds, kDefaults.shutdown_grace_seconds,
          "After SIGTERM/SIGINT, how long in-flight calls may run before they are cancelled.");

int main(int argc, char** argv) {
  attnscope::ReexecWithRuntimeEnvironment(argv);
  attnscope::RetainFreedHeapMemory();
  // Debian builds Abseil without NDEBUG, which turns on its mutex deadlock detection: every lock
  // of every absl::Mutex, gRPC's among them, then goes through one process-wide lock and a graph
  // of lock orders.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // The descriptor limit up to what the system allows, as Go and nginx do: each gRPC connection
  // holds three (--max_grpc_connections).
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  // Before any thread exists, so that every thread inherits the mask and only RunServer's
  // sigwait sees the shutdown signals.
  attnscope::server::BlockShutdownSignals();
  attnscope::server::IgnoreBrokenPipes();
  // --help lists the flags of this file; absl's default looks for a file named after the binary.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "server/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "Serves transformer attention over gRPC and HTTP/JSON.\n"
      "  attnscope-server --model bert=/models/bert [--model NAME=DIR ...] [--listen HOST:PORT]");
  if (const absl::Status flagfiles = CheckFlagfiles(argc, argv); !flagfiles.ok()) {
    std::fprintf(stderr, "attnscope-server: %s\n", std::string(flagfiles.message()).c_str());
    return 2;
  }
  absl::ParseCommandLine(argc, argv);

  attnscope::server::ModelSources sources;
  sources.specs = absl::GetFlag(FLAGS_model).specs;
  sources.repository = absl::GetFlag(FLAGS_model_repository);
  sources.default_dir = ATTNSCOPE_DEFAULT_MODEL_DIR;
  sources.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  const absl::StatusOr<attnscope::ComputeDtype> compute_dtype =
      attnscope::ParseComputeDtype(absl::GetFlag(FLAGS_compute_dtype));
  if (!compute_dtype.ok()) {
    std::fprintf(stderr, "attnscope-server: %s\n",
                 std::string(compute_dtype.status().message()).c_str());
    return 2;
  }
  sources.compute_dtype = *compute_dtype;
  absl::StatusOr<std::vector<attnscope::LoadedModel::Options>> models =
      attnscope::server::ResolveModels(sources);
  if (!models.ok()) {
    std::fprintf(stderr, "attnscope-server: %s\n", std::string(models.status().message()).c_str());
    return 2;
  }

  attnscope::server::ServerOptions options;
  options.models = *std::move(models);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.api_keys_file = absl::GetFlag(FLAGS_api_keys_file);
  options.http.listen = absl::GetFlag(FLAGS_http_listen);
  options.http.dashboard_dir = absl::GetFlag(FLAGS_dashboard_dir);
  options.http.threads = absl::GetFlag(FLAGS_http_threads);
  options.http.max_connections = absl::GetFlag(FLAGS_max_http_connections);
  // absl::Seconds makes NaN an infinite duration, which ValidateServerOptions would then report as
  // "inf": a NaN is refused here, under the value given.
  const std::pair<const char*, absl::Flag<double>*> timeouts[] = {
      {"--http_header_timeout_seconds", &FLAGS_http_header_timeout_seconds},
      {"--http_body_timeout_seconds", &FLAGS_http_body_timeout_seconds},
      {"--http_idle_timeout_seconds", &FLAGS_http_idle_timeout_seconds},
      {"--write_timeout_seconds", &FLAGS_write_timeout_seconds}};
  for (const auto& [flag, value] : timeouts) {
    if (std::isnan(absl::GetFlag(*value))) {
      std::fprintf(stderr, "attnscope-server: %s nan: expected seconds above 0\n", flag);
      return 2;
    }
  }
  options.http.limits.header_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_http_header_timeout_seconds));
  options.http.limits.body_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_body_timeout_seconds));
  options.http.limits.idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_http_idle_timeout_seconds));
  options.http.limits.write_timeout = absl::Seconds(absl::GetFlag(FLAGS_write_timeout_seconds));
  options.http.allowed_origins = absl::GetFlag(FLAGS_http_allowed_origins);
  options.http.allowed_hosts = absl::GetFlag(FLAGS_http_allowed_hosts);
  options.service.max_response_bytes = absl::GetFlag(FLAGS_max_response_bytes);
  options.service.max_concurrent_requests = absl::GetFlag(FLAGS_max_concurrent_requests);
  options.service.max_concurrent_requests_per_client =
      absl::GetFlag(FLAGS_max_concurrent_requests_per_client);
  options.service.max_stream_message_bytes = absl::GetFlag(FLAGS_max_stream_message_bytes);
  options.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  options.service.max_inputs_per_request = absl::GetFlag(FLAGS_max_inputs_per_request);
  options.service.max_call_tokens = absl::GetFlag(FLAGS_max_call_tokens);
  options.service.max_answer_bytes_in_flight = absl::GetFlag(FLAGS_max_answer_bytes_in_flight);
  options.service.max_answer_bytes_per_client = absl::GetFlag(FLAGS_max_answer_bytes_per_client);
  options.service.max_call_seconds = absl::GetFlag(FLAGS_max_call_seconds);
  options.service.batching.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  options.service.batching.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  options.service.batching.max_queue_delay =
      absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_microseconds));
  options.worker_threads = absl::GetFlag(FLAGS_worker_threads);
  options.max_grpc_connections = absl::GetFlag(FLAGS_max_grpc_connections);
  options.shutdown_grace_seconds = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  if (const absl::Status invalid = attnscope::server::ValidateServerOptions(options);
      !invalid.ok()) {
    std::fprintf(stderr, "attnscope-server: %s\n", std::string(invalid.message()).c_str());
    return 2;
  }
  const absl::Status status = attnscope::server::RunServer(options);
  if (!status.ok()) {
    std::fprintf(stderr, "attnscope-server: %s\n", status.ToString().c_str());
    // An address in use or a model that cannot be served is the start's configuration to change,
    // like a value refused above; 1 is left for a failure of the server itself.
    return status.code() == absl::StatusCode::kInternal ||
                   status.code() == absl::StatusCode::kUnknown
               ? 1
               : 2;
  }
  return 0;
}
