// TLS, mutual TLS and API keys (server/security.h) through the client library, the CLI and HTTP,
// against a real attnscope-server on loopback. Certificates are made for each test by the openssl
// command: a CA, a server certificate for 127.0.0.1, a client certificate from that CA, and one
// from a CA the server does not trust.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// OpenSSL writes with write(2), so a write to a connection the server has refused would raise
// SIGPIPE and end this binary instead of failing an assertion.
[[maybe_unused]] const bool kBrokenPipesIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

class Certificates {
 public:
  // Makes every file, or fails the test.
  Certificates() {
    const std::string ext = Path("ext");
    MakeCa("ca", "attnscope test CA");
    MakeCa("rogue-ca", "untrusted CA");
    Write(Path("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    Write(Path("client.ext"), "extendedKeyUsage=clientAuth\n");
    MakeSigned("server", "localhost", "ca", "server.ext");
    MakeSigned("client", "attnscope test client", "ca", "client.ext");
    MakeSigned("rogue-client", "rogue client", "rogue-ca", "client.ext");
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  std::string Pem(const std::string& name) const { return Path(name + ".pem"); }
  std::string Key(const std::string& name) const { return Path(name + ".key"); }

 private:
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  void Run(const std::vector<std::string>& argv) {
    const CommandResult result = RunCommand(argv, absl::Seconds(60));
    ASSERT_EQ(result.exit_code, 0) << absl::StrJoin(argv, " ") << "\n" << result.stderr_text;
  }
  void MakeCa(const std::string& name, const std::string& subject) {
    Run({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", Key(name), "-out", Pem(name), "-days",
         "2", "-subj", "/CN=" + subject});
  }
  void MakeSigned(const std::string& name, const std::string& subject, const std::string& ca,
                  const std::string& ext) {
    Run({"/usr/bin/openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", Key(name), "-out", Path(name + ".csr"), "-subj", "/CN=" + subject});
    Run({"/usr/bin/openssl", "x509", "-req", "-in", Path(name + ".csr"), "-CA", Pem(ca), "-CAkey",
         Key(ca), "-CAcreateserial", "-out", Pem(name), "-days", "2", "-extfile", Path(ext)});
  }

  TempDir dir_;
};

std::unique_ptr<ServerProcess> StartServer(const std::vector<std::string>& flags) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = flags;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::unique_ptr<Client> NewClient(const ServerProcess& server,
                                  std::shared_ptr<grpc::ChannelCredentials> credentials,
                                  const std::string& api_key = "") {
  ClientOptions options;
  options.target = server.address();
  options.credentials = std::move(credentials);
  options.api_key = api_key;
  options.max_attempts = 1;
  options.default_timeout = absl::Seconds(10);
  return *Client::Create(options);
}

std::shared_ptr<grpc::ChannelCredentials> Tls(const Certificates& certs,
                                              const std::string& client = "") {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      TlsCredentials(certs.Pem("ca"), client.empty() ? "" : certs.Pem(client),
                     client.empty() ? "" : certs.Key(client));
  EXPECT_TRUE(credentials.ok()) << credentials.status();
  return *credentials;
}

v1::GetAttentionRequest Attention() {
  v1::GetAttentionRequest request;
  request.set_text("the capital of france is paris");
  return request;
}

constexpr char kTokenize[] = "/attnscope.v1.AttentionService/Tokenize";

TEST(SecurityTest, TlsServesTlsClientsAndRefusesPlaintextCleanly) {
  Certificates certs;
  std::unique_ptr<ServerProcess> server = StartServer(
      {"--tls_cert_file=" + certs.Pem("server"), "--tls_key_file=" + certs.Key("server")});
  ASSERT_NE(server, nullptr);

  std::unique_ptr<Client> plaintext = NewClient(*server, grpc::InsecureChannelCredentials());
  EXPECT_EQ(plaintext->ListModels().status().code(), absl::StatusCode::kUnavailable);
  std::unique_ptr<Client> tls = NewClient(*server, Tls(certs));
  EXPECT_TRUE(tls->GetAttention(Attention()).ok());
  absl::StatusOr<ServingStatus> health = tls->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);

  // HTTPS with the same certificate; plain HTTP to it gets a plain answer saying so.
  httplib::SSLClient https("127.0.0.1", server->http_port());
  https.set_ca_cert_path(certs.Pem("ca").c_str());
  https.enable_server_certificate_verification(true);
  httplib::Result answer = https.Post(kTokenize, R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200) << answer->body;
  httplib::Client http("127.0.0.1", server->http_port());
  http.set_read_timeout(5);
  httplib::Result refused = http.Post(kTokenize, R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("plain HTTP sent to a port that speaks HTTPS"), std::string::npos)
      << refused->body;
  EXPECT_TRUE(https.Post(kTokenize, R"({"text": "paris"})", "application/json"));

  // The CLI, and the server still serving after the plaintext attempts.
  const CommandResult cli = RunCommand(
      {CliBinary(), "models", "--server", server->address(), "--tls_ca_file", certs.Pem("ca")});
  EXPECT_EQ(cli.exit_code, 0) << cli.stderr_text;
  EXPECT_NE(cli.stdout_text.find("\"bert\""), std::string::npos) << cli.stdout_text;
  const CommandResult cli_plain =
      RunCommand({CliBinary(), "models", "--server", server->address(), "--timeout", "5"});
  EXPECT_EQ(cli_plain.exit_code, 1) << cli_plain.stderr_text;
  EXPECT_TRUE(tls->ListModels().ok());
}

TEST(SecurityTest, MutualTlsRequiresAClientCertificateFromTheConfiguredCa) {
  Certificates certs;
  std::unique_ptr<ServerProcess> server = StartServer({"--tls_cert_file=" + certs.Pem("server"),
                                                       "--tls_key_file=" + certs.Key("server"),
                                                       "--tls_client_ca_file=" + certs.Pem("ca")});
  ASSERT_NE(server, nullptr);

  EXPECT_EQ(NewClient(*server, Tls(certs))->ListModels().status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(NewClient(*server, Tls(certs, "rogue-client"))->ListModels().status().code(),
            absl::StatusCode::kUnavailable);
  std::unique_ptr<Client> trusted = NewClient(*server, Tls(certs, "client"));
  EXPECT_TRUE(trusted->GetAttention(Attention()).ok());

  httplib::SSLClient with_certificate("127.0.0.1", server->http_port(), certs.Pem("client"),
                                      certs.Key("client"));
  with_certificate.set_ca_cert_path(certs.Pem("ca").c_str());
  httplib::Result answer =
      with_certificate.Post(kTokenize, R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200) << answer->body;
  httplib::SSLClient without("127.0.0.1", server->http_port());
  without.set_ca_cert_path(certs.Pem("ca").c_str());
  httplib::Result refused = without.Post(kTokenize, R"({"text": "paris"})", "application/json");
  EXPECT_FALSE(refused);

  const CommandResult cli = RunCommand(
      {CliBinary(), "health", "--server", server->address(), "--tls_ca_file", certs.Pem("ca"),
       "--tls_cert_file", certs.Pem("client"), "--tls_key_file", certs.Key("client")});
  EXPECT_EQ(cli.exit_code, 0) << cli.stderr_text;
}

TEST(SecurityTest, ApiKeysGateEveryRpcButHealthOnBothTransports) {
  TempDir dir;
  const std::string keys = dir.path() + "/keys";
  std::ofstream(keys) << "# attnscope API keys\nfirst-key-0123\n\n  second-key-4567  \n";
  const std::string key_file = dir.path() + "/my-key";
  std::ofstream(key_file) << "second-key-4567\n";
  std::unique_ptr<ServerProcess> server = StartServer({"--api_keys_file=" + keys});
  ASSERT_NE(server, nullptr);

  const absl::Status missing =
      NewClient(*server, grpc::InsecureChannelCredentials())->GetAttention(Attention()).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated) << missing;
  EXPECT_NE(missing.message().find("authorization: Bearer"), std::string::npos) << missing;
  const absl::Status wrong =
      NewClient(*server, grpc::InsecureChannelCredentials(), "first-key-0124")
          ->ListModels()
          .status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated) << wrong;
  std::unique_ptr<Client> keyed =
      NewClient(*server, grpc::InsecureChannelCredentials(), "second-key-4567");
  EXPECT_TRUE(keyed->GetAttention(Attention()).ok());
  EXPECT_TRUE(keyed->StreamAttention(Attention()).ok());
  // Health checks need no key: probes and load balancers have none.
  absl::StatusOr<ServingStatus> health =
      NewClient(*server, grpc::InsecureChannelCredentials())->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);

