#include "tests/integration/integration_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace attnscope::testing {
namespace {

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

// Forks and execs `argv` in a new process group with stdout/stderr sent to the given files. The
// child dies with the test process (PR_SET_PDEATHSIG) so that even a crashed test leaks nothing.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& stdout_path,
            const std::string& stderr_path) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int out = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(126);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);  // also from the parent, so a kill right after fork finds it
  return pid;
}

// waitpid with a deadline, polling; nullopt when the child is still running.
std::optional<int> WaitFor(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) return -1;
    if (absl::Now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// xorshift64*: fast, reproducible weights without <random>'s per-call overhead on 100M values.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  // Uniform in [-scale, scale).
  float Uniform(float scale) {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t bits = state_ * 0x2545F4914F6CDD1Dull;
    return (static_cast<float>(bits >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f) * scale;
  }

 private:
  uint64_t state_;
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  // 'r' random, '1' ones, '0' zeros.
  char fill;
};

}  // namespace

std::string SharedDir() { return EnvOr("ATTNSCOPE_SHARED_DIR", ATTNSCOPE_DEFAULT_SHARED_DIR); }
std::string TestDataDir() { return EnvOr("ATTNSCOPE_TEST_DATA", ATTNSCOPE_DEFAULT_TEST_DATA); }
std::string ServerBinary() { return ATTNSCOPE_SERVER_PATH; }
std::string CliBinary() { return ATTNSCOPE_CLI_PATH; }
std::string Stories260kDir() { return SharedDir() + "/models/stories260K"; }
std::string TinyBertDir() { return TestDataDir() + "/tiny-bert"; }
std::string DefaultModelDir() { return ATTNSCOPE_DEFAULT_MODEL_DIR; }

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream file(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TempDir::TempDir() {
  std::string pattern = EnvOr("TMPDIR", "/tmp") + "/attnscope-it-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

absl::StatusOr<std::unique_ptr<BackgroundProcess>> BackgroundProcess::Start(
    const std::vector<std::string>& argv) {
  std::unique_ptr<BackgroundProcess> process(new BackgroundProcess());
  process->dir_ = std::make_unique<TempDir>();
  process->command_ = absl::StrJoin(argv, " ");
  process->pid_ = Spawn(argv, process->dir_->path() + "/stdout", process->dir_->path() + "/stderr");
  if (process->pid_ < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  return process;
}

BackgroundProcess::~BackgroundProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, SIGKILL);
    WaitFor(pid_, absl::Seconds(30));
  }
}

void BackgroundProcess::Signal(int signal) const { kill(pid_, signal); }

absl::StatusOr<int> BackgroundProcess::Wait(absl::Duration timeout) {
  std::optional<int> status = WaitFor(pid_, timeout);
  if (!status.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat(command_, ": still running after ", absl::FormatDuration(timeout)));
  }
  reaped_ = true;
  return *status;
}

bool BackgroundProcess::Running() { return !reaped_ && !Wait(absl::ZeroDuration()).ok(); }

std::string BackgroundProcess::Stdout() const { return ReadFileOrEmpty(dir_->path() + "/stdout"); }

