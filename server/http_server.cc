#include "server/http_server.h"

#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "attnscope/v1/attnscope.pb.h"
#include "common/status_macros.h"
#include "server/listen_address.h"
#include "server/metrics.h"
#include "server/request_body.h"

namespace attnscope::server {
namespace {

constexpr absl::string_view kServicePath = "/attnscope.v1.AttentionService/";

// The body format a Content-Type names (parameters such as charset ignored). A request without
// one, or with curl's default form type, is read as JSON, so that `curl -d '{...}'` needs no
// header.
absl::StatusOr<BodyFormat> FormatOf(const httplib::Request& request) {
  std::string type = request.get_header_value("Content-Type");
  type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(type.substr(0, type.find(';'))));
  if (type.empty() || type == "application/json" || type == "application/x-www-form-urlencoded") {
    return BodyFormat::kJson;
  }
  if (type == "application/proto" || type == "application/x-protobuf") return BodyFormat::kProto;
  return absl::InvalidArgumentError(
      absl::StrCat("Content-Type '", type,
                   "': expected application/json or application/proto; e.g. curl -H 'Content-Type: "
                   "application/json' -d '{\"text\": \"...\"}'"));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  // Zeros and empty lists are printed too (layer 0, query_start 0), so that clients need not know
  // the defaults.
  options.always_print_primitive_fields = true;
  std::string json;
  google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

nlohmann::json ErrorJson(const absl::Status& status) {
  return {{"code", ConnectCodeName(status.code())}, {"message", ClientMessage(status)}};
}

std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void WriteError(const absl::Status& status, httplib::Response& response) {
  response.status = HttpStatusOf(status.code());
  response.set_content(Dump(ErrorJson(status)), "application/json");
}

// The call's deadline from the Connect protocol's Connect-Timeout-Ms header (none without it).
absl::StatusOr<std::chrono::system_clock::time_point> DeadlineOf(const httplib::Request& request) {
  if (!request.has_header("Connect-Timeout-Ms")) {
    return std::chrono::system_clock::time_point::max();
  }
  const std::string value = request.get_header_value("Connect-Timeout-Ms");
  int64_t milliseconds = 0;
  // At most 10 digits, as the Connect protocol allows.
  if (value.size() > 10 || !absl::SimpleAtoi(value, &milliseconds) || milliseconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Connect-Timeout-Ms '", value, "': expected a positive number of milliseconds"));
  }
  return std::chrono::system_clock::now() + std::chrono::milliseconds(milliseconds);
}

// A Connect streaming envelope: flags, big-endian length, payload.
std::string Envelope(uint8_t flags, const std::string& payload) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  const uint32_t size = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((size >> (24 - 8 * i)) & 0xff);
  return out + payload;
}

// A request message as sent: a POST body, or the Connect protocol's GET form
// (?encoding=json&message=<JSON>, no message meaning an empty request) that lets a browser link or
// a plain `curl URL` call a method.
struct Body {
  std::string text;
  BodyFormat format = BodyFormat::kJson;
};

absl::StatusOr<Body> BodyOf(const httplib::Request& request) {
  if (request.method == "GET") {
    const std::string encoding =
        request.has_param("encoding") ? request.get_param_value("encoding") : "json";
    if (encoding != "json") {
      return absl::InvalidArgumentError(
          absl::StrCat("encoding '", encoding,
                       "': expected json for a GET (binary messages go in a POST body)"));
    }
    return Body{request.get_param_value("message"), BodyFormat::kJson};
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const BodyFormat format, FormatOf(request));
  return Body{request.body, format};
}

class Router {
 public:
  explicit Router(ServiceCore* core) : core_(core) {}

