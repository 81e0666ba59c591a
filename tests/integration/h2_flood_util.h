// What the tests of the gRPC port's bounds share: stubs of a started server, a short GetAttention
// call, and h2_stream_flood.py (raw HTTP/2 clients that flood, hold or churn the port) run against
// it.
#ifndef ATTNSCOPE_TESTS_INTEGRATION_H2_FLOOD_UTIL_H_
#define ATTNSCOPE_TESTS_INTEGRATION_H2_FLOOD_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/v1/attnscope.grpc.pb.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {

// The gRPC port of `server`, as the raw HTTP/2 clients (h2_stream_flood.py) take it.
std::string GrpcPortOf(const ServerProcess& server);
// A stub of `server`'s AttentionService on a channel of its own.
std::unique_ptr<v1::AttentionService::Stub> StubOf(const ServerProcess& server);
// A GetAttention call of a short English sentence on `stub`, with a deadline `seconds` away.
grpc::Status CallGetAttention(v1::AttentionService::Stub& stub, int seconds);
// What h2_stream_flood.py reports on its one line of output (bytes_sent, streams_sent,
// closed_by_server, seconds), run against the gRPC port `port` with `flags`; a discarded value
// when it printed none.
nlohmann::json RunH2Flood(const std::string& port, const std::vector<std::string>& flags);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_INTEGRATION_H2_FLOOD_UTIL_H_