std::string BackgroundProcess::Log() const {
  return absl::StrCat("--- ", command_, " stderr ---\n", ReadFileOrEmpty(dir_->path() + "/stderr"));
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(const Options& options) {
  std::vector<std::string> argv = {ServerBinary(), "--listen=127.0.0.1:0",
                                   "--http_listen=127.0.0.1:0",
                                   absl::StrCat("--metrics_port=", options.metrics_port)};
  for (const std::string& model : options.models) argv.push_back("--model=" + model);
  if (options.max_response_bytes) {
    argv.push_back(absl::StrCat("--max_response_bytes=", *options.max_response_bytes));
  }
  if (options.max_tokens) argv.push_back(absl::StrCat("--max_tokens=", *options.max_tokens));
  argv.insert(argv.end(), options.extra_flags.begin(), options.extra_flags.end());
  absl::StatusOr<std::unique_ptr<BackgroundProcess>> process = BackgroundProcess::Start(argv);
  if (!process.ok()) return process.status();
  std::unique_ptr<ServerProcess> server(new ServerProcess());
  server->process_ = *std::move(process);

  const std::string kPrefix = "attnscope-server listening on ";
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  while (absl::Now() < deadline) {
    const std::string out = server->process_->Stdout();
    const size_t at = out.find(kPrefix);
    const size_t line_end = at == std::string::npos ? at : out.find('\n', at);
    if (line_end != std::string::npos) {
      const std::string line = out.substr(at + kPrefix.size(), line_end - at - kPrefix.size());
      server->address_ = line.substr(0, line.find(' '));
      // "(metrics on HOST:PORT)", HOST empty for every interface.
      const size_t metrics = line.find("(metrics on ");
      const size_t metrics_end = metrics == std::string::npos ? metrics : line.find(')', metrics);
      const size_t port_colon =
          metrics_end == std::string::npos ? metrics_end : line.rfind(':', metrics_end);
      if (port_colon != std::string::npos && port_colon > metrics) {
        server->metrics_port_ = std::atoi(line.c_str() + port_colon + 1);
      }
      // "http://" or, with TLS, "https://".
      const std::string kHttp = "(HTTP and dashboard on http";
      const size_t http = line.find(kHttp);
      const size_t scheme_end = http == std::string::npos ? http : line.find("://", http);
      const size_t http_port =
          scheme_end == std::string::npos ? scheme_end : line.find(':', scheme_end + 3);
      if (http_port != std::string::npos) {
        server->http_port_ = std::atoi(line.c_str() + http_port + 1);
      }
      return server;
    }
    if (absl::StatusOr<int> status = server->Wait(absl::ZeroDuration()); status.ok()) {
      return absl::UnavailableError(absl::StrCat("attnscope-server exited with status ", *status,
                                                 " before listening\n", server->Log()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat("attnscope-server did not print its address within ",
                                             absl::FormatDuration(options.startup_timeout), "\n",
                                             server->Log()));
}

std::unique_ptr<Client> ServerProcess::NewClient(int64_t max_response_bytes,
                                                 int max_attempts) const {
  ClientOptions options;
  options.target = address_;
  options.max_response_bytes = max_response_bytes;
  options.max_attempts = max_attempts;
  options.default_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) std::abort();
  return *std::move(client);
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", error));
  }
  // HTTP/1.0: the server closes the connection after the body, so reading to EOF is the framing.
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string response;
  char buffer[65536];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) {
    return absl::InternalError(absl::StrCat("malformed HTTP response: '", response, "'"));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::InternalError(absl::StrCat("GET ", path, ": ", status_line));
  }
  return response.substr(body + 4);
}

absl::StatusOr<std::unique_ptr<RawConnection>> RawConnection::Open(int port,
                                                                   const std::string& source) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (!source.empty()) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1 ||
        bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      const std::string error = std::strerror(errno);
      close(fd);
      return absl::InternalError(absl::StrCat("bind ", source, ": ", error));
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect 127.0.0.1:", port, ": ", error));
  }
  return std::unique_ptr<RawConnection>(new RawConnection(fd));
}

RawConnection::~RawConnection() { Close(); }

