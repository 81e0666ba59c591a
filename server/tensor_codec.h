// The tensor codec: the only place where LibTorch tensors meet attnscope.v1.Tensor messages.
//
// Wire format (attnscope.proto): `data` holds prod(shape) elements of `dtype`, little-endian,
// row-major. Encoding converts (float32 -> float16 / bfloat16 with LibTorch's
// round-to-nearest-even) straight into the message's bytes buffer, so attention data is copied
// exactly once between the engine's tensor and the wire, whatever the strides of the (view) tensor
// handed in.
#ifndef ATTNSCOPE_SERVER_TENSOR_CODEC_H_
#define ATTNSCOPE_SERVER_TENSOR_CODEC_H_

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnscope/v1/attnscope.pb.h"

namespace attnscope::server {

// The LibTorch element type of a wire dtype; DTYPE_UNSPECIFIED means float32.
// InvalidArgument for a value outside the enum.
absl::StatusOr<torch::ScalarType> ScalarTypeOf(v1::DType dtype);

// The resolved wire dtype: DTYPE_UNSPECIFIED becomes DTYPE_FLOAT32.
v1::DType ResolveDType(v1::DType dtype);

// Bytes per element of a (resolved) wire dtype: 4 for float32 / int32, 2 for float16 / bfloat16.
int64_t BytesPerElement(v1::DType dtype);

// Size in bytes of the `data` field for a tensor of `shape` in `dtype`.
int64_t EncodedBytes(absl::Span<const int64_t> shape, v1::DType dtype);

// Writes `tensor` (any shape and strides, CPU, any real dtype) into `out` as `dtype`: shape,
// dim_names (one per dimension), dtype and data. InvalidArgument: dim_names of the wrong length or
// an unknown dtype. Internal: a LibTorch error (a bug).
absl::Status SerializeTensor(const torch::Tensor& tensor, const std::vector<std::string>& dim_names,
                             v1::DType dtype, v1::Tensor* out);

// Writes `parts` (all of one shape [d1, ..., dn]) as one tensor [parts.size(), d1, ..., dn], as
// torch::stack(parts) would be, without building the stacked tensor first. Used for
// [layer, head, query_token, key_token] from one tensor per layer. Errors as SerializeTensor, and
// InvalidArgument when `parts` is empty or the shapes differ.
absl::Status SerializeStacked(absl::Span<const torch::Tensor> parts,
                              const std::vector<std::string>& dim_names, v1::DType dtype,
                              v1::Tensor* out);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_TENSOR_CODEC_H_
