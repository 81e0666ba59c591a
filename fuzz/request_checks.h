// The request layer's view of a decoded request: each attnscope.v1 request that ToQuery accepts
// must reach the query unchanged (texts byte for byte, model, indices, numbers), and ToQuery must
// refuse exactly the enum values outside the contract.
#ifndef ATTNSCOPE_FUZZ_REQUEST_CHECKS_H_
#define ATTNSCOPE_FUZZ_REQUEST_CHECKS_H_

#include "attnscope/v1/attnscope.pb.h"

namespace attnscope::fuzz {

void CheckToQuery(const v1::TokenizeRequest& request);
void CheckToQuery(const v1::GetAttentionRequest& request);
void CheckToQuery(const v1::EncodeRequest& request);
void CheckToQuery(const v1::CrossAttentionRequest& request);
void CheckToQuery(const v1::GetParameterRequest& request);
void CheckToQuery(const v1::AttributeRequest& request);
void CheckToQuery(const v1::GenerateRequest& request);

}  // namespace attnscope::fuzz

#endif  // ATTNSCOPE_FUZZ_REQUEST_CHECKS_H_