  httplib::Client http("127.0.0.1", server->http_port());
  httplib::Result no_key = http.Post(kTokenize, R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_NE(no_key->body.find("\"unauthenticated\""), std::string::npos) << no_key->body;
  // A refused stream is an HTTP error, not a 200 stream ending in an error line.
  httplib::Result no_key_stream = http.Post("/attnscope.v1.AttentionService/StreamAttention",
                                            R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(no_key_stream);
  EXPECT_EQ(no_key_stream->status, 401);
  // Credentials of another scheme are named as such, not as a wrong key.
  httplib::Result basic = http.Post(kTokenize, {{"Authorization", "Basic c2Vjb25kLWtleS00NTY3"}},
                                    R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->status, 401);
  EXPECT_NE(basic->body.find("authorization scheme 'Basic': expected Bearer"), std::string::npos)
      << basic->body;
  httplib::Result bearer_alone = http.Post(kTokenize, {{"Authorization", "Bearer "}},
                                           R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(bearer_alone);
  EXPECT_EQ(bearer_alone->status, 401);
  EXPECT_NE(bearer_alone->body.find("no API key"), std::string::npos) << bearer_alone->body;
  httplib::Result with_key = http.Post(kTokenize, {{"Authorization", "Bearer first-key-0123"}},
                                       R"({"text": "paris"})", "application/json");
  ASSERT_TRUE(with_key);
  EXPECT_EQ(with_key->status, 200) << with_key->body;

  // The CLI: the key from a file or from ATTNSCOPE_API_KEY.
  const CommandResult without_key =
      RunCommand({CliBinary(), "models", "--server", server->address()});
  EXPECT_EQ(without_key.exit_code, 1);
  EXPECT_NE(without_key.stderr_text.find("UNAUTHENTICATED"), std::string::npos)
      << without_key.stderr_text;
  const CommandResult from_file = RunCommand(
      {CliBinary(), "models", "--server", server->address(), "--api_key_file", key_file});
  EXPECT_EQ(from_file.exit_code, 0) << from_file.stderr_text;
  setenv("ATTNSCOPE_API_KEY", "first-key-0123", /*overwrite=*/1);
  const CommandResult from_env = RunCommand({CliBinary(), "models", "--server", server->address()});
  unsetenv("ATTNSCOPE_API_KEY");
  EXPECT_EQ(from_env.exit_code, 0) << from_env.stderr_text;

  // Each refusal counted once: 2 gRPC, 4 HTTP, 1 CLI.
  absl::StatusOr<std::string> scrape = HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> rejected = FindSamples(
      ParseMetrics(*scrape), "attnscope_rejected_requests_total", {{"reason", "unauthenticated"}});
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].value, 7);
  // And each is a call in attnscope_requests_total, whichever transport refused it.
  double unauthenticated_calls = 0;
  for (const MetricSample& sample : FindSamples(ParseMetrics(*scrape), "attnscope_requests_total",
                                                {{"code", "UNAUTHENTICATED"}})) {
    unauthenticated_calls += sample.value;
  }
  EXPECT_EQ(unauthenticated_calls, 7);
}

TEST(SecurityTest, FlagsThatCannotWorkStopTheStartWithTheirName) {
  Certificates certs;
  TempDir dir;
  const std::string empty = dir.path() + "/empty-keys";
  std::ofstream(empty) << "# no keys yet\n";
  const std::string unsendable = dir.path() + "/unsendable-keys";
  std::ofstream(unsendable) << "first-key-0123\nk\xc3\xa9y-of-the-second-line\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tls_cert_file=" + certs.Pem("server")}, "--tls_key_file"},
      {{"--tls_cert_file=" + dir.path() + "/missing.pem", "--tls_key_file=" + certs.Key("server")},
       "missing.pem"},
      {{"--tls_client_ca_file=" + certs.Pem("ca")}, "--tls_client_ca_file"},
      // Files that are not what their flag wants were reported as a --listen that cannot be
      // bound.
      {{"--tls_cert_file=" + certs.Key("server"), "--tls_key_file=" + certs.Key("server")},
       "--tls_cert_file"},
      {{"--tls_cert_file=" + certs.Pem("server"), "--tls_key_file=" + certs.Pem("server")},
       "--tls_key_file"},
      {{"--tls_cert_file=" + certs.Pem("server"), "--tls_key_file=" + certs.Key("client")},
       "expected the private key of --tls_cert_file"},
      {{"--tls_cert_file=" + certs.Pem("server"), "--tls_key_file=" + certs.Key("server"),
        "--tls_client_ca_file=" + certs.Key("ca")},
       "--tls_client_ca_file"},
      {{"--api_keys_file=" + empty}, "expected at least one key"},
      {{"--api_keys_file=" + unsendable},
       "line 2: expected a key of visible ASCII characters (it is sent in a header), got byte "
       "0xc3"},
      {{"--api_keys_file=" + dir.path() + "/none"}, "--api_keys_file"},
  };
  for (const auto& [flags, named] : cases) {
    std::vector<std::string> argv = {ServerBinary(), "--model=bert=" + TinyBertDir(),
                                     "--listen=127.0.0.1:0", "--http_listen=127.0.0.1:0",
                                     "--metrics_port=0"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const CommandResult result = RunCommand(argv, absl::Seconds(60));
    EXPECT_EQ(result.exit_code, 2) << absl::StrJoin(flags, " ") << "\n" << result.stderr_text;
    EXPECT_NE(result.stderr_text.find(named), std::string::npos) << result.stderr_text;
  }
}

