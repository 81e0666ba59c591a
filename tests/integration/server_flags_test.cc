// No flag of attnscope-server is silently ignored: every flag its --help lists is either refused
// with a message naming it when its value cannot work, or (where every value works) shown to
// change what the server does. The list is read from --help, so a new flag without a case here
// fails the test.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "models/kernels/blas_check.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// For each flag, a value that cannot work and what the refusal must say.
struct Refusal {
  std::vector<std::string> args;
  std::string message;
};

const std::map<std::string, Refusal>& Refusals() {
  static const auto* refusals = new std::map<std::string, Refusal>{
      {"api_keys_file", {{"--api_keys_file=/nonexistent/keys"}, "--api_keys_file"}},
      {"compute_dtype",
       {{"--compute_dtype=bf16"}, "--compute_dtype: expected float32 or bfloat16, got 'bf16'"}},
      {"http_listen", {{"--http_listen=nohost"}, "--http_listen 'nohost'"}},
      {"listen", {{"--listen=127.0.0.1:99999"}, "--listen '127.0.0.1:99999'"}},
      {"max_answer_bytes_in_flight",
       {{"--max_answer_bytes_in_flight=-1"}, "--max_answer_bytes_in_flight -1"}},
      {"max_answer_bytes_per_client",
       {{"--max_answer_bytes_per_client=-1"}, "--max_answer_bytes_per_client -1: expected bytes"}},
      {"max_batch_size", {{"--max_batch_size=0"}, "--max_batch_size 0"}},
      {"max_batch_tokens", {{"--max_batch_tokens=0"}, "--max_batch_tokens 0"}},
      {"max_call_seconds", {{"--max_call_seconds=0"}, "--max_call_seconds 0"}},
      {"max_call_tokens", {{"--max_call_tokens=0"}, "--max_call_tokens 0"}},
      {"max_concurrent_requests",
       {{"--max_concurrent_requests=-1"}, "--max_concurrent_requests -1"}},
      {"max_concurrent_requests_per_client",
       {{"--max_concurrent_requests_per_client=-2"},
        "--max_concurrent_requests_per_client -2: expected a value from 0"}},
      {"max_http_connections",
       {{"--max_http_connections=0"}, "--max_http_connections 0: expected 1 to 1000000"}},
      {"max_grpc_connections",
       {{"--max_grpc_connections=-1"}, "--max_grpc_connections -1: expected a value from 0"}},
      {"max_inputs_per_request", {{"--max_inputs_per_request=0"}, "--max_inputs_per_request 0"}},
      {"max_request_bytes", {{"--max_request_bytes=0"}, "--max_request_bytes 0"}},
      {"http_threads", {{"--http_threads=0"}, "--http_threads 0"}},
      {"http_header_timeout_seconds",
       {{"--http_header_timeout_seconds=0"}, "--http_header_timeout_seconds 0"}},
      {"http_body_timeout_seconds",
       {{"--http_body_timeout_seconds=-1"}, "--http_body_timeout_seconds -1"}},
      {"http_idle_timeout_seconds",
       {{"--http_idle_timeout_seconds=inf"}, "--http_idle_timeout_seconds inf"}},
      {"http_allowed_origins",
       {{"--http_allowed_origins=app.example.com"}, "--http_allowed_origins 'app.example.com'"}},
      {"http_allowed_hosts",
       {{"--http_allowed_hosts=http://proxy.internal"},
        "--http_allowed_hosts 'http://proxy.internal'"}},
      {"max_queue_delay_microseconds",
       {{"--max_queue_delay_microseconds=-5"}, "--max_queue_delay_microseconds -5"}},
      {"max_response_bytes", {{"--max_response_bytes=0"}, "--max_response_bytes 0"}},
      {"max_stream_message_bytes",
       {{"--max_stream_message_bytes=0"}, "--max_stream_message_bytes 0"}},
      {"max_tokens", {{"--max_tokens=-1"}, "--max_tokens -1"}},
      {"metrics_host",
       {{"--metrics_host=999.1.1.1", absl::StrCat("--metrics_port=", FreeTcpPort())},
        "--metrics_host '999.1.1.1'"}},
      {"metrics_port", {{"--metrics_port=70000"}, "--metrics_port 70000"}},
      {"model", {{"--model=no-equals-sign"}, "--model 'no-equals-sign'"}},
      {"model_repository",
       {{"--model_repository=/nonexistent/models"}, "--model_repository '/nonexistent/models'"}},
      {"shutdown_grace_seconds", {{"--shutdown_grace_seconds=-1"}, "--shutdown_grace_seconds -1"}},
      {"tls_cert_file", {{"--tls_cert_file=/nonexistent/cert.pem"}, "--tls_cert_file"}},
      {"tls_client_ca_file",
       {{"--tls_client_ca_file=/nonexistent/ca.pem"}, "--tls_client_ca_file"}},
      {"tls_key_file", {{"--tls_key_file=/nonexistent/key.pem"}, "--tls_key_file"}},
      {"worker_threads", {{"--worker_threads=-1"}, "--worker_threads -1"}},
      {"write_timeout_seconds", {{"--write_timeout_seconds=0"}, "--write_timeout_seconds 0"}},
  };
  return *refusals;
}

