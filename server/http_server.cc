#include "server/http_server.h"

#include <google/protobuf/util/json_util.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "attnscope/v1/attnscope.pb.h"
#include "common/status_macros.h"
#include "server/connect_protocol.h"
#include "server/host_check.h"
#include "server/http_connection.h"
#include "server/http_request_fields.h"
#include "server/listen_address.h"
#include "server/metrics.h"
#include "server/request_body.h"

namespace attnscope::server {
namespace {

namespace http = boost::beast::http;

constexpr absl::string_view kServicePath = "/attnscope.v1.AttentionService/";

// What the dashboard's page may do, and nothing more: run its own app.js, apply its own app.css
// (and the styles its script sets), draw images it makes itself (a canvas's data: URL, the
// blob: of an export), call the API of its own origin, and never be framed or post a form
// elsewhere.
constexpr absl::string_view kDashboardPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// The request headers a page of an allowed origin may send: the key and the Connect protocol's.
constexpr absl::string_view kAllowedRequestHeaders =
    "Authorization, Content-Type, Connect-Protocol-Version, Connect-Timeout-Ms, "
    "Connect-Content-Encoding, Connect-Accept-Encoding, X-User-Agent";

// The method a request to kServicePath calls ("Tokenize").
absl::string_view MethodOf(const HttpRequestHeader& request) {
  return absl::StripPrefix(PathOf(View(request.target())), kServicePath);
}

// Peak memory of ToJson, in bytes per byte of the message's binary form (measured on a
// GetAttention answer of float32 tensors).
constexpr int64_t kJsonPrintingFactor = 6;

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Zeros and empty lists are printed too (layer 0, query_start 0), so that clients need not know
  // the defaults.
  options.always_print_primitive_fields = true;
  std::string json;
  google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// The call a request makes: its deadline, its key, and its end when the client goes away or the
// shutdown's grace period is over.
absl::StatusOr<Call> CallOf(const HttpRequestHeader& request, const HttpExchange& exchange) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const auto deadline, DeadlineOf(request));
  Call call = MakeCall(
      "http", deadline, [&exchange] { return exchange.ClientGone(); },
      HeaderOf(request, http::field::authorization), exchange.ClientSource());
  call.check = [client = std::move(call.check), &exchange](absl::string_view when) {
    if (exchange.GraceOver()) return GraceOverError(when);
    return client(when);
  };
  return call;
}

absl::string_view ContentTypeOf(absl::string_view path) {
  static const auto* types = new std::vector<std::pair<absl::string_view, absl::string_view>>{
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".txt", "text/plain; charset=utf-8"},
  };
  for (const auto& [extension, type] : *types) {
    if (absl::EndsWith(path, extension)) return type;
  }
  return "application/octet-stream";
}

HttpResponse NotFound(absl::string_view path) {
  return ErrorResponse(
      absl::NotFoundError(absl::StrCat("path '", path, "': not found; the API is at POST ",
                                       kServicePath, "<Method>, the dashboard at /")));
}

// `what` names the target ("the dashboard", "StreamAttention"); `why` may say why only `allowed`.
HttpResponse MethodNotAllowed(absl::string_view method, absl::string_view what,
                              absl::string_view allowed, absl::string_view why = "") {
  HttpResponse response =
      ErrorResponse(absl::InvalidArgumentError(absl::StrCat("HTTP method '", method, "' for ", what,
                                                            ": expected ", allowed, why)),
                    405);
  response.set(http::field::allow, BeastView(allowed));
  return response;
}

}  // namespace

class ApiHandler : public HttpHandler {
 public:
  ApiHandler(const HttpServer::Options& options, ServiceCore* core, bool loopback,
             std::string dashboard_root, std::string dashboard_missing)
      : core_(core),
        scheme_(options.tls.enabled() ? "https://" : "http://"),
        host_check_(loopback, options.allowed_hosts),
        dashboard_root_(std::move(dashboard_root)),
        dashboard_missing_(std::move(dashboard_missing)) {
    for (const std::string& origin : options.allowed_origins) {
      allowed_origins_.push_back(NormalizeOrigin(origin));
    }
  }

