#include "server/server.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/grpc.h>
#include <grpc/support/log.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/kernels/blas_check.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/row_kernel.h"
#include "server/answer_write_interceptor.h"
#include "server/attention_service.h"
#include "server/builtin_streams.h"
#include "server/grpc_front.h"
#include "server/http2_frames.h"
#include "server/listen_address.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/parse_failure_interceptor.h"
#include "server/security.h"
#include "server/worker_pool.h"

namespace attnscope::server {
namespace {

// How long a draining server answers new calls with UNAVAILABLE before gRPC's Shutdown: longer
// than a call takes to get from the socket to a handler thread on a busy machine.
constexpr absl::Duration kDrainSettleTime = absl::Milliseconds(250);
// After the grace period, how long gRPC calls get to stop with their own message before gRPC
// cancels them.
constexpr absl::Duration kGrpcLastWords = absl::Milliseconds(500);
// How long after its last answer's write a draining server waits before gRPC's Shutdown, within
// the grace, for clients to read their last bytes (RunServer). A client of a 144 MiB attention
// stream (BERT-base shape, 512 tokens) was still reading 500 ms after the server had sent it all.
constexpr absl::Duration kLastBytesLinger = absl::Seconds(2);
// How often a draining server looks at whether its calls are done.
constexpr absl::Duration kQuietPoll = absl::Milliseconds(20);
// How often a serving process looks at whether to give the memory that its freed allocations left
// in glibc's arenas back to the system.
constexpr time_t kTrimEverySeconds = 10;
// How far resident memory may stay above its idle level (after the trim at start) before a trim.
// A large call's buffers come back at the next such call (a 400-token GetAttention of a 12-layer
// BERT with every layer's attention: about 190 MB), and faulting them in again after each trim
// made that call about a second slower on a loaded 2-core machine; a burst of many large answers
// leaves far more (800 MB above idle), which the trim hands back. Measured from the idle level,
// not from the level after the last trim: a trim during a burst, while its memory was still in
// use, left 650 MB held for good after it.
constexpr int64_t kRetainedAboveTrimmedBytes = int64_t{256} << 20;

// Resident memory of this process in bytes (/proc/self/statm), or 0 when it cannot be read.
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size_pages = 0;
  int64_t resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return statm ? resident_pages * sysconf(_SC_PAGESIZE) : 0;
}

// SIGTERM and SIGINT drain and stop. SIGHUP, SIGUSR1 and SIGUSR2 would otherwise end the process
// at once with no word (their default action): an ssh session closing on a server started without
// nohup, or an operator trying a reload, took the service down. They are logged and ignored.
constexpr int kIgnoredSignals[] = {SIGHUP, SIGUSR1, SIGUSR2};

sigset_t ShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  for (const int ignored : kIgnoredSignals) sigaddset(&signals, ignored);
  return signals;
}

bool IsStopSignal(int signal_number) { return signal_number == SIGTERM || signal_number == SIGINT; }

// "HOST:PORT" with the port replaced by the one actually bound (--listen may ask for port 0).
std::string BoundAddress(const std::string& listen, int port) {
  const size_t colon = listen.rfind(':');
  return absl::StrCat(colon == std::string::npos ? listen : listen.substr(0, colon), ":", port);
}

// --metrics_host as the start-up line shows it before ":PORT": empty (every interface) as nothing,
// an IPv6 address in brackets.
std::string MetricsAddress(const std::string& host) {
  const bool bare_ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  return bare_ipv6 ? absl::StrCat("[", host, "]") : host;
}

// The handler of a second SIGTERM or SIGINT (RunServer): async-signal-safe calls only.
void StopNow(int signal_number) {
  static constexpr char kTerm[] = "attnscope-server: second SIGTERM received, stopping now\n";
  static constexpr char kInt[] = "attnscope-server: second SIGINT received, stopping now\n";
  if (signal_number == SIGTERM) {
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kTerm, sizeof(kTerm) - 1);
  } else {
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, kInt, sizeof(kInt) - 1);
  }
  _exit(128 + signal_number);
}