// Flags every value of which can work, checked for their effect below.
const std::set<std::string> kCheckedForEffect = {"dashboard_dir"};

TEST(ServerFlagsTest, EveryDocumentedFlagIsRefusedWithItsNameOrChangesSomething) {
  const std::set<std::string> documented = FlagsInHelp(ServerBinary());
  ASSERT_GT(documented.size(), 15u) << "--help lists too few flags; did its format change?";
  std::set<std::string> covered = kCheckedForEffect;
  for (const auto& [flag, refusal] : Refusals()) covered.insert(flag);
  EXPECT_EQ(documented, covered) << "documented: " << absl::StrJoin(documented, " ")
                                 << "\ncovered: " << absl::StrJoin(covered, " ");

  for (const auto& [flag, refusal] : Refusals()) {
    std::vector<std::string> argv = {ServerBinary(), "--model=bert=" + TinyBertDir(),
                                     "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
                                     "--metrics_port=0"};
    argv.insert(argv.end(), refusal.args.begin(), refusal.args.end());
    const CommandResult result = RunCommand(argv, absl::Seconds(60));
    EXPECT_EQ(result.exit_code, 2) << flag << ": " << absl::StrJoin(refusal.args, " ") << "\n"
                                   << result.stderr_text;
    EXPECT_NE(result.stderr_text.find(refusal.message), std::string::npos)
        << flag << ": the refusal does not say '" << refusal.message << "':\n"
        << result.stderr_text;
  }
}