// One request on a new connection to 127.0.0.1:`port`: `head` is the request line and headers
// without the blank line; `body` is sent with its Content-Length.
RawResponse Ask(int port, const std::string& head, const std::string& body = "") {
  absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(port);
  EXPECT_TRUE(connection.ok()) << connection.status();
  if (!connection.ok()) return {};
  (*connection)->Send(absl::StrCat(head, "\r\nContent-Length: ", body.size(), "\r\n\r\n", body));
  absl::StatusOr<RawResponse> answer = (*connection)->ReadResponse(absl::Seconds(10));
  EXPECT_TRUE(answer.ok()) << head << ": " << answer.status();
  return answer.ok() ? *answer : RawResponse{};
}

std::string HeaderOf(const RawResponse& response, const std::string& name) {
  auto it = response.headers.find(name);
  return it == response.headers.end() ? "" : it->second;
}

TEST(SecurityTest, BrowsersFromOtherOriginsAreRefusedUnlessAllowed) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"--http_allowed_origins=https://app.example,http://localhost:3000",
                   "--http_allowed_hosts=attnscope.internal", "--metrics_host=127.0.0.1"});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string own = absl::StrCat("http://127.0.0.1:", port);
  const std::string post = absl::StrCat("POST ", kTokenize, " HTTP/1.1\r\nHost: 127.0.0.1:", port);
  const std::string json = "\r\nContent-Type: application/json";
  const std::string body = R"({"text": "paris"})";

  // The dashboard's own origin, and no origin at all (curl, programs), are served.
  EXPECT_EQ(Ask(port, post + json + "\r\nOrigin: " + own, body).status, 200);
  EXPECT_EQ(Ask(port, post + json, body).status, 200);
  // Another origin is refused, naming the flag that would allow it.
  RawResponse refused = Ask(port, post + json + "\r\nOrigin: https://evil.example", body);
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.body.find("--http_allowed_origins"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("\"permission_denied\""), std::string::npos) << refused.body;
  // An allowed one is served with the CORS header that lets its page read the answer.
  RawResponse allowed = Ask(port, post + json + "\r\nOrigin: https://app.example", body);
  EXPECT_EQ(allowed.status, 200);
  EXPECT_EQ(HeaderOf(allowed, "access-control-allow-origin"), "https://app.example");

  // Preflights: answered for allowed origins, refused for others.
  const std::string preflight = absl::StrCat(
      "OPTIONS ", kTokenize, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
      "\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: content-type,authorization,connect-protocol-version");
  RawResponse preflight_ok = Ask(port, preflight + "\r\nOrigin: http://localhost:3000");
  EXPECT_EQ(preflight_ok.status, 204);
  EXPECT_EQ(HeaderOf(preflight_ok, "access-control-allow-origin"), "http://localhost:3000");
  EXPECT_NE(absl::AsciiStrToLower(HeaderOf(preflight_ok, "access-control-allow-headers"))
                .find("authorization"),
            std::string::npos);
  EXPECT_NE(HeaderOf(preflight_ok, "access-control-allow-methods").find("POST"), std::string::npos);
  RawResponse preflight_refused = Ask(port, preflight + "\r\nOrigin: https://evil.example");
  EXPECT_EQ(preflight_refused.status, 403);
  EXPECT_NE(preflight_refused.body.find("--http_allowed_origins"), std::string::npos);

  // The content types a page may send anywhere without a preflight are refused from browsers...
  for (const std::string type :
       {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    SCOPED_TRACE(type);
    RawResponse from_page =
        Ask(port, post + "\r\nContent-Type: " + type + "\r\nSec-Fetch-Site: same-origin", body);
    EXPECT_EQ(from_page.status, 415);
    EXPECT_NE(from_page.body.find("\"code\""), std::string::npos) << from_page.body;
  }
  // ... while curl's default form type (curl -d) stays JSON, however long the body.
  std::string long_text;
  while (long_text.size() < 20000) long_text += "the quick brown fox jumps over the lazy dog ";
  RawResponse curl =
      Ask(port, post + "\r\nContent-Type: application/x-www-form-urlencoded",
          absl::StrCat(R"({"text": ")", long_text,
                       R"(", "tokenization": {"truncation": "TRUNCATION_LONGEST_FIRST"}})"));
  EXPECT_EQ(curl.status, 200) << curl.body.substr(0, 300);

  // GET calls from another site's page (a link, an <img>) are refused; typed URLs are not.
  const std::string get = absl::StrCat(
      "GET /attnscope.v1.AttentionService/ListModels HTTP/1.1\r\nHost: 127.0.0.1:", port);
  EXPECT_EQ(Ask(port, get + "\r\nSec-Fetch-Site: cross-site").status, 403);
  EXPECT_EQ(Ask(port, get + "\r\nSec-Fetch-Site: same-site").status, 403);
  EXPECT_EQ(Ask(port, get + "\r\nSec-Fetch-Site: none").status, 200);
  EXPECT_EQ(Ask(port, get + "\r\nSec-Fetch-Site: cross-site\r\nOrigin: https://app.example").status,
            200);

  // DNS rebinding: on a loopback listener the Host must be a loopback name or an allowed host.
  const std::string get_from = "GET /attnscope.v1.AttentionService/ListModels HTTP/1.1\r\nHost: ";
  RawResponse rebound = Ask(port, get_from + "evil.example:" + std::to_string(port));
  EXPECT_EQ(rebound.status, 403);
  EXPECT_NE(rebound.body.find("--http_allowed_hosts"), std::string::npos) << rebound.body;
  for (const std::string host :
       {"localhost:1234", "127.0.0.1", "[::1]:8080", "LocalHost", "attnscope.internal:8080"}) {
    EXPECT_EQ(Ask(port, get_from + host).status, 200) << host;
  }
  // The metrics port on loopback likewise: a rebound page must not read them. (On 0.0.0.0, their
  // default, the name is the deployment's, as for --http_listen.)
  const std::string scrape_from = "GET /metrics HTTP/1.1\r\nHost: ";
  RawResponse scraped_rebound =
      Ask(server->metrics_port(), scrape_from + "evil.example:" + std::to_string(port));
  EXPECT_EQ(scraped_rebound.status, 403);
  EXPECT_NE(scraped_rebound.body.find("--http_allowed_hosts"), std::string::npos)
      << scraped_rebound.body;
  for (const std::string host : {"localhost:9464", "127.0.0.1", "attnscope.internal"}) {
    RawResponse scraped = Ask(server->metrics_port(), scrape_from + host);
    EXPECT_EQ(scraped.status, 200) << host;
    EXPECT_NE(scraped.body.find("attnscope_requests_total"), std::string::npos) << host;
  }
  // An HTTP/1.1 request carries exactly one Host (RFC 9112, section 3.2): a second one could
  // smuggle a rebound name past a proxy that reads the other.
  RawResponse twice = Ask(port, get_from + "127.0.0.1\r\nHost: evil.example");
  EXPECT_EQ(twice.status, 400);
  EXPECT_NE(twice.body.find("expected exactly one"), std::string::npos) << twice.body;
  EXPECT_EQ(
      Ask(port, "GET /attnscope.v1.AttentionService/ListModels HTTP/1.1\r\nAccept: */*").status,
      400);
}

