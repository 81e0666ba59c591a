// The Connect protocol's side of the HTTP API (https://connectrpc.com/docs/protocol): the codec a
// request asks for, the envelopes of its streams, a stream's end, the GET form of a unary call and
// the Connect-Timeout-Ms header. The handlers that use them are in http_server.cc.
#ifndef ATTNSCOPE_SERVER_CONNECT_PROTOCOL_H_
#define ATTNSCOPE_SERVER_CONNECT_PROTOCOL_H_

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/http_messages.h"
#include "server/request_body.h"

namespace attnscope::server {

// How a call's message arrives and its answer leaves.
enum class Codec {
  kJson,          // application/json: one message; NDJSON for a stream's answer
  kProto,         // application/proto: one message; Connect envelopes for a stream's answer
  kConnectJson,   // application/connect+json: a stream, JSON messages in envelopes both ways
  kConnectProto,  // application/connect+proto: a stream, binary messages in envelopes both ways
};

// Whether the codec's messages travel in Connect envelopes (the streaming content types).
bool Enveloped(Codec codec);
// The body format of the codec's messages.
BodyFormat FormatOf(Codec codec);

// Whether `method` answers with a stream (StreamAttention, Generate).
bool StreamingMethod(absl::string_view method);

// The Connect GET form's own query parameters (encoding, message, base64, compression, connect)
// each given at most once, and connect, if given, v1. InvalidArgument (answered 400) naming the
// parameter otherwise; other parameters are let be (a cache-buster, say).
absl::Status CheckGetQuery(const HttpRequestHeader& request);

// The codec a request asks for, from its Content-Type (POST) or its encoding parameter (GET; a GET
// with neither encoding nor message is an empty JSON request). InvalidArgument (answered 415) for
// anything else, a GET's message without encoding included, saying what to send.
absl::StatusOr<Codec> CodecOf(const HttpRequestHeader& request, absl::string_view method);

// A Connect streaming envelope: flags, big-endian length, payload.
std::string Envelope(uint8_t flags, absl::string_view payload);

// The Connect protocol's end of a stream: {} or {"error": {...}}.
std::string EndOfStream(const absl::Status& status);

// A Connect stream that fails before it starts: as the protocol requires, a 200 whose only
// envelope is the end of the stream.
HttpResponse FailedConnectStream(const absl::Status& status, Codec codec);

// The one message of an enveloped request body. InvalidArgument: not exactly one envelope;
// Unimplemented: a compressed one.
absl::StatusOr<std::string> Unenvelope(const std::string& body);

// The request message as sent: a POST body (in its envelope for a Connect stream), or the Connect
// GET form's message parameter (base64 when base64=1; no query at all: an empty request).
// InvalidArgument: an envelope as Unenvelope, a base64 other than 0 or 1, an encoding without a
// message, a message that is not base64 with base64=1, a parameter given twice (QueryParam).
absl::StatusOr<std::string> MessageOf(const HttpRequest& request, Codec codec);

// The call's deadline from the Connect protocol's Connect-Timeout-Ms header (none without it).
// InvalidArgument for a value that is not a positive number of at most 10 digits (no sign, no
// spaces), or a header given more than once.
absl::StatusOr<std::chrono::system_clock::time_point> DeadlineOf(const HttpRequestHeader& request);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_CONNECT_PROTOCOL_H_
