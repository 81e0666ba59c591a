// Helpers of the integration tests: the real attnscope-server as an RAII child process on an
// ephemeral loopback port, temporary directories, a plain-socket HTTP GET for /metrics, subprocess
// runs of the CLI, and random BERT checkpoints written from scratch (config.json, a safetensors
// file and vocab.txt) so that big models need no fixtures.
#ifndef ATTNSCOPE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
#define ATTNSCOPE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace attnscope::testing {

// ../shared (the read-only fixtures), tests/data, and the built binaries, compiled in by CMake.
std::string SharedDir();
std::string TestDataDir();
std::string ServerBinary();
std::string CliBinary();
// ../shared/models/stories260K and tests/data/tiny-bert.
std::string Stories260kDir();
// checkpoints/default: the built-in cross-encoder.
std::string DefaultModelDir();
std::string TinyBertDir();

// Every non-empty line of a JSON-lines file, parsed (none when the file cannot be read).
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);

// A directory under $TMPDIR (or /tmp) removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A program running as a child in its own process group, stdout and stderr in files. The
// destructor kills the whole group (SIGKILL) and reaps it unless the test already stopped it, so a
// failing test never leaks a process.
class BackgroundProcess {
 public:
  // Internal when fork fails; a program that cannot be executed exits 127 (see Wait and Log).
  static absl::StatusOr<std::unique_ptr<BackgroundProcess>> Start(
      const std::vector<std::string>& argv);
  ~BackgroundProcess();

  pid_t pid() const { return pid_; }
  // Sends `signal` to the process.
  void Signal(int signal) const;
  // Waits up to `timeout` for the process to exit and returns its exit status as from waitpid
  // (use WIFEXITED / WEXITSTATUS); DeadlineExceeded if it is still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // False once the process has exited (it is reaped then).
  bool Running();
  // Its stdout so far.
  std::string Stdout() const;
  // The command line and the process' stderr so far (for failure messages).
  std::string Log() const;

 private:
  BackgroundProcess() = default;

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string command_;
  std::unique_ptr<TempDir> dir_;
};

// attnscope-server as a BackgroundProcess (killed with its process group when destroyed).
class ServerProcess {
 public:
  struct Options {
    // NAME=DIR pairs for --model.
    std::vector<std::string> models;
    // --metrics_port; 0 disables metrics.
    int metrics_port = 0;
    std::optional<int64_t> max_response_bytes;
    std::optional<int64_t> max_tokens;
    std::vector<std::string> extra_flags;
    // How long to wait for the "listening on" line (model loading and warm-up included).
    absl::Duration startup_timeout = absl::Seconds(120);
  };

  // Starts the server on 127.0.0.1:0 (gRPC and HTTP) and waits until it prints
  // "attnscope-server listening on ADDR (metrics on HOST:PORT) (HTTP and dashboard on
  // http://127.0.0.1:PORT/)" (https:// with TLS). Unavailable when the binary exits or times out
  // first; the message includes the server's stderr.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const Options& options);

  // "127.0.0.1:PORT" as printed by the server.
  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  // The HTTP/JSON API's port as printed by the server; 0 when HTTP is off.
  int http_port() const { return http_port_; }
  pid_t pid() const { return process_->pid(); }
  // A client for this server with the given cap and a single attempt per call unless overridden.
  std::unique_ptr<Client> NewClient(int64_t max_response_bytes = kDefaultMaxResponseBytes,
                                    int max_attempts = 1) const;

  // Sends `signal` to the server process.
  void Signal(int signal) const { process_->Signal(signal); }
  // Waits up to `timeout` for the server to exit and returns its exit status as from waitpid
  // (use WIFEXITED / WEXITSTATUS); DeadlineExceeded if it is still running.
  absl::StatusOr<int> Wait(absl::Duration timeout) { return process_->Wait(timeout); }
  // The server's command line and stderr so far (for failure messages).
  std::string Log() const { return process_->Log(); }

 private:
  ServerProcess() = default;

  std::unique_ptr<BackgroundProcess> process_;
  std::string address_;
  int metrics_port_ = 0;
  int http_port_ = 0;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
int FreeTcpPort();

// HTTP/1.0 GET of http://127.0.0.1:port/path over a plain socket. Returns the body when the status
// is 200; Unavailable when the connection fails, Internal on another status.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// One HTTP response as read off a RawConnection. Header names are lower-cased.
struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  // Decoded from chunked transfer encoding when the response used it.
  std::string body;
};

