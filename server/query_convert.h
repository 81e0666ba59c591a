// attnscope.v1 requests -> the request layer's queries (models/requests/requests.h), for both front
// ends. Enum values are checked here, since only the wire can carry an out-of-range one; every
// other check is the request layer's. Kept apart from the answers' mapping (proto_convert.h)
// because it needs no tensor code, so that the request fuzzer (fuzz/) links it alone.
#ifndef ATTNSCOPE_SERVER_QUERY_CONVERT_H_
#define ATTNSCOPE_SERVER_QUERY_CONVERT_H_

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
// Also for methods, occlusion_token and baseline.
absl::StatusOr<AttributeQuery> ToQuery(const v1::AttributeRequest& request);
absl::StatusOr<GenerateQuery> ToQuery(const v1::GenerateRequest& request);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_QUERY_CONVERT_H_
