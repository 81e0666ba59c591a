// The HTTP/JSON front end's reading of a request body into an attnscope.v1 request message: binary
// protobuf, or protobuf's canonical JSON mapping (http_server.h describes the protocol). Apart from
// the server so that the body fuzzer (fuzz/) reaches it without a socket.
#ifndef ATTNSCOPE_SERVER_REQUEST_BODY_H_
#define ATTNSCOPE_SERVER_REQUEST_BODY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace attnscope::server {

enum class BodyFormat { kJson, kProto };

// Parses `body` into `message`. JSON: an object in the canonical mapping (either field spelling);
// an empty body is an empty request. InvalidArgument naming `source` (where the body came from:
// "request body", "query parameter 'message'") and the message type: not a serialized
// message (a text that is not UTF-8 included), JSON nested deeper than kMaxJsonDepth (found
// before parsing, common/json_util.h), not JSON (in UTF-8), a key given twice in one object, not
// an object, or fields the mapping refuses.
absl::Status ParseBody(const std::string& body, BodyFormat format, absl::string_view source,
                       google::protobuf::Message* message);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_REQUEST_BODY_H_