// A plain TCP connection to 127.0.0.1, for tests that send what no HTTP library would: slow
// bytes, oversized headers, bodies larger than what the server reads, connections abandoned
// mid-call.
class RawConnection {
 public:
  // Unavailable when the connection is refused. `source`: the local IPv4 address to connect from
  // ("127.0.0.2": another client as the server sees it), or "" for the system's choice.
  static absl::StatusOr<std::unique_ptr<RawConnection>> Open(int port,
                                                             const std::string& source = "");
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Sends all of `data`; false once the server has closed or reset the connection.
  bool Send(const std::string& data);
  // Reads one response (status line, headers, then the body by Content-Length, chunked encoding,
  // or until the server closes) within `timeout`. DeadlineExceeded when it does not arrive in
  // time, Unavailable when the server closes first, Internal when it is not HTTP.
  absl::StatusOr<RawResponse> ReadResponse(absl::Duration timeout);
  // True when the server closes the connection within `timeout` (anything it sends is dropped).
  bool WaitClosed(absl::Duration timeout);
  // Closes the connection now (the server sees the client go away).
  void Close();

 private:
  explicit RawConnection(int fd) : fd_(fd) {}
  // Appends what arrives within `deadline` to pending_; false on timeout or close.
  bool Fill(absl::Time deadline, bool* closed);

  int fd_ = -1;
  std::string pending_;
};

// A POST of JSON `body` to attnscope.v1.AttentionService/`method` with a Content-Length and
// `extra_headers` ("Name: value\r\n" each), as the one string a RawConnection sends.
std::string RawPost(const std::string& method, const std::string& body,
                    const std::string& extra_headers = "");
// The answer to `request` sent on a new RawConnection to 127.0.0.1:`port`.
absl::StatusOr<RawResponse> RawExchange(int port, const std::string& request,
                                        absl::Duration timeout = absl::Seconds(10));
// The JSON error of `response` ({"code", "message"}), or a test failure (and an empty object) when
// it is not one.
nlohmann::json JsonErrorOf(const RawResponse& response);

// The resident set size of process `pid` in bytes (VmRSS of /proc/PID/status); -1 when unknown.
int64_t ProcessRssBytes(pid_t pid);
// The threads of process `pid` (Threads: of /proc/PID/status); -1 when unknown.
int ProcessThreads(pid_t pid);
// The file descriptors process `pid` holds open (the entries of /proc/PID/fd).
int OpenFileDescriptors(pid_t pid);
// The CPU time process `pid` has used so far, user plus system, in seconds (/proc/PID/stat).
double ProcessCpuSeconds(pid_t pid);

// One sample line of a Prometheus text exposition.
struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the Prometheus text exposition format (comments skipped; label values without escapes,
// which holds for every label attnscope exports). A line whose value does not parse is a test
// failure.
std::vector<MetricSample> ParseMetrics(const std::string& text);

// The samples named `name` whose labels include `labels`.
std::vector<MetricSample> FindSamples(const std::vector<MetricSample>& samples,
                                      const std::string& name,
                                      const std::map<std::string, std::string>& labels = {});

// Result of running a command to completion.
struct CommandResult {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
};

// Runs `argv` (argv[0] is a path) with stdout and stderr captured in files, killing it after
// `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(120));

// The flag names `binary --help` documents: every line "  --name (help...)", the layout of
// Abseil's usage text and of the benchmarks' own.
std::set<std::string> FlagsInHelp(const std::string& binary);

// Sizes of a random BERT checkpoint.
struct BertShape {
  int layers = 12;
  int hidden = 768;
  int heads = 12;
  int intermediate = 3072;
  int max_positions = 512;
  // vocab.txt holds the five BERT specials, then words "w0".."w{vocab-6}".
  int vocab = 1000;
  // Add pooler + a one-label classifier (BertForSequenceClassification).
  bool classifier = false;
};

// Writes config.json, model.safetensors (float32, uniform random weights of scale 0.05, LayerNorm
// weights 1 and biases 0, all from a fixed seed) and vocab.txt into `dir`.
absl::Status WriteRandomBert(const BertShape& shape, const std::string& dir, uint64_t seed = 1);

// A text that the random BERT's tokenizer turns into exactly `tokens` tokens including [CLS] and
// [SEP] (words "w0", "w1", ... that are whole vocabulary entries).
std::string RandomBertText(const BertShape& shape, int tokens);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_INTEGRATION_INTEGRATION_UTIL_H_
