// The one mapping from the request layer's answers (models/requests/requests.h) to attnscope.v1
// responses, their tensors through the tensor codec; requests become queries in query_convert.h.
// Both front ends (gRPC and HTTP/JSON) use it.
#ifndef ATTNSCOPE_SERVER_PROTO_CONVERT_H_
#define ATTNSCOPE_SERVER_PROTO_CONVERT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "attnscope/v1/attnscope.pb.h"
#include "models/requests/requests.h"

namespace attnscope::server {

void ToProto(const LoadedModel& model, v1::ModelInfo* info);
void ToProto(const EncodedText& tokens, v1::Tokens* out);
// Internal only for a tensor the codec cannot encode (a bug).
absl::Status ToProto(const AttentionAnswer& answer, v1::GetAttentionResponse* response);
absl::Status ToProto(const EncodeAnswer& answer, v1::EncodeResponse* response);
absl::Status ToProto(const CrossAttentionAnswer& answer, v1::CrossAttentionResponse* response);
void ToProto(const ParameterListAnswer& answer, v1::ListParametersResponse* response);
absl::Status ToProto(const ParameterAnswer& answer, v1::GetParameterResponse* response);
void ToProto(const TrainingRecordAnswer& answer, v1::TrainingRecord* record);
void ToProto(const AttributeAnswer& answer, v1::AttributeResponse* response);
void ToProto(const GenerateHeader& header, v1::GenerateHeader* out);
// `dtype` is the header's: the wire type of the token's attention.
absl::Status ToProto(const GenerateStep& step, OutputDType dtype, v1::GeneratedToken* out);
void ToProto(const GenerateSummary& summary, v1::GenerateDone* out);

// One message's share of a layer's [head, query_token, key] slice: heads [head_offset,
// head_offset + heads) and rows [query_offset, query_offset + rows). Always one contiguous run of
// the row-major slice: whole heads, or rows of one head.
struct StreamPiece {
  int64_t head_offset = 0;
  int64_t heads = 0;
  int64_t query_offset = 0;
  int64_t rows = 0;
};

// The pieces, in order, of a [heads, rows, ...] slice whose query rows take `row_bytes` each, so
// that each piece's data stays within `max_bytes`: the whole slice when it fits, else groups of
// whole heads, else runs of rows of one head (one row at least, even when a row alone is larger).
std::vector<StreamPiece> PlanStreamPieces(int64_t heads, int64_t rows, int64_t row_bytes,
                                          int64_t max_bytes);

// Writes `answer` as StreamAttention messages: the header, each selected layer in the pieces of
// PlanStreamPieces (data of at most `max_message_bytes` each), then the rollout, cut the same way.
// Stops at the first non-OK status `write` returns (the client went away) and returns it.
absl::Status WriteStream(
    const AttentionAnswer& answer, int64_t max_message_bytes,
    const std::function<absl::Status(const v1::StreamAttentionResponse&)>& write);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_PROTO_CONVERT_H_