// The handler of SIGHUP, SIGUSR1 and SIGUSR2 during the drain (RunServer): the same line as before
// it, with async-signal-safe calls only.
void IgnoreDuringDrain(int signal_number) {
  static constexpr char kHup[] = "attnscope-server: SIGHUP received and ignored while draining\n";
  static constexpr char kUsr1[] = "attnscope-server: SIGUSR1 received and ignored while draining\n";
  static constexpr char kUsr2[] = "attnscope-server: SIGUSR2 received and ignored while draining\n";
  const char* line = signal_number == SIGHUP ? kHup : signal_number == SIGUSR1 ? kUsr1 : kUsr2;
  size_t length = 0;
  while (line[length] != '\0') ++length;
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line, length);
}

}  // namespace

void BlockShutdownSignals() {
  const sigset_t signals = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

void IgnoreBrokenPipes() { signal(SIGPIPE, SIG_IGN); }

absl::StatusOr<std::vector<LoadedModel::Options>> ResolveModels(const ModelSources& sources) {
  std::vector<LoadedModel::Options> models;
  std::set<std::string> names;
  auto add = [&](const std::string& name, const std::string& dir) -> absl::Status {
    // Requests select models by name, and a name must never read as a path.
    const bool name_is_plain =
        !name.empty() && name.front() != '.' && std::all_of(name.begin(), name.end(), [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                 c == '.';
        });
    if (!name_is_plain) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model name '", name,
          "': expected letters, digits, '-', '_' and '.' (not first), e.g. --model bert=DIR; a "
          "name is what requests select the model by, never a path"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model name '", name,
                       "' is given twice; give each --model (and each subdirectory of "
                       "--model_repository) its own name"));
    }
    models.push_back({name, dir, sources.max_tokens, sources.compute_dtype});
    return absl::OkStatus();
  };
  for (const std::string& spec : sources.specs) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == spec.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model '", spec, "': expected NAME=DIR, e.g. --model bert=/models/bert"));
    }
    if (absl::Status status = add(spec.substr(0, equals), spec.substr(equals + 1)); !status.ok()) {
      return status;
    }
  }
  if (!sources.repository.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(sources.repository, error)) {
      return absl::NotFoundError(absl::StrCat("--model_repository '", sources.repository,
                                              "': not a directory; give a folder of checkpoint "
                                              "directories"));
    }
    std::vector<std::filesystem::path> dirs;
    for (const auto& entry : std::filesystem::directory_iterator(sources.repository, error)) {
      // Hidden folders are tools' (.ipynb_checkpoints, .git, .cache), not models, and a name
      // starting with '.' is no model name: one stopped the whole server from starting.
      if (entry.path().filename().string().front() == '.') continue;
      if (entry.is_directory() && FileExists(JoinPath(entry.path().string(), "config.json"))) {
        dirs.push_back(entry.path());
      }
    }
    std::sort(dirs.begin(), dirs.end());
    if (dirs.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model_repository '", sources.repository,
                       "': no subdirectory with a config.json; put each checkpoint in its own "
                       "subdirectory"));
    }
    for (const auto& dir : dirs) {
      if (absl::Status status = add(dir.filename().string(), dir.string()); !status.ok()) {
        return status;
      }
    }
  }
  if (models.empty()) {
    if (sources.default_dir.empty() || !FileExists(JoinPath(sources.default_dir, "config.json"))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no model to serve: pass --model NAME=DIR (e.g. --model bert=/models/bert) or "
          "--model_repository DIR; the built-in default model (",
          sources.default_dir.empty() ? "none" : sources.default_dir, ") is not there"));
    }
    models.push_back({"default", sources.default_dir, sources.max_tokens, sources.compute_dtype});
  }
  return models;
}

namespace {

// Whether two listeners on `a` and `b` would bind the same address: the same host, or either on
// every address.
bool SameAddress(const ListenAddress& a, const ListenAddress& b) {
  if (a.port == 0 || a.port != b.port) return false;
  const auto every = [](const std::string& host) {
    return host.empty() || host == "0.0.0.0" || host == "::";
  };
  const auto normal = [](const std::string& host) {
    return host == "localhost" ? std::string("127.0.0.1") : host;
  };
  return every(a.host) || every(b.host) || normal(a.host) == normal(b.host);
}

}  // namespace