void RawConnection::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool RawConnection::Send(const std::string& data) {
  size_t sent = 0;
  while (fd_ >= 0 && sent < data.size()) {
    const ssize_t n = send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return fd_ >= 0;
}

bool RawConnection::Fill(absl::Time deadline, bool* closed) {
  *closed = false;
  if (fd_ < 0) {
    *closed = true;
    return false;
  }
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return false;
  pollfd request{fd_, POLLIN, 0};
  if (poll(&request, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) return false;
  char buffer[65536];
  const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
  if (n <= 0) {
    *closed = true;
    return false;
  }
  pending_.append(buffer, static_cast<size_t>(n));
  return true;
}

absl::StatusOr<RawResponse> RawConnection::ReadResponse(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  bool closed = false;
  auto fill = [&]() -> absl::Status {
    if (Fill(deadline, &closed)) return absl::OkStatus();
    return closed ? absl::UnavailableError(absl::StrCat("the server closed the connection; got '",
                                                        pending_.substr(0, 300), "'"))
                  : absl::DeadlineExceededError(
                        absl::StrCat("no whole response in ", absl::FormatDuration(timeout),
                                     "; got '", pending_.substr(0, 300), "'"));
  };
  size_t head_end;
  while ((head_end = pending_.find("\r\n\r\n")) == std::string::npos) {
    if (absl::Status status = fill(); !status.ok()) return status;
  }
  RawResponse response;
  std::vector<std::string> lines = absl::StrSplit(pending_.substr(0, head_end), "\r\n");
  pending_.erase(0, head_end + 4);
  std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &response.status)) {
    return absl::InternalError(absl::StrCat("not an HTTP status line: '", lines[0], "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == std::string::npos) continue;
    response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  auto header = [&](const std::string& name) {
    auto it = response.headers.find(name);
    return it == response.headers.end() ? std::string() : it->second;
  };
  if (absl::AsciiStrToLower(header("transfer-encoding")) == "chunked") {
    while (true) {
      size_t line_end;
      while ((line_end = pending_.find("\r\n")) == std::string::npos) {
        if (absl::Status status = fill(); !status.ok()) return status;
      }
      size_t size = 0;
      const std::string size_text = pending_.substr(0, pending_.find_first_of(";\r"));
      if (!absl::SimpleHexAtoi(size_text, &size)) {
        return absl::InternalError(absl::StrCat("bad chunk size '", size_text, "'"));
      }
      while (pending_.size() < line_end + 2 + size + 2) {
        if (absl::Status status = fill(); !status.ok()) return status;
      }
      response.body.append(pending_, line_end + 2, size);
      pending_.erase(0, line_end + 2 + size + 2);
      if (size == 0) break;
    }
  } else if (const std::string length = header("content-length"); !length.empty()) {
    size_t size = 0;
    if (!absl::SimpleAtoi(length, &size)) {
      return absl::InternalError(absl::StrCat("bad Content-Length '", length, "'"));
    }
    while (pending_.size() < size) {
      if (absl::Status status = fill(); !status.ok()) return status;
    }
    response.body = pending_.substr(0, size);
    pending_.erase(0, size);
  } else if (response.status >= 200 && response.status != 204 && response.status != 304) {
    while (fill().ok()) {
    }
    if (!closed) return fill();
    response.body = std::move(pending_);
    pending_.clear();
  }
  return response;
}

bool RawConnection::WaitClosed(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  bool closed = false;
  while (!closed && absl::Now() < deadline) {
    Fill(deadline, &closed);
    pending_.clear();
  }
  return closed;
}

std::string RawPost(const std::string& method, const std::string& body,
                    const std::string& extra_headers) {
  return absl::StrCat("POST /attnscope.v1.AttentionService/", method,
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\n", "Content-Type: application/json\r\n",
                      extra_headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
}

absl::StatusOr<RawResponse> RawExchange(int port, const std::string& request,
                                        absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(port);
  if (!connection.ok()) return connection.status();
  (*connection)->Send(request);
  return (*connection)->ReadResponse(timeout);
}

nlohmann::json JsonErrorOf(const RawResponse& response) {
  EXPECT_EQ(response.headers.count("content-type") ? response.headers.at("content-type") : "",
            "application/json");
  nlohmann::json error = nlohmann::json::parse(response.body, nullptr, false);
  EXPECT_TRUE(error.is_object() && error.contains("code") && error.contains("message"))
      << response.body;
  return error.is_object() ? error : nlohmann::json::object();
}

int64_t ProcessRssBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (absl::StartsWith(line, "VmRSS:") &&
        absl::SimpleAtoi(absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(6)), " kB"),
                         &kib)) {
      return kib * 1024;
    }
  }
  return -1;
}