  void Handle(const httplib::Request& request, httplib::Response& response) const {
    const std::string method = request.path.substr(kServicePath.size());
    const absl::StatusOr<Body> body = BodyOf(request);
    if (!body.ok()) {
      WriteError(body.status(), response);
      response.status = 415;
      return;
    }
    if (method == "ListModels") return Unary(&ServiceCore::ListModels, *body, request, response);
    if (method == "GetModelInfo") {
      return Unary(&ServiceCore::GetModelInfo, *body, request, response);
    }
    if (method == "Tokenize") return Unary(&ServiceCore::Tokenize, *body, request, response);
    if (method == "GetAttention") {
      return Unary(&ServiceCore::GetAttention, *body, request, response);
    }
    if (method == "Encode") return Unary(&ServiceCore::Encode, *body, request, response);
    if (method == "CrossAttention") {
      return Unary(&ServiceCore::CrossAttention, *body, request, response);
    }
    if (method == "ListParameters") {
      return Unary(&ServiceCore::ListParameters, *body, request, response);
    }
    if (method == "GetParameter") {
      return Unary(&ServiceCore::GetParameter, *body, request, response);
    }
    if (method == "GetTrainingRecord") {
      return Unary(&ServiceCore::GetTrainingRecord, *body, request, response);
    }
    if (method == "Attribute") return Unary(&ServiceCore::Attribute, *body, request, response);
    if ((method == "StreamAttention" || method == "Generate") && request.method == "GET") {
      WriteError(absl::InvalidArgumentError(absl::StrCat(
                     "HTTP GET: ", method, " streams its answer and takes a POST body")),
                 response);
      response.status = 405;
      response.set_header("Allow", "POST");
      return;
    }
    if (method == "StreamAttention") {
      return Stream(&ServiceCore::StreamAttention, *body, request, response);
    }
    if (method == "Generate") return Stream(&ServiceCore::Generate, *body, request, response);
    WriteError(absl::UnimplementedError(absl::StrCat(
                   "method '", method, "': not a method of attnscope.v1.AttentionService; ",
                   "expected one of ", absl::StrJoin(Metrics::RpcNames(), ", "))),
               response);
    response.status = 404;
  }

 private:
  template <typename Request, typename Response>
  using UnaryMethod = absl::Status (ServiceCore::*)(const Call&, const Request&, Response*);

  template <typename Request, typename Response>
  void Unary(UnaryMethod<Request, Response> method, const Body& body,
             const httplib::Request& http_request, httplib::Response& http_response) const {
    Request request;
    Response response;
    absl::Status status = ParseBody(body.text, body.format, &request);
    absl::StatusOr<std::chrono::system_clock::time_point> deadline = DeadlineOf(http_request);
    if (status.ok()) status = deadline.status();
    if (status.ok())
      status = (core_->*method)(
          MakeCall("http", *deadline, {}, http_request.get_header_value("Authorization")), request,
          &response);
    if (!status.ok()) return WriteError(status, http_response);
    if (body.format == BodyFormat::kProto) {
      http_response.set_content(response.SerializeAsString(), "application/proto");
    } else {
      http_response.set_content(ToJson(response), "application/json");
    }
  }

  template <typename Request, typename Response>
  using StreamMethod = absl::Status (ServiceCore::*)(
      const Call&, const Request&, const std::function<absl::Status(const Response&)>&);

  template <typename Request, typename Response>
  void Stream(StreamMethod<Request, Response> method, const Body& body,
              const httplib::Request& http_request, httplib::Response& http_response) const {
    auto request = std::make_shared<Request>();
    absl::Status status = ParseBody(body.text, body.format, request.get());
    absl::StatusOr<std::chrono::system_clock::time_point> deadline = DeadlineOf(http_request);
    if (status.ok()) status = deadline.status();
    const std::string authorization = http_request.get_header_value("Authorization");
    if (status.ok()) status = core_->Authenticate(MakeCall("http", *deadline, {}, authorization));
    if (!status.ok()) return WriteError(status, http_response);
    const bool json = body.format == BodyFormat::kJson;
    // The provider runs after this handler returns, on the same connection's thread: the call
    // (admission, metrics, the forward pass) happens while the answer is written.
    http_response.set_chunked_content_provider(
        json ? "application/x-ndjson" : "application/connect+proto",
        [core = core_, method, request, json, deadline = *deadline, authorization](
            size_t, httplib::DataSink& sink) {
          auto write = [&sink](const std::string& chunk) {
            return sink.write(chunk.data(), chunk.size());
          };
          const Call call = MakeCall(
              "http", deadline, [&sink] { return !sink.is_writable(); }, authorization);
          const absl::Status status =
              (core->*method)(call, *request, [&](const Response& message) -> absl::Status {
                const bool written = json ? write(ToJson(message) + "\n")
                                          : write(Envelope(0, message.SerializeAsString()));
                if (!written) {
                  return absl::CancelledError(
                      "the client closed the stream before it was complete");
                }
                return absl::OkStatus();
              });
          const nlohmann::json end =
              status.ok() ? nlohmann::json::object() : nlohmann::json{{"error", ErrorJson(status)}};
          if (json) {
            if (!status.ok()) write(Dump(end) + "\n");
          } else {
            write(Envelope(0x02, Dump(end)));
          }
          sink.done();
          return true;
        });
  }