TEST(SecurityTest, DashboardFilesAreServedFromInsideTheirFolderOnly) {
  TempDir root;
  const std::string dashboard = root.path() + "/dashboard";
  std::filesystem::create_directories(dashboard + "/assets");
  std::ofstream(dashboard + "/index.html") << "<title>dashboard</title>";
  std::ofstream(dashboard + "/app.js") << "console.log('app');";
  std::ofstream(dashboard + "/app.css") << "body {}";
  std::ofstream(root.path() + "/secret.txt") << "not for clients";
  // A deployment's hidden files (an editor's, git's, a .env) are not the dashboard's.
  std::ofstream(dashboard + "/.env") << "not for clients";
  std::filesystem::create_directories(dashboard + "/.git");
  std::ofstream(dashboard + "/.git/config") << "not for clients";
  std::filesystem::create_symlink(root.path() + "/secret.txt", dashboard + "/link.txt");
  std::filesystem::create_symlink("/etc", dashboard + "/etc");
  std::unique_ptr<ServerProcess> server = StartServer({"--dashboard_dir=" + dashboard});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  auto get = [port](const std::string& path) {
    return Ask(port, absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port));
  };

  const RawResponse index = get("/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, "<title>dashboard</title>");
  EXPECT_EQ(HeaderOf(index, "content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(HeaderOf(index, "x-content-type-options"), "nosniff");
  const std::string policy = HeaderOf(index, "content-security-policy");
  EXPECT_NE(policy.find("default-src 'none'"), std::string::npos) << policy;
  EXPECT_NE(policy.find("script-src 'self'"), std::string::npos) << policy;
  EXPECT_NE(policy.find("connect-src 'self'"), std::string::npos) << policy;
  EXPECT_EQ(HeaderOf(get("/app.js"), "content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(HeaderOf(get("/app.css"), "content-type"), "text/css; charset=utf-8");

  // Nothing outside the folder, however the path is spelled, and never a page as a script.
  for (const std::string path :
       {"/index.html%00.js", "/../secret.txt", "/%2e%2e/secret.txt", "/assets/../../secret.txt",
        "/link.txt", "/etc/passwd", "/assets", "/missing.js", "/index.html%2f", "//etc/passwd",
        "/.env", "/.git/config", "/%2eenv", "/assets/../.env"}) {
    SCOPED_TRACE(path);
    const RawResponse answer = get(path);
    EXPECT_TRUE(answer.status == 400 || answer.status == 404) << answer.status;
    EXPECT_EQ(answer.body.find("not for clients"), std::string::npos);
    EXPECT_EQ(answer.body.find("root:"), std::string::npos);
    EXPECT_NE(HeaderOf(answer, "content-type"), "text/javascript; charset=utf-8");
  }
}

}  // namespace
}  // namespace attnscope::testing
