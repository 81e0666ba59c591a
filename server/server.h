// Start-up and shutdown of attnscope-server: resolves the model list, starts the gRPC server
// (AttentionService, grpc.health.v1, reflection) and the metrics endpoint, loads and warms up the
// models, then serves until SIGTERM or SIGINT and drains.
#ifndef ATTNSCOPE_SERVER_SERVER_H_
#define ATTNSCOPE_SERVER_SERVER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/engine.h"
#include "server/http_server.h"
#include "server/service_core.h"

namespace attnscope::server {

// Where the models come from (flags --model, --model_repository).
struct ModelSources {
  // "NAME=DIR" entries.
  std::vector<std::string> specs;
  // A folder whose subdirectories with a config.json are models named after the subdirectory.
  std::string repository;
  // Used when neither of the above names a model; empty = none.
  std::string default_dir;
  // LoadedModel::Options::max_tokens for every model (0 = each model's maximum).
  int64_t max_tokens = 0;
  // LoadedModel::Options::compute_dtype for every model.
  ComputeDtype compute_dtype = ComputeDtype::kFloat32;
};

// The models to load, in flag order (specs first, then the repository in name order).
// InvalidArgument: a spec without '=' or with an empty name or directory, a name that is not
// plain (letters, digits, '-', '_', '.' not first: never a path), a name given twice, no
// model at all (the message names --model). NotFound: a repository that does not exist.
absl::StatusOr<std::vector<LoadedModel::Options>> ResolveModels(const ModelSources& sources);

struct ServerOptions {
  std::vector<LoadedModel::Options> models;
  // host:port; port 0 picks a free port, printed on the "listening" line.
  std::string listen = "0.0.0.0:50051";
  // Prometheus /metrics port; 0 disables the endpoint.
  int metrics_port = 9464;
  // The address /metrics binds: every interface for a Prometheus elsewhere, or 127.0.0.1 to keep
  // it on the machine. It is plain HTTP without keys whatever --tls_* and --api_keys_file say.
  std::string metrics_host = "0.0.0.0";
  // TLS for the gRPC and HTTP listeners (server/security.h).
  TlsOptions tls;
  // One API key per line; empty: no authentication. Health checks and /metrics need no key.
  std::string api_keys_file;
  // The HTTP/JSON API and the dashboard (server/http_server.h); an empty listen address disables
  // them.
  HttpServer::Options http;
  ServiceOptions service;
  // Largest request on either transport: gRPC refuses a bigger message with RESOURCE_EXHAUSTED,
  // HTTP a bigger body with 413. Also sets http.limits.max_body_bytes.
  int64_t max_request_bytes = kDefaultMaxRequestBytes;
  // Most gRPC threads serving calls, and streams one HTTP/2 connection may hold open (at least
  // kMinStreamsPerConnection); 0 = --max_concurrent_requests plus kSpareWorkerThreads (for health
  // checks, reflection and the calls refused over the limit). Calls beyond it get
  // RESOURCE_EXHAUSTED from gRPC.
  int worker_threads = 0;
  // gRPC connections open at once (GrpcFront::Options::max_connections says which is closed to
  // make room for a new one at the limit); 0 = as many as a third of the descriptor limit, less
  // 512, allows.
  int max_grpc_connections = 2048;
  // After SIGTERM / SIGINT, in-flight calls get this long to finish before they are cancelled.
  double shutdown_grace_seconds = 15;
};

// Checks the options a flag sets before anything starts. InvalidArgument, naming the flag: a
// --listen or non-empty --http_listen that is not HOST:PORT with a port in [0, 65535], a
// --metrics_port outside that range, a --max_stream_message_bytes below 1,
// a --max_response_bytes below 1, and a negative --max_tokens, --worker_threads,
// --max_concurrent_requests, --max_grpc_connections or --shutdown_grace_seconds, an HTTP timeout
// (--http_*_timeout_seconds) that is not above 0; TLS flags as ValidateTlsOptions says
// (InvalidArgument or NotFound).
absl::Status ValidateServerOptions(const ServerOptions& options);

// Threads for calls beside --max_concurrent_requests' (see ServerOptions::worker_threads).
inline constexpr int kSpareWorkerThreads = 16;
// The calls WorkerThreads counts when --max_concurrent_requests is 0 (no limit).
inline constexpr int kUnlimitedCallsWorkerThreads = 1024;
// HTTP/2 streams a connection may hold open, at least: gRPC's own clients send a channel's
// concurrent calls on one connection.
inline constexpr int kMinStreamsPerConnection = 100;

// The gRPC thread bound of `options` (ServerOptions::worker_threads).
int WorkerThreads(const ServerOptions& options);

// Runs the server until SIGTERM or SIGINT, then drains and returns OK; SIGHUP, SIGUSR1 and SIGUSR2
// are logged and ignored (nothing reloads). The caller must block these signals in every thread
// first (BlockShutdownSignals, before any thread starts). Prints
// "attnscope-server listening on HOST:PORT (metrics on HOST:PORT) (HTTP and dashboard on
// http://HOST:PORT/)" to stdout once every model is loaded and health reports SERVING. Errors:
// Unavailable for an address that cannot be bound (in use by any process, this server included, or
// not local), naming its flag; a model that fails to load.
absl::Status RunServer(const ServerOptions& options);

// Blocks SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 in the calling thread (and the threads it
// starts later) so that RunServer can wait for them synchronously.
void BlockShutdownSignals();

// Makes writes to a connection the peer has closed fail with EPIPE instead of raising SIGPIPE,
// whose default action ends the process. gRPC sends with MSG_NOSIGNAL, but OpenSSL, under the
// HTTPS listener, writes with write(2) (a test client refused by mutual TLS was once ended by
// SIGPIPE that way); one client hanging up must never stop the server for everyone.
void IgnoreBrokenPipes();

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_SERVER_H_