  // Browsers' requests first (they need no body), then the call's method, codec and key.
  std::optional<HttpResponse> Screen(const HttpRequestHeader& request,
                                     HttpFields& answer_headers) override {
    if (absl::Status host = host_check_.Check(request); !host.ok()) {
      return Counted(request, host.code(), ErrorResponse(host));
    }
    if (absl::Status single = CheckSingleFields(request); !single.ok()) {
      return Counted(request, single.code(), ErrorResponse(single));
    }
    if (absl::Status origin = CheckOrigin(request, answer_headers); !origin.ok()) {
      return Counted(request, origin.code(), ErrorResponse(origin));
    }
    if (request.method() == http::verb::options) return Preflight(request);
    if (absl::StartsWith(PathOf(View(request.target())), kServicePath)) return ScreenCall(request);
    if (request.method() != http::verb::get && request.method() != http::verb::head) {
      return MethodNotAllowed(View(request.method_string()), "the dashboard", "GET, HEAD");
    }
    return std::nullopt;
  }

  void OnRefused(const HttpRequestHeader& request, const absl::Status& status, int /*http_status*/,
                 absl::string_view rejection) override {
    if (!rejection.empty()) core_->RecordRejection(rejection);
    CountRefusal(request, status.code());
  }

  void Handle(const HttpRequest& request, HttpExchange& exchange) override {
    const absl::string_view path = PathOf(View(request.target()));
    if (!absl::StartsWith(path, kServicePath)) return exchange.Respond(ServeFile(path));
    Methods().at(std::string(MethodOf(request)))(*this, request, exchange);
  }

 private:
  using Route = std::function<void(const ApiHandler&, const HttpRequest&, HttpExchange&)>;

  // Every method of the service and how it is called.
  static const absl::flat_hash_map<std::string, Route>& Methods() {
    static const auto* methods = new absl::flat_hash_map<std::string, Route>{
        {"ListModels", UnaryRoute(&ServiceCore::ListModels)},
        {"GetModelInfo", UnaryRoute(&ServiceCore::GetModelInfo)},
        {"Tokenize", UnaryRoute(&ServiceCore::Tokenize)},
        {"GetAttention", UnaryRoute(&ServiceCore::GetAttention)},
        {"Encode", UnaryRoute(&ServiceCore::Encode)},
        {"CrossAttention", UnaryRoute(&ServiceCore::CrossAttention)},
        {"ListParameters", UnaryRoute(&ServiceCore::ListParameters)},
        {"GetParameter", UnaryRoute(&ServiceCore::GetParameter)},
        {"GetTrainingRecord", UnaryRoute(&ServiceCore::GetTrainingRecord)},
        {"Attribute", UnaryRoute(&ServiceCore::Attribute)},
        {"StreamAttention", StreamRoute(&ServiceCore::StreamAttention)},
        {"Generate", StreamRoute(&ServiceCore::Generate)},
    };
    return *methods;
  }

  template <typename Request, typename Response>
  using UnaryMethod = absl::Status (ServiceCore::*)(const Call&, const Request&, Response*);
  template <typename Request, typename Response>
  using StreamMethod = absl::Status (ServiceCore::*)(
      const Call&, const Request&, const std::function<absl::Status(const Response&)>&);

  template <typename Request, typename Response>
  static Route UnaryRoute(UnaryMethod<Request, Response> method) {
    return [method](const ApiHandler& self, const HttpRequest& request, HttpExchange& exchange) {
      self.Unary(method, request, exchange);
    };
  }
  template <typename Request, typename Response>
  static Route StreamRoute(StreamMethod<Request, Response> method) {
    return [method](const ApiHandler& self, const HttpRequest& request, HttpExchange& exchange) {
      self.Stream(method, request, exchange);
    };
  }

  // The request message of `request` parsed into `message`; `codec` passed Screen.
  static absl::Status Parse(const HttpRequest& request, Codec codec,
                            google::protobuf::Message* message) {
    ATTNSCOPE_ASSIGN_OR_RETURN(const std::string text, MessageOf(request, codec));
    return ParseBody(
        text, FormatOf(codec),
        request.method() == http::verb::get ? "query parameter 'message'" : "request body",
        message);
  }

