// Tensors as the client library hands them out: attnscope.v1.Tensor messages decoded from their
// little-endian bytes into plain vectors, with float16 and bfloat16 widened to float exactly.
#ifndef ATTNSCOPE_CLIENT_TENSOR_H_
#define ATTNSCOPE_CLIENT_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnscope/v1/attnscope.pb.h"

namespace attnscope {

// A decoded dense tensor, row-major (the last dimension varies fastest).
struct DecodedTensor {
  // Dimension sizes; empty for a scalar.
  std::vector<int64_t> shape;
  // One name per dimension as the server sent them, e.g. {"layer", "head", "query_token",
  // "key_token"}.
  std::vector<std::string> dim_names;
  // The element type on the wire (FLOAT32, FLOAT16, BFLOAT16 or INT32).
  v1::DType wire_dtype = v1::DTYPE_FLOAT32;
  // The elements of a floating-point tensor, widened to float; empty for INT32 tensors.
  std::vector<float> values;
  // The elements of an INT32 tensor (top-k indices); empty for floating-point tensors.
  std::vector<int32_t> int_values;

  // prod(shape): 1 for a scalar.
  int64_t num_elements() const;
  // True when the elements are in int_values rather than values.
  bool is_int() const { return wire_dtype == v1::DTYPE_INT32; }
  // Row-major offset of `index` (one entry per dimension, each in range; not checked).
  int64_t FlatIndex(absl::Span<const int64_t> index) const;
  // values[FlatIndex(index)].
  float At(absl::Span<const int64_t> index) const { return values[FlatIndex(index)]; }
};

// IEEE 754 binary16 bits to float. Exact for every input: subnormals, infinities and NaN (the NaN's
// sign and payload bits are kept) included.
float HalfToFloat(uint16_t bits);

// bfloat16 bits (the upper 16 bits of a binary32) to float. Exact for every input.
float BFloat16ToFloat(uint16_t bits);

// Size in bytes of one element of `dtype`; 0 for DTYPE_UNSPECIFIED or an unknown value.
int DTypeSize(v1::DType dtype);

// The lower-case name of `dtype` without the prefix: "float32", "float16", "bfloat16", "int32".
std::string DTypeName(v1::DType dtype);

// Decodes `tensor`. Internal: an unknown or unspecified dtype, a negative dimension, a dim_names
// list that is neither empty nor one name per dimension, or a data field whose size is not
// prod(shape) * DTypeSize(dtype) (a server bug: the message names the sizes).
absl::StatusOr<DecodedTensor> DecodeTensor(const v1::Tensor& tensor);

// Decodes the elements of `tensor` (already known to hold `count` elements of a floating-point
// dtype) into out[0..count) or, for INT32, into int_out[0..count). Used to reassemble streamed
// layers into one buffer without an intermediate copy. Internal on a size or dtype mismatch, as
// DecodeTensor.
absl::Status DecodeTensorDataInto(const v1::Tensor& tensor, int64_t count, float* out,
                                  int32_t* int_out);

}  // namespace attnscope

#endif  // ATTNSCOPE_CLIENT_TENSOR_H_