int ProcessThreads(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (absl::StartsWith(line, "Threads:")) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

int OpenFileDescriptors(pid_t pid) {
  int count = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
    ++count;
  }
  return count;
}

double ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  // The fields after the command name, which is in parentheses and may hold spaces: utime and
  // stime are the 14th and 15th fields of the line, the 12th and 13th after ") ".
  const size_t close = stat.rfind(") ");
  if (close == std::string::npos) return -1;
  const std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
  int64_t user = 0;
  int64_t system = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &user) ||
      !absl::SimpleAtoi(fields[12], &system)) {
    return -1;
  }
  return static_cast<double>(user + system) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout) {
  TempDir dir;
  CommandResult result;
  const pid_t pid = Spawn(argv, dir.path() + "/stdout", dir.path() + "/stderr");
  std::optional<int> status = WaitFor(pid, timeout);
  if (!status.has_value()) {
    kill(-pid, SIGKILL);
    WaitFor(pid, absl::Seconds(10));
    result.stderr_text = "timed out\n";
  } else if (WIFEXITED(*status)) {
    result.exit_code = WEXITSTATUS(*status);
  }
  result.stdout_text = ReadFileOrEmpty(dir.path() + "/stdout");
  result.stderr_text += ReadFileOrEmpty(dir.path() + "/stderr");
  return result;
}

std::set<std::string> FlagsInHelp(const std::string& binary) {
  const CommandResult help = RunCommand({binary, "--help"});
  const std::string text = help.stdout_text + help.stderr_text;
  std::set<std::string> flags;
  const std::regex flag(R"(\n\s+--([a-z_0-9]+) \()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator();
       ++it) {
    flags.insert((*it)[1]);
  }
  return flags;
}