absl::Status ValidateServerOptions(const ServerOptions& options) {
  constexpr int kMaxPort = 65535;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const ListenAddress grpc_address,
      ParseListenAddress("--listen", options.listen, "0.0.0.0:50051 or [::1]:50051"));
  std::optional<ListenAddress> http_address;
  if (!options.http.listen.empty()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        http_address, ParseListenAddress("--http_listen", options.http.listen,
                                         "127.0.0.1:8080 or 0.0.0.0:8080 ('' disables it)"));
    ATTNSCOPE_RETURN_IF_ERROR(HttpServer::ValidateOptions(options.http));
  }
  if (options.metrics_port < 0 || options.metrics_port > kMaxPort) {
    return absl::InvalidArgumentError(absl::StrCat("--metrics_port ", options.metrics_port,
                                                   ": expected a port in [0, ", kMaxPort,
                                                   "] (0 disables /metrics)"));
  }
  // Each listener needs an address of its own; without this the second to bind failed as if the
  // port were taken by another program, naming its own flag.
  const ListenAddress metrics_address{options.metrics_host, options.metrics_port};
  const std::string metrics_flags = absl::StrCat("--metrics_host '", options.metrics_host,
                                                 "' and --metrics_port ", options.metrics_port);
  const auto clash = [](absl::string_view first, absl::string_view second, int port) {
    return absl::InvalidArgumentError(absl::StrCat(first, " and ", second,
                                                   ": expected different ports, got ", port,
                                                   " for both; give each its own port"));
  };
  if (SameAddress(grpc_address, metrics_address)) {
    return clash(absl::StrCat("--listen '", options.listen, "'"), metrics_flags, grpc_address.port);
  }
  if (http_address.has_value()) {
    const std::string http_flag = absl::StrCat("--http_listen '", options.http.listen, "'");
    if (SameAddress(*http_address, grpc_address)) {
      return clash(absl::StrCat("--listen '", options.listen, "'"), http_flag, grpc_address.port);
    }
    if (SameAddress(*http_address, metrics_address)) {
      return clash(http_flag, metrics_flags, http_address->port);
    }
  }
  if (options.service.max_response_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_response_bytes ", options.service.max_response_bytes,
                     ": expected at least 1 byte, got ", options.service.max_response_bytes,
                     "; the default is ", kDefaultMaxResponseBytes));
  }
  if (options.max_request_bytes < 1 || options.max_request_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_request_bytes ", options.max_request_bytes, ": expected 1 to ",
                     INT32_MAX, " bytes (gRPC's limit); the default is ", kDefaultMaxRequestBytes));
  }
  if (options.service.max_inputs_per_request < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_inputs_per_request ", options.service.max_inputs_per_request,
        ": expected at least 1; the default is ", ServiceOptions().max_inputs_per_request));
  }
  if (options.service.max_stream_message_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_stream_message_bytes ", options.service.max_stream_message_bytes,
        ": expected at least 1 byte; the default is ", ServiceOptions().max_stream_message_bytes));
  }
  if (options.service.max_answer_bytes_in_flight < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_answer_bytes_in_flight ", options.service.max_answer_bytes_in_flight,
                     ": expected bytes, at least 0 (0 = no limit); the default is ",
                     kDefaultMaxAnswerBytesInFlight));
  }
  if (options.service.max_answer_bytes_per_client < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_answer_bytes_per_client ", options.service.max_answer_bytes_per_client,
                     ": expected bytes, at least 0 (0 = half of --max_answer_bytes_in_flight)"));
  }
  if (options.service.max_call_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_call_tokens ", options.service.max_call_tokens,
        ": expected at least 1 token pass; the default is ", kDefaultMaxCallTokens));
  }
  // A call's ceiling is its start plus this on a clock counting nanoseconds in 64 bits: 1e10 s
  // overflowed it, and every call ended at once with DEADLINE_EXCEEDED.
  constexpr double kMaxCallSeconds = 1e8;
  if (!(options.service.max_call_seconds > 0 &&
        options.service.max_call_seconds <= kMaxCallSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_call_seconds ", options.service.max_call_seconds,
                     ": expected seconds above 0 and at most ", kMaxCallSeconds,
                     " (three years); the default is ", kDefaultMaxCallSeconds));
  }
  for (const LoadedModel::Options& model : options.models) {
    if (model.max_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max_tokens ", model.max_tokens, ": expected 0 (each model's own limit) or more"));
    }
  }
  const ForwardBatcher::Options& batching = options.service.batching;
  if (batching.max_batch_size < 1 || batching.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_batch_size ", batching.max_batch_size, " / --max_batch_tokens ",
                     batching.max_batch_tokens,
                     ": expected at least 1 each; --max_batch_size 1 turns dynamic batching off"));
  }
  const std::pair<const char*, absl::Duration> timeouts[] = {
      {"--http_header_timeout_seconds", options.http.limits.header_timeout},
      {"--http_body_timeout_seconds", options.http.limits.body_timeout},
      {"--http_idle_timeout_seconds", options.http.limits.idle_timeout},
      {"--write_timeout_seconds", options.http.limits.write_timeout}};
  for (const auto& [flag, value] : timeouts) {
    if (!(value > absl::ZeroDuration()) || value > absl::Seconds(kMaxCallSeconds)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", absl::ToDoubleSeconds(value),
                                                     ": expected seconds above 0 and at most ",
                                                     kMaxCallSeconds));
    }
  }
  // Upper bounds: a queue delay waits before the call's deadline is looked at (10^9 us held every
  // call with no answer), threads are threads of the process, and a grace is a wait at shutdown.
  const std::tuple<const char*, double, double> counts[] = {
      {"--max_queue_delay_microseconds", absl::ToDoubleMicroseconds(batching.max_queue_delay), 1e7},
      {"--worker_threads", options.worker_threads, HttpServer::kMaxHttpThreads},
      {"--max_concurrent_requests", options.service.max_concurrent_requests, 1e6},
      {"--max_concurrent_requests_per_client", options.service.max_concurrent_requests_per_client,
       1e6},
      {"--max_grpc_connections", options.max_grpc_connections, 1e6},
      {"--shutdown_grace_seconds", options.shutdown_grace_seconds, 3600}};
  for (const auto& [flag, value, most] : counts) {
    if (!(value >= 0 && value <= most)) {
      // %.15g: StrCat's six digits showed --worker_threads 2147483647 as 2.14748e+09.
      return absl::InvalidArgumentError(
          absl::StrFormat("%s %.15g: expected a value from 0 to %.15g", flag, value, most));
    }
  }
  ATTNSCOPE_RETURN_IF_ERROR(ValidateTlsOptions(options.tls));
  if (!options.api_keys_file.empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(ApiKeys::Create(options.api_keys_file).status());
  }
  return absl::OkStatus();
}