// Values too large to work: each aborted the process (SIGABRT creating 100000 threads), made
// every call fail at once (a ceiling past the clock's range) or read a flag file without end
// before it was refused at the start.
TEST(ServerFlagsTest, ValuesPastWhatCanWorkAreRefusedAtTheStart) {
  const std::vector<std::pair<std::string, std::string>> refusals = {
      {"--http_threads=100000", "--http_threads 100000: expected 1 to 4096"},
      {"--max_call_seconds=1e10", "--max_call_seconds 1e+10: expected seconds above 0 and at most"},
      {"--write_timeout_seconds=1e12", "--write_timeout_seconds 1e+12: expected seconds above 0"},
      {"--http_header_timeout_seconds=1e300", "--http_header_timeout_seconds inf"},
      {"--max_queue_delay_microseconds=1000000000",
       "--max_queue_delay_microseconds 1000000000: expected a value from 0 to 10000000"},
      {"--shutdown_grace_seconds=1e20", "--shutdown_grace_seconds 1e+20: expected a value from 0"},
      {"--worker_threads=100000", "--worker_threads 100000: expected a value from 0 to 4096"},
      // Abseil read these without end.
      {"--flagfile=/dev/zero", "--flagfile: "},
      {"-flagfile=/etc/os-release,/dev/zero", "character device"}};
  for (const auto& [flag, message] : refusals) {
    const CommandResult result =
        RunCommand({ServerBinary(), "--model=bert=" + TinyBertDir(), "--listen=127.0.0.1:0",
                    "--http_listen=127.0.0.1:0", "--metrics_port=0", flag},
                   absl::Seconds(60));
    EXPECT_EQ(result.exit_code, 2) << flag << "\n" << result.stderr_text;
    EXPECT_NE(result.stderr_text.find(message), std::string::npos)
        << flag << ": the refusal does not say '" << message << "':\n"
        << result.stderr_text;
  }
  // Two listeners given one address: both flags named, not a port "in use" by another program.
  const int port = FreeTcpPort();
  const std::string on_port = absl::StrCat("127.0.0.1:", port);
  const std::vector<std::pair<std::vector<std::string>, std::string>> clashes = {
      {{"--listen=" + on_port, "--http_listen=127.0.0.1:0", absl::StrCat("--metrics_port=", port)},
       absl::StrCat("--listen '", on_port, "' and --metrics_host '0.0.0.0' and --metrics_port ",
                    port, ": expected different ports")},
      {{"--listen=127.0.0.1:0", "--http_listen=" + on_port, absl::StrCat("--metrics_port=", port),
        "--metrics_host=localhost"},
       absl::StrCat("--http_listen '", on_port, "' and --metrics_host 'localhost'")},
      {{"--listen=" + on_port, "--http_listen=0.0.0.0:" + std::to_string(port), "--metrics_port=0"},
       absl::StrCat("--listen '", on_port, "' and --http_listen '0.0.0.0:", port, "'")}};
  for (const auto& [flags, message] : clashes) {
    std::vector<std::string> argv = {ServerBinary(), "--model=bert=" + TinyBertDir()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const CommandResult result = RunCommand(argv, absl::Seconds(60));
    EXPECT_EQ(result.exit_code, 2) << message << "\n" << result.stderr_text;
    EXPECT_NE(result.stderr_text.find(message), std::string::npos)
        << "the refusal does not say '" << message << "':\n"
        << result.stderr_text;
  }
  // The same port on two different addresses is two listeners.
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = port;
  options.extra_flags = {"--metrics_host=127.0.0.2",
                         "--http_listen=127.0.0.1:" + std::to_string(port)};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
}

// OpenBLAS 0.3.21 takes a CPU newer than it for an SSE3 one (an Intel Xeon of family 6 model 207
// ran LibTorch's products on "Prescott" kernels at a quarter of their speed): the server starts
// again with OPENBLAS_CORETYPE set (models/kernels/gemm.h), and reports the core it runs on.
TEST(ServerStartTest, OpenBlasRunsKernelsOfThisCpusVectorWidth) {
  ASSERT_EQ(std::getenv("OPENBLAS_CORETYPE"), nullptr) << "the test needs OpenBLAS's own choice";
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string log = (*server)->Log();
  const std::string marker = "(OpenBLAS core ";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const size_t begin = at + marker.size();
  const std::string core = log.substr(begin, log.find(')', begin) - begin);
  __builtin_cpu_init();
  const bool has_avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  EXPECT_EQ(OpenBlasCoreTypeFor(core, has_avx2_fma, has_avx512), "")
      << "the server runs OpenBLAS's '" << core << "' kernels on a CPU with "
      << (has_avx512     ? "AVX-512"
          : has_avx2_fma ? "AVX2"
                         : "neither")
      << "\n"
      << log;
}

TEST(ServerFlagsTest, DashboardDirIsWhatTheRootPathServes) {
  TempDir dashboard;
  std::ofstream(dashboard.path() + "/index.html") << "<title>attnscope flag test</title>";
  for (const std::string& dir : {dashboard.path(), std::string("/nonexistent/dashboard")}) {
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir()};
    options.extra_flags = {"--dashboard_dir=" + dir};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    httplib::Client http("127.0.0.1", (*server)->http_port());
    httplib::Result root = http.Get("/");
    ASSERT_TRUE(root) << httplib::to_string(root.error());
    if (dir == dashboard.path()) {
      EXPECT_EQ(root->status, 200);
      EXPECT_NE(root->body.find("attnscope flag test"), std::string::npos) << root->body;
    } else {
      EXPECT_EQ(root->status, 404);
      EXPECT_NE(root->body.find("--dashboard_dir '/nonexistent/dashboard'"), std::string::npos)
          << root->body;
    }
  }
}