  // Parse, with a message that does not parse counted in the metrics: no method runs to count it.
  absl::Status ParseCounted(const HttpRequest& request, Codec codec,
                            google::protobuf::Message* message) const {
    const auto start = std::chrono::steady_clock::now();
    absl::Status status = Parse(request, codec, message);
    if (!status.ok()) {
      core_->RecordRefused(
          MethodOf(request), "http", status.code(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return status;
  }

  template <typename Request, typename Response>
  void Unary(UnaryMethod<Request, Response> method, const HttpRequest& http_request,
             HttpExchange& exchange) const {
    const absl::StatusOr<Codec> codec = CodecOf(http_request, MethodOf(http_request));
    if (!codec.ok()) return exchange.Respond(ErrorResponse(codec.status(), 415));
    Request request;
    Response response;
    absl::Status status = ParseCounted(http_request, *codec, &request);
    absl::StatusOr<Call> call = CallOf(http_request, exchange);
    if (status.ok()) status = call.status();
    const bool json = *codec == Codec::kJson;
    const std::string what = absl::StrCat(
        MethodOf(http_request), json ? "'s JSON answer while it is printed" : "'s answer");
    // The answer's own budget ends with the method. Printing JSON takes about six times the
    // message's size at its peak (its binary form, base64 copies of the tensors, the growing
    // output: 329 MB of peak memory for a 37 MB GetAttention, against 106 MB as binary), so
    // those bytes are held from before the call is counted (a refusal is the call's status)
    // until it is printed; 64 slow readers of such answers took the server to 3.8 GB under a
    // 512 MB budget.
    ByteBudget::Hold printing;
    std::string client;
    if (call.ok()) {
      call->keep_answer = [&](int64_t bytes, const std::string& call_client,
                              absl::string_view fixes) -> absl::Status {
        client = call_client;
        // JSON's peak is counted: the refusal names it, and the binary form that takes a sixth.
        const std::string fix =
            json ? absl::StrCat(fixes.empty() ? "" : absl::StrCat(fixes, ", or "), "ask for ",
                                "application/proto, whose ", bytes,
                                " bytes this call would hold "
                                "instead of ",
                                kJsonPrintingFactor, " times as many")
                 : std::string(fixes);
        ATTNSCOPE_ASSIGN_OR_RETURN(
            printing,
            core_->HoldAnswerBytes(client, json ? kJsonPrintingFactor * bytes : bytes, what, fix));
        return absl::OkStatus();
      };
    }
    if (status.ok()) status = (core_->*method)(*call, request, &response);
    if (!status.ok()) return exchange.Respond(ErrorResponse(status));
    HttpResponse answer(http::status::ok, 11);
    answer.set(http::field::content_type, json ? "application/json" : "application/proto");
    std::string body = json ? ToJson(response) : response.SerializeAsString();
    // A slow reader keeps the body for as long as it takes: the body holds its bytes until it is
    // written, and the message it came from goes now.
    response.Clear();
    const ByteBudget::Hold hold =
        core_->NarrowAnswerBytes(client, std::move(printing), static_cast<int64_t>(body.size()));
    answer.body() = std::move(body);
    exchange.Respond(std::move(answer), hold);
  }

  template <typename Request, typename Response>
  void Stream(StreamMethod<Request, Response> method, const HttpRequest& http_request,
              HttpExchange& exchange) const {
    const absl::StatusOr<Codec> found = CodecOf(http_request, MethodOf(http_request));
    if (!found.ok()) return exchange.Respond(ErrorResponse(found.status(), 415));
    const Codec codec = *found;
    Request request;
    absl::Status status = ParseCounted(http_request, codec, &request);
    absl::StatusOr<Call> call = CallOf(http_request, exchange);
    if (status.ok()) status = call.status();
    if (!status.ok()) {
      return exchange.Respond(Enveloped(codec) ? FailedConnectStream(status, codec)
                                               : ErrorResponse(status));
    }
    const bool json = FormatOf(codec) == BodyFormat::kJson;
    HttpResponse head(http::status::ok, 11);
    head.set(http::field::content_type, codec == Codec::kJson    ? "application/x-ndjson"
                                        : codec == Codec::kProto ? "application/connect+proto"
                                        : json                   ? "application/connect+json"
                                                                 : "application/connect+proto");
    if (!exchange.StartStream(std::move(head))) return;
    status = (core_->*method)(*call, request, [&](const Response& message) -> absl::Status {
      const std::string payload = json ? ToJson(message) : message.SerializeAsString();
      if (!exchange.Write(codec == Codec::kJson ? absl::StrCat(payload, "\n")
                                                : Envelope(0, payload))) {
        return absl::CancelledError("the client closed the stream before it was complete");
      }
      return absl::OkStatus();
    });
    if (codec != Codec::kJson) {
      exchange.Write(EndOfStream(status));
    } else if (!status.ok()) {
      exchange.Write(absl::StrCat("{\"error\": ", ErrorJson(status), "}\n"));
    }
  }

  // A refusal of `request` with `code`: a call of a method of the service is counted in the
  // request metrics as the methods count theirs (another path's name is not a label: it would
  // grow the series without bound).
  void CountRefusal(const HttpRequestHeader& request, absl::StatusCode code) const {
    if (absl::StartsWith(PathOf(View(request.target())), kServicePath) &&
        Methods().contains(MethodOf(request))) {
      core_->RecordRefused(MethodOf(request), "http", code);
    }
  }
  // `response`, counted as CountRefusal says.
  std::optional<HttpResponse> Counted(const HttpRequestHeader& request, absl::StatusCode code,
                                      HttpResponse response) const {
    CountRefusal(request, code);
    return response;
  }

  std::optional<HttpResponse> ScreenCall(const HttpRequestHeader& request) const {
    const std::string method(MethodOf(request));
    if (!Methods().contains(method)) {
      return ErrorResponse(absl::UnimplementedError(absl::StrCat(
                               "method '", method,
                               "': not a method of attnscope.v1.AttentionService; expected one of ",
                               absl::StrJoin(Metrics::RpcNames(), ", "))),
                           404);
    }
    const auto counted = [&](absl::StatusCode code, HttpResponse response) {
      return Counted(request, code, std::move(response));
    };
    const bool get = request.method() == http::verb::get;
    if (!get && request.method() != http::verb::post) {
      return counted(absl::StatusCode::kInvalidArgument,
                     MethodNotAllowed(View(request.method_string()), method, "GET, POST"));
    }
    if (get && StreamingMethod(method)) {
      return counted(absl::StatusCode::kInvalidArgument,
                     MethodNotAllowed("GET", method, "POST",
                                      " (a streaming method; Connect's GET form is for unary "
                                      "methods)"));
    }
    const std::string site = absl::AsciiStrToLower(HeaderOf(request, "Sec-Fetch-Site"));
    if (get && (site == "cross-site" || site == "same-site") &&
        !OriginListed(HeaderOf(request, http::field::origin))) {
      const absl::Status refused = absl::PermissionDeniedError(absl::StrCat(
          "GET ", method, " from another site's page (Sec-Fetch-Site: ", site,
          "): refused, as a link or an image there could call the API with this browser; list "
          "the page's origin in --http_allowed_origins"));
      return counted(refused.code(), ErrorResponse(refused));
    }
    if (get) {
      if (const absl::Status query = CheckGetQuery(request); !query.ok()) {
        return counted(query.code(), ErrorResponse(query));
      }
    }
    const absl::StatusOr<Codec> codec = CodecOf(request, method);
    if (!codec.ok()) return counted(codec.status().code(), ErrorResponse(codec.status(), 415));
    absl::Status status = CheckEncoding(request, *codec);
    if (status.ok()) {
      status = core_->Authenticate(MakeCall("http", std::chrono::system_clock::time_point::max(),
                                            {}, HeaderOf(request, http::field::authorization)));
    }
    if (status.ok()) return std::nullopt;
    return counted(status.code(),
                   Enveloped(*codec) ? FailedConnectStream(status, *codec) : ErrorResponse(status));
  }

  // A page of another origin than the server's own may call only when listed; its answers then
  // carry the CORS header that lets the page read them.
  absl::Status CheckOrigin(const HttpRequestHeader& request, HttpFields& answer_headers) const {
    const std::string origin = HeaderOf(request, http::field::origin);
    if (origin.empty() ||
        NormalizeOrigin(origin) ==
            NormalizeOrigin(absl::StrCat(scheme_, HeaderOf(request, http::field::host)))) {
      return absl::OkStatus();
    }
    if (!OriginListed(origin)) {
      return absl::PermissionDeniedError(
          absl::StrCat("Origin '", origin,
                       "': refused, a page of another origin than the server's own; list it in "
                       "--http_allowed_origins to let its pages call the API"));
    }
    answer_headers.set(http::field::access_control_allow_origin, origin);
    answer_headers.set(http::field::vary, "Origin");
    return absl::OkStatus();
  }

  bool OriginListed(const std::string& origin) const {
    if (origin.empty()) return false;
    const std::string normal = NormalizeOrigin(origin);
    for (const std::string& allowed : allowed_origins_) {
      if (allowed == "*" || allowed == normal) return true;
    }
    return false;
  }

  // Connect's content encodings: the server compresses nothing and takes nothing compressed.
  static absl::Status CheckEncoding(const HttpRequestHeader& request, Codec codec) {
    const std::string version = HeaderOf(request, "Connect-Protocol-Version");
    if (!version.empty() && version != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("Connect-Protocol-Version '", version, "': expected 1, the version served"));
    }
    const absl::string_view header =
        Enveloped(codec) ? "Connect-Content-Encoding" : "Content-Encoding";
    std::string encoding = absl::AsciiStrToLower(HeaderOf(request, header));
    std::string what = std::string(header);
    if (request.method() == http::verb::get) {
      ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> compression,
                                 QueryParam(QueryOf(View(request.target())), "compression"));
      encoding = compression.value_or("");
      what = "query parameter 'compression'";
    }
    if (!encoding.empty() && encoding != "identity") {
      return absl::UnimplementedError(
          absl::StrCat(what, " '", encoding, "': not supported; the server takes identity only"));
    }
    return absl::OkStatus();
  }

  // Answers a CORS preflight of an origin CheckOrigin let through; without one, says what the
  // server takes.
  HttpResponse Preflight(const HttpRequestHeader& request) const {
    const std::string origin = HeaderOf(request, http::field::origin);
    HttpResponse response(http::status::no_content, 11);
    if (origin.empty() || request.count(http::field::access_control_request_method) == 0) {
      response.set(http::field::allow, "GET, POST, OPTIONS");
      return response;
    }
    response.set(http::field::access_control_allow_origin, origin);
    response.set(http::field::access_control_allow_methods, "GET, POST");
    response.set(http::field::access_control_allow_headers, BeastView(kAllowedRequestHeaders));
    // Chrome's cap; the answer depends on nothing but the origin.
    response.set(http::field::access_control_max_age, "7200");
    response.set(http::field::vary,
                 "Origin, Access-Control-Request-Method, Access-Control-Request-Headers");
    return response;
  }

  // A file of the dashboard: a regular file strictly inside its folder once symbolic links are
  // resolved, so that neither `..` nor a link leads out of it, and not a hidden one.
  HttpResponse ServeFile(absl::string_view path) const {
    if (dashboard_root_.empty()) {
      if (path != "/") return NotFound(path);
      HttpResponse response(http::status::not_found, 11);
      response.set(http::field::content_type, "text/plain; charset=utf-8");
      response.body() =
          absl::StrCat(dashboard_missing_, "; the API is at POST ", kServicePath, "<Method>\n");
      return response;
    }
    absl::StatusOr<std::string> decoded = PercentDecode(path, /*plus_is_space=*/false);
    if (!decoded.ok()) return ErrorResponse(decoded.status());
    const std::vector<absl::string_view> segments = absl::StrSplit(*decoded, '/');
    if (absl::StrContains(*decoded, '\0') || absl::c_linear_search(segments, "..")) {
      return ErrorResponse(absl::InvalidArgumentError(absl::StrCat(
          "path '", path, "': expected a file of the dashboard, got a NUL byte or '..'")));
    }
    // Hidden files (.env, .git/) may sit in a deployment's folder without being the dashboard's.
    if (absl::c_any_of(segments,
                       [](absl::string_view segment) { return absl::StartsWith(segment, "."); })) {
      return NotFound(path);
    }
    const std::string wanted =
        absl::StrCat(dashboard_root_, *decoded == "/" ? "/index.html" : *decoded);
    char resolved[PATH_MAX];
    struct stat info {};
    if (realpath(wanted.c_str(), resolved) == nullptr ||
        !absl::StartsWith(resolved, absl::StrCat(dashboard_root_, "/")) ||
        stat(resolved, &info) != 0 || !S_ISREG(info.st_mode)) {
      return NotFound(path);
    }
    std::ifstream file(resolved, std::ios::binary);
    std::ostringstream contents;
    contents << file.rdbuf();
    if (!file) return NotFound(path);
    HttpResponse response(http::status::ok, 11);
    response.set(http::field::content_type, BeastView(ContentTypeOf(resolved)));
    response.set("Content-Security-Policy", BeastView(kDashboardPolicy));
    response.body() = std::move(contents).str();
    return response;
  }

  ServiceCore* const core_;
  const std::string scheme_;
  const HostCheck host_check_;
  // The folder's real path, or empty when there is no dashboard.
  const std::string dashboard_root_;
  const std::string dashboard_missing_;
  std::vector<std::string> allowed_origins_;
};

HttpServer::HttpServer(std::unique_ptr<ApiHandler> handler, std::unique_ptr<HttpListener> listener)
    : handler_(std::move(handler)), listener_(std::move(listener)) {}

HttpServer::~HttpServer() = default;

void HttpServer::Shutdown(absl::Time deadline) { listener_->Shutdown(deadline); }

int HttpServer::port() const { return listener_->port(); }

absl::Status HttpServer::ValidateOptions(const Options& options) {
  ATTNSCOPE_RETURN_IF_ERROR(
      ParseListenAddress("--http_listen", options.listen, "127.0.0.1:8080 or 0.0.0.0:8080")
          .status());
  if (options.threads < 1 || options.threads > kMaxHttpThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--http_threads ", options.threads,
                                                   ": expected 1 to ", kMaxHttpThreads,
                                                   " requests answered at once"));
  }
  if (options.max_connections < 1 || options.max_connections > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_http_connections ", options.max_connections, ": expected 1 to 1000000 connections"));
  }
  if (options.max_waiting < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_concurrent_requests ", options.max_waiting, ": expected 0 (no limit) or more"));
  }
  for (const std::string& origin : options.allowed_origins) {
    const size_t scheme_end = origin.find("://");
    const bool valid =
        origin == "*" ||
        ((absl::StartsWith(origin, "http://") || absl::StartsWith(origin, "https://")) &&
         origin.size() > scheme_end + 3 && origin.find('/', scheme_end + 3) == std::string::npos);
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--http_allowed_origins '", origin,
          "': expected origins as scheme://host[:port] (e.g. https://app.example.com), "
          "comma-separated, or *"));
    }
  }
  for (const std::string& host : options.allowed_hosts) {
    if (host.empty() || host.find_first_of("/@ \t") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http_allowed_hosts '", host,
                       "': expected host names as a Host header carries them (proxy.internal, "
                       "proxy.internal:8080), comma-separated, without a scheme or a path"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              ServiceCore* core) {
  ATTNSCOPE_RETURN_IF_ERROR(ValidateOptions(options));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const ListenAddress address,
      ParseListenAddress("--http_listen", options.listen, "127.0.0.1:8080 or 0.0.0.0:8080"));
  ATTNSCOPE_RETURN_IF_ERROR(ValidateTlsOptions(options.tls));
  HttpListener::Options listen;
  listen.host = address.host;
  listen.port = address.port;
  listen.tls = options.tls;
  listen.limits = options.limits;
  listen.workers = options.threads;
  listen.max_waiting = options.max_waiting;
  listen.max_connections = options.max_connections;
  absl::StatusOr<std::unique_ptr<HttpListener>> listener = HttpListener::Bind(listen);
  if (!listener.ok() && listener.status().code() == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("--http_listen '", options.listen, "': cannot listen there (",
                     listener.status().message(), "); choose another address or port"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(listener.status());

  std::string root;
  char resolved[PATH_MAX];
  struct stat info {};
  // A folder without index.html (a source or CMake folder given by mistake) is no dashboard.
  if (!options.dashboard_dir.empty() && realpath(options.dashboard_dir.c_str(), resolved) &&
      stat(resolved, &info) == 0 && S_ISDIR(info.st_mode) &&
      stat(absl::StrCat(resolved, "/index.html").c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
    root = resolved;
  }
  const std::string missing =
      options.dashboard_dir.empty()
          ? std::string("attnscope-server runs without the dashboard (--dashboard_dir is empty)")
          : absl::StrCat("the dashboard is not built: --dashboard_dir '", options.dashboard_dir,
                         "' is not a directory holding index.html (scripts/build.sh builds it "
                         "into build/dashboard)");
  // Said at start too: a mistyped folder otherwise shows only as a 404 at "/".
  if (!options.dashboard_dir.empty() && root.empty()) {
    std::fprintf(stderr, "attnscope-server: warning: %s; HTTP serves the API alone\n",
                 missing.c_str());
  }
  auto handler = std::make_unique<ApiHandler>(options, core, (*listener)->loopback(),
                                              std::move(root), missing);
  (*listener)->Start(handler.get());
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(handler), *std::move(listener)));
}

}  // namespace attnscope::server
