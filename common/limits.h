// Limits shared by the server and the client library. Abseil-free constants only: client/ links
// this folder, and it must never need LibTorch or models/.
#ifndef ATTNSCOPE_COMMON_LIMITS_H_
#define ATTNSCOPE_COMMON_LIMITS_H_

#include <cstdint>

namespace attnscope {

// Default cap on one unary response, in bytes (attnscope-server --max_response_bytes). Clients need
// a receive limit of at least this much; the client library's default is the same value.
inline constexpr int64_t kDefaultMaxResponseBytes = int64_t{64} << 20;

// Default cap on the inputs of one Encode and the documents of one CrossAttention
// (attnscope-server --max_inputs_per_request). text-embeddings-inference's client batch limit is
// 32; a call over the cap is split by the caller.
inline constexpr int kDefaultMaxInputsPerRequest = 64;

}  // namespace attnscope

#endif  // ATTNSCOPE_COMMON_LIMITS_H_