  ServiceCore* const core_;
};

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ConnectCodeName(absl::StatusCode code) {
  // Connect spells the codes in lower case, and "canceled" with one l.
  if (code == absl::StatusCode::kCancelled) return "canceled";
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

HttpServer::HttpServer(std::unique_ptr<httplib::Server> http, int port)
    : http_(std::move(http)), port_(port), thread_([this] { http_->listen_after_bind(); }) {}

HttpServer::~HttpServer() {
  http_->stop();
  thread_.join();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options,
                                                              ServiceCore* core) {
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const ListenAddress address,
      ParseListenAddress("--http_listen", options.listen, "127.0.0.1:8080 or 0.0.0.0:8080"));
  if (options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--http_threads ", options.threads, ": expected at least 1 connection served at once"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(ValidateTlsOptions(options.tls));
  std::unique_ptr<httplib::Server> http;
  if (options.tls.enabled()) {
    // httplib's SSLServer requires and verifies a client certificate when given a client CA.
    auto https = std::make_unique<httplib::SSLServer>(
        options.tls.cert_file.c_str(), options.tls.key_file.c_str(),
        options.tls.client_ca_file.empty() ? nullptr : options.tls.client_ca_file.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_cert_file '", options.tls.cert_file, "' and --tls_key_file '",
                       options.tls.key_file,
                       "': expected a PEM certificate and its private key (and a PEM CA in "
                       "--tls_client_ca_file), got files OpenSSL cannot use together"));
    }
    http = std::move(https);
  } else {
    http = std::make_unique<httplib::Server>();
  }
  http->set_socket_options(SetExclusiveListenerOptions);
  http->set_payload_max_length(static_cast<size_t>(options.max_request_bytes));
  const size_t threads = static_cast<size_t>(options.threads);
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  auto router = std::make_shared<Router>(core);
  http->Post(absl::StrCat(kServicePath, "[A-Za-z]+"),
             [router](const httplib::Request& request, httplib::Response& response) {
               router->Handle(request, response);
             });
  http->Get(absl::StrCat(kServicePath, "[A-Za-z]+"),
            [router](const httplib::Request& request, httplib::Response& response) {
              router->Handle(request, response);
            });
  if (options.dashboard_dir.empty() || !http->set_mount_point("/", options.dashboard_dir)) {
    const std::string missing =
        options.dashboard_dir.empty()
            ? std::string("attnscope-server runs without the dashboard (--dashboard_dir is empty)")
            : absl::StrCat("the dashboard is not built: --dashboard_dir '", options.dashboard_dir,
                           "' is not a directory (scripts/build.sh builds it)");
    http->Get("/", [missing](const httplib::Request&, httplib::Response& response) {
      response.status = 404;
      response.set_content(
          absl::StrCat(missing, "; the API is at POST ", kServicePath, "<Method>\n"),
          "text/plain; charset=utf-8");
    });
  }
  // Errors httplib answers itself (413 for a body over max_request_bytes, 404 for an unknown
  // path) get a JSON body saying what was wrong.
  const int64_t max_request_bytes = options.max_request_bytes;
  http->set_error_handler([max_request_bytes](const httplib::Request& request,
                                              httplib::Response& response) {
    if (!response.body.empty()) return;
    if (response.status == 413) {
      WriteError(absl::ResourceExhaustedError(absl::StrCat(
                     "request body: expected at most ", max_request_bytes,
                     " bytes (--max_request_bytes, the same limit as gRPC's); send shorter texts "
                     "or fewer inputs")),
                 response);
      response.status = 413;
    } else if (response.status == 404) {
      WriteError(absl::NotFoundError(absl::StrCat("path '", request.path,
                                                  "': not found; the API is at POST ", kServicePath,
                                                  "<Method>, the dashboard at /")),
                 response);
    }
  });
  const int bound = address.port == 0
                        ? http->bind_to_any_port(address.host)
                        : (http->bind_to_port(address.host, address.port) ? address.port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "--http_listen '", options.listen,
        "': cannot listen there (in use, or not a local address); choose another address or port"));
  }
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(http), bound));
}

}  // namespace attnscope::server
