// The one mapping between attnscope.v1 messages and the request layer's queries and answers
// (models/requests/requests.h). Requests become queries (enum values checked here, since only the
// wire can carry an out-of-range one); answers become responses, their tensors through the tensor
// codec. Both front ends (gRPC and HTTP/JSON) use it.
#ifndef ATTNSCOPE_SERVER_PROTO_CONVERT_H_
#define ATTNSCOPE_SERVER_PROTO_CONVERT_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnscope/v1/attnscope.pb.h"
#include "models/requests/requests.h"

namespace attnscope::server {

// InvalidArgument naming the field for an enum value outside the contract (dtype, truncation,
// head_aggregation, pooling) or DTYPE_INT32 where a float dtype is expected.
absl::StatusOr<TokenizeQuery> ToQuery(const v1::TokenizeRequest& request);
absl::StatusOr<AttentionQuery> ToQuery(const v1::GetAttentionRequest& request);
absl::StatusOr<EncodeQuery> ToQuery(const v1::EncodeRequest& request);
absl::StatusOr<CrossAttentionQuery> ToQuery(const v1::CrossAttentionRequest& request);
absl::StatusOr<ParameterQuery> ToQuery(const v1::GetParameterRequest& request);

void ToProto(const LoadedModel& model, v1::ModelInfo* info);
void ToProto(const EncodedText& tokens, v1::Tokens* out);
// Internal only for a tensor the codec cannot encode (a bug).
absl::Status ToProto(const AttentionAnswer& answer, v1::GetAttentionResponse* response);
absl::Status ToProto(const EncodeAnswer& answer, v1::EncodeResponse* response);
absl::Status ToProto(const CrossAttentionAnswer& answer, v1::CrossAttentionResponse* response);
void ToProto(const ParameterListAnswer& answer, v1::ListParametersResponse* response);
absl::Status ToProto(const ParameterAnswer& answer, v1::GetParameterResponse* response);
void ToProto(const TrainingRecordAnswer& answer, v1::TrainingRecord* record);

// Writes `answer` as StreamAttention messages: the header, one message per selected layer, then the
// rollout when there is one. Stops at the first non-OK status `write` returns (the client went
// away) and returns it.
absl::Status WriteStream(
    const AttentionAnswer& answer,
    const std::function<absl::Status(const v1::StreamAttentionResponse&)>& write);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_PROTO_CONVERT_H_