absl::Status WriteRandomBert(const BertShape& shape, const std::string& dir, uint64_t seed) {
  const int64_t h = shape.hidden;
  const std::string prefix = shape.classifier ? "bert." : "";
  std::vector<TensorSpec> specs = {
      {prefix + "embeddings.word_embeddings.weight", {shape.vocab, h}, 'r'},
      {prefix + "embeddings.position_embeddings.weight", {shape.max_positions, h}, 'r'},
      {prefix + "embeddings.token_type_embeddings.weight", {2, h}, 'r'},
      {prefix + "embeddings.LayerNorm.weight", {h}, '1'},
      {prefix + "embeddings.LayerNorm.bias", {h}, '0'},
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    specs.push_back({name + ".weight", {out, in}, 'r'});
    specs.push_back({name + ".bias", {out}, 'r'});
  };
  auto norm = [&](const std::string& name) {
    specs.push_back({name + ".weight", {h}, '1'});
    specs.push_back({name + ".bias", {h}, '0'});
  };
  for (int i = 0; i < shape.layers; ++i) {
    const std::string layer = absl::StrCat(prefix, "encoder.layer.", i, ".");
    linear(layer + "attention.self.query", h, h);
    linear(layer + "attention.self.key", h, h);
    linear(layer + "attention.self.value", h, h);
    linear(layer + "attention.output.dense", h, h);
    norm(layer + "attention.output.LayerNorm");
    linear(layer + "intermediate.dense", shape.intermediate, h);
    linear(layer + "output.dense", h, shape.intermediate);
    norm(layer + "output.LayerNorm");
  }
  if (shape.classifier) {
    linear(prefix + "pooler.dense", h, h);
    linear("classifier", 1, h);
  }

  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  int64_t offset = 0;
  for (const TensorSpec& spec : specs) {
    int64_t count = 1;
    for (int64_t size : spec.shape) count *= size;
    header[spec.name] = {
        {"dtype", "F32"}, {"shape", spec.shape}, {"data_offsets", {offset, offset + 4 * count}}};
    offset += 4 * count;
  }
  std::string header_text = header.dump();
  // Data start 8-byte aligned, as the Python writer pads it.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::ofstream weights(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t header_size = header_text.size();
  for (int i = 0; i < 8; ++i) weights.put(static_cast<char>((header_size >> (8 * i)) & 0xFF));
  weights << header_text;
  Rng rng(seed);
  std::vector<float> buffer;
  for (const TensorSpec& spec : specs) {
    int64_t count = 1;
    for (int64_t size : spec.shape) count *= size;
    buffer.resize(static_cast<size_t>(count));
    for (float& value : buffer) {
      value = spec.fill == 'r' ? rng.Uniform(0.05f) : spec.fill == '1' ? 1.0f : 0.0f;
    }
    // x86-64 is little-endian, the byte order safetensors requires.
    weights.write(reinterpret_cast<const char*>(buffer.data()),
                  static_cast<std::streamsize>(buffer.size() * sizeof(float)));
  }
  weights.close();
  if (!weights) return absl::InternalError("cannot write " + dir + "/model.safetensors");

  nlohmann::json config = {
      {"architectures", {shape.classifier ? "BertForSequenceClassification" : "BertModel"}},
      {"model_type", "bert"},
      {"vocab_size", shape.vocab},
      {"hidden_size", shape.hidden},
      {"num_hidden_layers", shape.layers},
      {"num_attention_heads", shape.heads},
      {"intermediate_size", shape.intermediate},
      {"hidden_act", "gelu"},
      {"max_position_embeddings", shape.max_positions},
      {"type_vocab_size", 2},
      {"layer_norm_eps", 1e-12},
      {"pad_token_id", 0},
      {"torch_dtype", "float32"},
  };
  if (shape.classifier) {
    config["id2label"] = {{"0", "LABEL_0"}};
    config["label2id"] = {{"LABEL_0", 0}};
  }
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::ofstream vocab(dir + "/vocab.txt");
  for (const char* special : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    vocab << special << "\n";
  for (int i = 0; i < shape.vocab - 5; ++i) vocab << "w" << i << "\n";
  std::ofstream(dir + "/tokenizer_config.json")
      << R"({"do_lower_case": true, "model_max_length": )" << shape.max_positions << "}";
  return absl::OkStatus();
}

std::string RandomBertText(const BertShape& shape, int tokens) {
  std::vector<std::string> words;
  for (int i = 0; i < tokens - 2; ++i)
    words.push_back(absl::StrCat("w", (i * 7) % (shape.vocab - 5)));
  return absl::StrJoin(words, " ");
}

std::vector<MetricSample> ParseMetrics(const std::string& text) {
  std::vector<MetricSample> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.empty() || line[0] == '#') continue;
    MetricSample sample;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (brace != absl::string_view::npos && brace < space) {
      sample.name = std::string(line.substr(0, brace));
      const size_t close = line.find('}', brace);
      for (absl::string_view pair :
           absl::StrSplit(line.substr(brace + 1, close - brace - 1), ',', absl::SkipEmpty())) {
        const size_t equals = pair.find('=');
        sample.labels[std::string(pair.substr(0, equals))] =
            std::string(pair.substr(equals + 2, pair.size() - equals - 3));
      }
    } else {
      sample.name = std::string(line.substr(0, space));
    }
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &sample.value)) << line;
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::vector<MetricSample> FindSamples(const std::vector<MetricSample>& samples,
                                      const std::string& name,
                                      const std::map<std::string, std::string>& labels) {
  std::vector<MetricSample> out;
  for (const MetricSample& sample : samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [key, value] : labels) {
      auto it = sample.labels.find(key);
      match = match && it != sample.labels.end() && it->second == value;
    }
    if (match) out.push_back(sample);
  }
  return out;
}

}  // namespace attnscope::testing
