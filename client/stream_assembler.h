// StreamAssembler: the messages of one StreamAttention call put back together into the
// AttentionResult that GetAttention would have answered, so that callers see one shape whichever
// RPC carried it. Client::StreamAttention feeds it; it knows nothing of gRPC.
#ifndef ATTNSCOPE_CLIENT_STREAM_ASSEMBLER_H_
#define ATTNSCOPE_CLIENT_STREAM_ASSEMBLER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnscope/v1/attnscope.pb.h"
#include "client/client.h"
#include "client/tensor.h"

namespace attnscope {

// Reassembles one stream in the order the server sends it: the header (tokens, resolved layers and
// heads, and the full shape of each attention block), then the layers of each block, then the
// rollout rows. The header fixes the shapes, so every piece is decoded straight into buffers
// allocated once from it, without an intermediate copy of a layer.
//
// A layer arrives as one or more pieces of its [head, query_token, key_token] slice: whole heads,
// or rows of one head, each the next contiguous run of the slice. Blocks come in v1::AttentionBlock
// order (self-attention; with decoder_text the decoder's self-attention, then cross-attention),
// each complete before the next, with their layers in the header's order.
//
// Every error is INTERNAL with a message starting "StreamAttention: the server's stream": the
// server broke this contract (a piece out of order or of the wrong shape or dtype, a layer or block
// the header does not announce, two headers, an empty message, a stream cut short). One instance
// assembles one stream; it is not thread-safe.
class StreamAssembler {
 public:
  // Takes the next message of the stream. The header's token lists are moved out of `message`
  // rather than copied. INTERNAL as above; after an error the assembler is not to be used again.
  absl::Status Add(v1::StreamAttentionResponse& message);

  // The whole answer, once the stream has ended, as GetAttention returns it: attentions [layer,
  // head, query_token, key_token] (key_token becomes k with top_k), scores of the same shape and
  // top_k_indices (INT32 key positions) when the request asked for them, rollout [query_token,
  // key_token], and with decoder_text the decoder's blocks; values decoded as DecodeTensor does
  // (float16 and bfloat16 widened to float). INTERNAL when the stream ended without a header,
  // before the last layer of a block or before the last rollout row. Call it once: the result is
  // moved out.
  absl::StatusOr<AttentionResult> Finish();

 private:
  // One stacked tensor the layer messages fill, with its top-k indices and scores.
  struct Block {
    const char* name = "";
    // Null for a block the header does not announce.
    const std::vector<int32_t>* layers = nullptr;
    DecodedTensor* attentions = nullptr;
    std::optional<DecodedTensor>* scores = nullptr;
    std::optional<DecodedTensor>* top_k_indices = nullptr;
    size_t next_layer = 0;
    // Elements of the current layer's slice received so far.
    int64_t layer_filled = 0;
    int64_t slice_elements = 0;
  };

  // Sets `block` up from its announced shape: [layers, heads, queries, keys].
  static absl::Status StartBlock(const google::protobuf::RepeatedField<int64_t>& shape,
                                 const google::protobuf::RepeatedPtrField<std::string>& dim_names,
                                 v1::DType dtype, Block& block);

  // Checks that `tensor` is the piece of the block's current layer at (head_offset,
  // query_offset), the next contiguous run of the layer's slice, and decodes it into `target`
  // there, allocating the target on the first piece.
  static absl::Status AddPiece(const Block& block, const v1::Tensor& tensor, const char* name,
                               int64_t head_offset, int64_t query_offset, DecodedTensor& target);

  absl::Status AddHeader(v1::StreamAttentionHeader& header);
  absl::Status AddLayer(const v1::StreamAttentionLayer& layer);
  // Rollout pieces are runs of rows of [query_token, key_token]; the rows are the attentions'.
  absl::Status AddRollout(const v1::StreamAttentionRollout& piece);

  AttentionResult result_;
  bool have_header_ = false;
  // Indexed by v1::AttentionBlock.
  std::array<Block, 3> blocks_;
  size_t rollout_rows_ = 0;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_CLIENT_STREAM_ASSEMBLER_H_
