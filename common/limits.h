// Limits shared by the server and the client library. Abseil-free constants only: client/ links
// this folder, and it must never need LibTorch or models/.
#ifndef ATTNSCOPE_COMMON_LIMITS_H_
#define ATTNSCOPE_COMMON_LIMITS_H_

#include <cstdint>

namespace attnscope {

// Default cap on one unary response, in bytes (attnscope-server --max_response_bytes). Clients need
// a receive limit of at least this much; the client library's default is the same value.
inline constexpr int64_t kDefaultMaxResponseBytes = int64_t{64} << 20;

// Default cap on one request, in bytes, on both transports of attnscope-server
// (--max_request_bytes): gRPC's default receive limit.
inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{4} << 20;

// Default cap on the inputs of one Encode and the documents of one CrossAttention
// (attnscope-server --max_inputs_per_request). text-embeddings-inference's client batch limit is
// 32; a call over the cap is split by the caller.
inline constexpr int kDefaultMaxInputsPerRequest = 64;

// Default bound on the work of one call, in token passes: the tokens of every pass it would run,
// summed (attnscope-server --max_call_tokens). One GetAttention is one pass over its tokens; a
// CrossAttention one per document; an Attribute one per occluded token and one per
// integrated-gradients step over the whole input; a Generate one per beam over the prompt and the
// new tokens. Two Attribute calls of a 512-token pair with every method at the default steps fit
// (2 x 288 768); 1000 integrated-gradients steps over 512 tokens do not.
inline constexpr int64_t kDefaultMaxCallTokens = int64_t{1} << 20;

// Default ceiling on a call's time when its caller sets no deadline, or a later one, in seconds
// (attnscope-server --max_call_seconds): what the work bound above allows, on a slow machine.
inline constexpr double kDefaultMaxCallSeconds = 300.0;

// Default bound on the bytes of attention that the answers of GetAttention and StreamAttention
// hold at once, from before their forward pass until they are written out (attnscope-server
// --max_answer_bytes_in_flight): eight of the largest unary answers in float32, and about twelve
// unread streams of 421 tokens on a 5-layer Llama.
inline constexpr int64_t kDefaultMaxAnswerBytesInFlight = int64_t{512} << 20;

}  // namespace attnscope

#endif  // ATTNSCOPE_COMMON_LIMITS_H_