TEST(ServerFlagsTest, RequestLimitsRefuseWhatIsOverThemAndNameTheFlag) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.extra_flags = {"--max_inputs_per_request=2", "--max_request_bytes=2000"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();

  v1::EncodeRequest encode;
  encode.add_inputs()->set_text("paris");
  encode.add_inputs()->set_text("the river");
  EXPECT_TRUE(client->Encode(encode).ok());
  encode.add_inputs()->set_text("france");
  const absl::Status inputs = client->Encode(encode).status();
  EXPECT_EQ(inputs.code(), absl::StatusCode::kInvalidArgument) << inputs;
  EXPECT_NE(inputs.message().find("inputs: expected at most 2 per call (--max_inputs_per_request)"),
            std::string::npos)
      << inputs;
  v1::CrossAttentionRequest cross;
  cross.set_query("paris");
  for (int i = 0; i < 3; ++i) cross.add_documents("the capital of france is paris");
  const absl::Status documents = client->CrossAttention(cross).status();
  EXPECT_EQ(documents.code(), absl::StatusCode::kInvalidArgument) << documents;
  EXPECT_NE(documents.message().find("documents: expected at most 2"), std::string::npos)
      << documents;

  const std::string big(3000, 'a');
  v1::GetAttentionRequest attention;
  attention.set_text(big);
  EXPECT_EQ(client->GetAttention(attention).status().code(), absl::StatusCode::kResourceExhausted);
  httplib::Client http("127.0.0.1", (*server)->http_port());
  httplib::Result refused =
      http.Post("/attnscope.v1.AttentionService/Tokenize",
                absl::StrCat(R"({"text": ")", big, R"("})"), "application/json");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 413);
  EXPECT_NE(refused->body.find("--max_request_bytes"), std::string::npos) << refused->body;
  // The server goes on serving.
  attention.set_text("paris");
  EXPECT_TRUE(client->GetAttention(attention).ok());
}

// A port another process (here: another attnscope-server) listens on stops the start with exit
// code 2 and the flag's name, on each of the three listeners; the first server keeps every call.
TEST(ServerFlagsTest, APortInUseStopsTheStartNamingTheFlag) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> first = ServerProcess::Start(options);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::map<std::string, std::vector<std::string>> taken = {
      {"--listen", {"--listen=" + (*first)->address(), "--http_listen=127.0.0.1:0",
                    "--metrics_port=0"}},
      {"--http_listen",
       {"--listen=127.0.0.1:0", absl::StrCat("--http_listen=127.0.0.1:", (*first)->http_port()),
        "--metrics_port=0"}},
      {"--metrics_port",
       {"--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
        absl::StrCat("--metrics_port=", (*first)->metrics_port())}},
  };
  for (const auto& [flag, flags] : taken) {
    SCOPED_TRACE(flag);
    std::vector<std::string> argv = {ServerBinary(), "--model=bert=" + TinyBertDir()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const CommandResult second = RunCommand(argv, absl::Seconds(30));
    EXPECT_EQ(second.exit_code, 2) << second.stderr_text;
    EXPECT_NE(second.stderr_text.find(flag), std::string::npos) << second.stderr_text;
    // One readable line: gRPC's own multi-line bind error for --listen is not written.
    EXPECT_EQ(
        std::vector<std::string>(absl::StrSplit(absl::StripSuffix(second.stderr_text, "\n"), '\n'))
            .size(),
        1u)
        << second.stderr_text;
    EXPECT_EQ(second.stdout_text.find("listening on"), std::string::npos) << second.stdout_text;
  }
  std::unique_ptr<Client> client = (*first)->NewClient();
  v1::GetAttentionRequest attention;
  attention.set_text("paris");
  EXPECT_TRUE(client->GetAttention(attention).ok());
}

}  // namespace
}  // namespace attnscope::testing