int WorkerThreads(const ServerOptions& options) {
  if (options.worker_threads > 0) return options.worker_threads;
  const int calls = options.service.max_concurrent_requests > 0
                        ? options.service.max_concurrent_requests
                        : kUnlimitedCallsWorkerThreads;
  return std::min(calls + kSpareWorkerThreads, HttpServer::kMaxHttpThreads);
}

namespace {

// Protobuf logs each message it fails to parse (a text field of invalid UTF-8) as an ERROR line
// on stderr, at whatever rate a client sends them. Those calls are answered INVALID_ARGUMENT and
// counted (ParseFailureInterceptor), so only what ends the process is written.
void KeepProtobufFatalLogsOnly(google::protobuf::LogLevel level, const char* filename, int line,
                               const std::string& message) {
  if (level < google::protobuf::LOGLEVEL_FATAL) return;
  std::fprintf(stderr, "attnscope-server: protobuf %s:%d: %s\n", filename, line, message.c_str());
}

// gRPC's own log lines. While the server starts they are held: gRPC writes a multi-line error of
// its own when it cannot bind --listen, before RunServer's one-line refusal that names the flag;
// held lines are written if the server started and dropped if not. Once it serves, at most
// kGrpcLogLinesPerMinute are written a minute, then how many were not: gRPC writes an ERROR line
// for each compressed message it refuses, at whatever rate a client sends them.
constexpr int kGrpcLogLinesPerMinute = 20;

struct GrpcLogLine {
  const char* file;
  int line;
  gpr_log_severity severity;
  std::string message;
};

struct GrpcLog {
  bool holding = true;
  std::vector<GrpcLogLine> held;
  absl::Time window_start;
  int written = 0;
  int64_t dropped = 0;
};
ABSL_CONST_INIT absl::Mutex grpc_log_mutex(absl::kConstInit);
GrpcLog* grpc_log ABSL_GUARDED_BY(grpc_log_mutex) = nullptr;

void PrintGrpcLogLine(const GrpcLogLine& line) {
  std::fprintf(stderr, "attnscope-server: grpc %s %s:%d: %s\n",
               gpr_log_severity_string(line.severity), line.file, line.line, line.message.c_str());
}

void WriteGrpcLogLine(gpr_log_func_args* args) {
  absl::MutexLock lock(&grpc_log_mutex);
  if (grpc_log == nullptr) grpc_log = new GrpcLog();
  GrpcLogLine line{args->file, args->line, args->severity, args->message};
  if (grpc_log->holding) {
    grpc_log->held.push_back(std::move(line));
    return;
  }
  const absl::Time now = absl::Now();
  if (now - grpc_log->window_start >= absl::Minutes(1)) {
    if (grpc_log->dropped > 0) {
      std::fprintf(stderr,
                   "attnscope-server: %lld more gRPC log lines in the last minute not written "
                   "(at most %d a minute)\n",
                   static_cast<long long>(grpc_log->dropped), kGrpcLogLinesPerMinute);
    }
    grpc_log->window_start = now;
    grpc_log->written = 0;
    grpc_log->dropped = 0;
  }
  if (grpc_log->written >= kGrpcLogLinesPerMinute) {
    ++grpc_log->dropped;
    return;
  }
  ++grpc_log->written;
  PrintGrpcLogLine(line);
}

// Ends the hold of the start; writes the held lines when `write`.
void EndGrpcLogHold(bool write) {
  absl::MutexLock lock(&grpc_log_mutex);
  if (grpc_log == nullptr) grpc_log = new GrpcLog();
  grpc_log->holding = false;
  if (write) {
    for (const GrpcLogLine& line : grpc_log->held) PrintGrpcLogLine(line);
  }
  grpc_log->held.clear();
}

}  // namespace

absl::Status RunServer(const ServerOptions& options) {
  google::protobuf::SetLogHandler(&KeepProtobufFatalLogsOnly);
  // A reference to gRPC's library that is never released. Releasing the last one (when the Server,
  // ServerBuilder and Service below are destroyed) runs grpc_shutdown, which joins gRPC's executor
  // threads; after a drain that had a stream in flight, one of them sat in a poll whose timer was
  // about 10 s away, and the process outlived "stopped" by that long (12-13 s after SIGTERM with a
  // 3 s grace period). The process exits right after RunServer, so gRPC's teardown is not needed.
  grpc_init();
  Metrics metrics;
  std::unique_ptr<MetricsHttpServer> metrics_server;
  std::unique_ptr<ApiKeys> api_keys;
  if (!options.api_keys_file.empty()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(api_keys, ApiKeys::Create(options.api_keys_file));
  }
  ATTNSCOPE_RETURN_IF_ERROR(ValidateTlsOptions(options.tls));
  ATTNSCOPE_ASSIGN_OR_RETURN(const ListenAddress listen,
                             ParseListenAddress("--listen", options.listen, "0.0.0.0:50051"));
  if (options.metrics_port > 0) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::Start(options.metrics_host, options.metrics_port, metrics.Collectables(),
                                 options.http.limits, options.http.allowed_hosts);
    if (!started.ok()) return started.status();
    metrics_server = *std::move(started);
  }
  const int metrics_port = metrics_server == nullptr ? 0 : metrics_server->port();

  ServiceCore core(options.service, &metrics, api_keys.get());
  WriteWatchdog watchdog(options.http.limits.write_timeout);
  const int worker_threads = WorkerThreads(options);
  WorkerPool unary_workers(worker_threads, /*max_queued=*/worker_threads);
  ClientAddresses client_addresses;
  AttentionService service(&core, &watchdog, &unary_workers, &client_addresses);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const int max_streams_per_connection = std::max(kMinStreamsPerConnection, worker_threads);
  GrpcFront::Options front_options;
  front_options.host = listen.host;
  front_options.port = listen.port;
  front_options.tls = options.tls;
  front_options.write_timeout = options.http.limits.write_timeout;
  front_options.max_connections =
      options.max_grpc_connections > 0 ? options.max_grpc_connections : INT_MAX;
  front_options.on_refused = [&metrics] { metrics.RecordRejection("http2_limits"); };
  front_options.on_connection_refused = [&metrics] { metrics.RecordRejection("connection_limit"); };
  front_options.client_addresses = &client_addresses;
  absl::StatusOr<std::unique_ptr<GrpcFront>> front = GrpcFront::Create(front_options);
  if (!front.ok()) {
    if (front.status().code() != absl::StatusCode::kUnavailable) return front.status();
    return absl::UnavailableError(absl::StrCat(
        "--listen '", options.listen,
        "': cannot listen there (in use, or not a local address); choose another address or port"));
  }
  const int port = (*front)->port();
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  UnknownMethodService unknown_methods;
  builder.RegisterCallbackGenericService(&unknown_methods);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ParseFailureInterceptorFactory>(&metrics));
  // The server owns the factories, and outlives every use of these.
  BuiltinStreams::Options reflection_options;
  reflection_options.method_prefix = "/grpc.reflection.";
  interceptors.push_back(std::make_unique<BuiltinStreams>(
      reflection_options, &client_addresses,
      [&metrics] { metrics.RecordRejection("reflection_limit"); }));
  BuiltinStreams* const reflection_streams =
      static_cast<BuiltinStreams*>(interceptors.back().get());
  // A Watch per channel (health-checking load balancers open one for each connection) from many
  // channels of one host, and 68 MB in all.
  BuiltinStreams::Options watch_options;
  watch_options.method_prefix = "/grpc.health.v1.Health/Watch";
  watch_options.max_streams = 4096;
  watch_options.max_streams_per_client = 64;
  interceptors.push_back(std::make_unique<BuiltinStreams>(
      watch_options, &client_addresses,
      [&metrics] { metrics.RecordRejection("health_watch_limit"); }));
  BuiltinStreams* const watch_streams = static_cast<BuiltinStreams*>(interceptors.back().get());
  interceptors.push_back(
      std::make_unique<AnswerWriteInterceptorFactory>(&core, &watchdog, &client_addresses));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_request_bytes));
  // gRPC inflates a compressed message whole before it compares its size with the limit: a 4 MB
  // gzip message of zeros took 4.5 GB and 33 CPU-seconds before its refusal. Requests are short
  // texts and answers mostly float arrays, which gain little from compression, so the server
  // takes and sends identity only; a compressed message is refused (UNIMPLEMENTED, "Compression
  // algorithm 'gzip' is disabled") before it is inflated.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  // gRPC's synchronous server keeps at most MAX_POLLERS idle threads (2 by default) and ends the
  // rest as soon as their call is answered, so under load nearly every call ran on a new thread.
  // A new thread's first LibTorch parallel operation initialises its thread count, which rebuilds
  // LibTorch's shared thread pool under a lock: with 16 CrossAttention clients, 10 of 33 threads
  // sat waiting there and p90 latency was 7 times p50. Threads now live on between calls.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
                              std::max(2, worker_threads));
  // gRPC's synchronous server starts a thread for every call that arrives while the others are
  // busy, with no bound of its own: 60 000 HTTP/2 streams opened (or opened and reset at once)
  // on three connections made 19 000 threads and 3.4 GB. With a bound, calls beyond it get
  // RESOURCE_EXHAUSTED from gRPC, and one connection may hold only so many streams at once.
  grpc::ResourceQuota quota("attnscope-server");
  quota.SetMaxThreads(worker_threads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, max_streams_per_connection);
  // gRPC 1.51 ends the whole connection when one call's metadata is over its limit (8 KiB by
  // default), failing every other call on it: a channel carries all of an application's calls
  // (grpc-js shares one connection between the clients of a process, and a balancer may reuse one
  // for other clients), and one call's 9 KB authorization header ended the calls beside it. The
  // limit is the listener's own bound on a header block (server/http2_frames.h), well above what
  // clients send.
  builder.AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                             static_cast<int>(Http2ClientFrames::Limits{}.max_header_block_bytes));
  gpr_set_log_function(&WriteGrpcLogLine);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  EndGrpcLogHold(/*write=*/server != nullptr);
  if (server == nullptr) return absl::InternalError("gRPC's server did not start (a bug)");
  (*front)->Start(server.get());
  std::unique_ptr<HttpServer> http;
  if (!options.http.listen.empty()) {
    HttpServer::Options http_options = options.http;
    http_options.max_waiting = options.service.max_concurrent_requests;
    http_options.tls = options.tls;
    http_options.limits.max_body_bytes = options.max_request_bytes;
    absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(http_options, &core);
    if (!started.ok()) {
      (*front)->StopAccepting();
      reflection_streams->CancelAll();
      watch_streams->CancelAll();
      server->Shutdown();
      return started.status();
    }
    http = *std::move(started);
  }
  // Health answers during loading, NOT_SERVING until every model is ready; calls get UNAVAILABLE.
  // Probes may ask for the server as a whole ("") or for the service by name;
  // SetServingStatus(bool) below updates both.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(v1::AttentionService::service_full_name(), false);
  health->SetServingStatus(false);

  std::fprintf(stderr,
               "attnscope-server: BLAS float32 GEMM at %.1f GFLOP/s; forward kernels %s, bfloat16 "
               "products %s (ATTNSCOPE_DISABLE_AMX=1, ATTNSCOPE_DISABLE_AVX512=1 or "
               "ATTNSCOPE_DISABLE_AVX2=1 selects a lower path)\n",
               CheckBlasSpeedOnce(), KernelsName(), Bf16KernelsName());
  std::vector<std::unique_ptr<LoadedModel>> models;
  for (const LoadedModel::Options& model_options : options.models) {
    absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(model_options);
    if (!model.ok()) {
      (*front)->StopAccepting();
      reflection_streams->CancelAll();
      watch_streams->CancelAll();
      server->Shutdown();
      return model.status();
    }
    const ModelConfig& config = (*model)->config();
    std::fprintf(stderr,
                 "attnscope-server: loaded model '%s' (%s, %lld layers, %lld heads, max %lld "
                 "tokens, %s projections) from %s in %.2f s, weights sha256 %s\n",
                 (*model)->name().c_str(),
                 std::string(ArchitectureName(config.architecture)).c_str(),
                 static_cast<long long>(config.num_hidden_layers),
                 static_cast<long long>(config.num_attention_heads),
                 static_cast<long long>((*model)->max_tokens()),
                 std::string(ComputeDtypeName(model_options.compute_dtype)).c_str(),
                 (*model)->model_dir().c_str(), (*model)->load_seconds(),
                 (*model)->weights_checksum().c_str());
    metrics.AddModel(**model);
    models.push_back(*std::move(model));
  }
  core.SetModels(std::move(models));
  health->SetServingStatus(true);
  std::cout << "attnscope-server listening on " << BoundAddress(options.listen, port)
            << (metrics_port > 0
                    ? absl::StrCat(" (metrics on ", MetricsAddress(options.metrics_host), ":",
                                   metrics_port, ")")
                    : std::string(" (metrics disabled)"))
            << (http != nullptr
                    ? absl::StrCat(" (HTTP and dashboard on ",
                                   options.tls.enabled() ? "https://" : "http://",
                                   BoundAddress(options.http.listen, http->port()), "/)")
                    : std::string(" (HTTP disabled)"))
            << std::endl;

  const sigset_t signals = ShutdownSignals();
  // glibc keeps what freed allocations leave in its arenas: after a burst (an HTTP/2 stream
  // flood, many large answers at once) resident memory stayed near its peak, 800 MB above idle.
  // While serving, it is handed back whenever it is more than kRetainedAboveTrimmedBytes above the
  // idle level.
  const timespec trim_every = {kTrimEverySeconds, 0};
  malloc_trim(0);
  const int64_t idle_resident = ResidentBytes();
  int signal_number = -1;
  while (!IsStopSignal(signal_number)) {
    signal_number = sigtimedwait(&signals, nullptr, &trim_every);
    if (signal_number > 0 && !IsStopSignal(signal_number)) {
      std::fprintf(stderr,
                   "attnscope-server: SIG%s received and ignored (nothing reloads: restart to "
                   "change models or flags; SIGTERM drains and stops)\n",
                   sigabbrev_np(signal_number));
    }
    if (signal_number < 0 && ResidentBytes() > idle_resident + kRetainedAboveTrimmedBytes) {
      malloc_trim(0);
    }
  }
  std::fprintf(stderr, "attnscope-server: %s received, draining for up to %.1f s\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT", options.shutdown_grace_seconds);
  // A second signal during the drain stops the process at once, with the exit status of that
  // signal's default action (143 for SIGTERM, 130 for SIGINT): the operator's way out of a long
  // grace period. A handler rather than another sigwait: a thread that a library started before
  // the signals were blocked would otherwise take the signal and die of it unannounced.
  struct sigaction stop_now = {};
  stop_now.sa_handler = StopNow;
  sigaction(SIGTERM, &stop_now, nullptr);
  sigaction(SIGINT, &stop_now, nullptr);
  struct sigaction ignore = {};
  ignore.sa_handler = IgnoreDuringDrain;
  for (const int ignored : kIgnoredSignals) sigaction(ignored, &ignore, nullptr);
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  health->SetServingStatus(false);
  core.StartDraining();
  // gRPC's Shutdown fails calls that have arrived but not yet reached a handler thread with a bare
  // CANCELLED. Handlers now answer every new call with UNAVAILABLE (retry elsewhere), so give the
  // calls already on their way a moment to reach one first.
  absl::SleepFor(kDrainSettleTime);
  // One grace period for both transports: HTTP calls run beside gRPC's until the same deadline.
  const absl::Time deadline = absl::Now() + absl::Seconds(options.shutdown_grace_seconds);
  // Calls still running at the deadline stop at their next check with a message that says why;
  // gRPC cancels what is left (with a bare CANCELLED) half a second later, as the HTTP listener
  // closes its connections.
  core.EndGraceAt(deadline);
  if (http != nullptr) http->Shutdown(deadline);
  // gRPC's Shutdown sends GOAWAY, and its transport then closes each connection as soon as the
  // last stream on it has been written, not read; the listener passes on what is left and the
  // process exits soon after. A socket closed at exit while its client, still reading a stream's
  // last megabytes, sends window updates is reset (Linux's TCPAbortOnData), and the client got
  // "Broken pipe" instead of the end of a stream that had completed. So gRPC's shutdown waits,
  // inside the grace, until no call runs or writes and clients have had a moment since the last
  // answer's write to read it; a server that has written nothing for that long (idle) goes on at
  // once. New calls meanwhile get UNAVAILABLE.
  while (absl::Now() < deadline && !core.QuietFor(kLastBytesLinger)) absl::SleepFor(kQuietPoll);
  (*front)->StopAccepting();
  // A reflection or Watch stream stays open until its client closes it: an idle tool's or
  // balancer's would hold Shutdown until the deadline.
  reflection_streams->CancelAll();
  watch_streams->CancelAll();
  // gRPC's Shutdown also waits for every connection to close, and a client keeps its idle one
  // open after the GOAWAY for as long as it likes: four idle channels held a quiet server for
  // its whole grace period. Once quiet, nothing is left for the connections to carry, and gRPC
  // closes them after its last words.
  const absl::Time shutdown_by = std::min(deadline, absl::Now());
  server->Shutdown(absl::ToChronoTime(shutdown_by + kGrpcLastWords));
  server->Wait();
  // Waits for the HTTP calls, cancelled at the deadline if still running.
  http.reset();
  std::fprintf(stderr, "attnscope-server: stopped\n");
  return absl::OkStatus();
}

}  // namespace attnscope::server
