#include "server/tensor_codec.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// The wire format is little-endian and tensors are written with their in-memory byte order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the tensor codec writes native byte order and needs a little-endian host");

namespace attnscope::server {

absl::StatusOr<torch::ScalarType> ScalarTypeOf(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::DTYPE_FLOAT32:
      return torch::kFloat32;
    case v1::DTYPE_FLOAT16:
      return torch::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return torch::kBFloat16;
    case v1::DTYPE_INT32:
      return torch::kInt32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype: expected DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16, got ",
                       static_cast<int>(dtype)));
  }
}

v1::DType ResolveDType(v1::DType dtype) {
  return dtype == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FLOAT32 : dtype;
}

int64_t BytesPerElement(v1::DType dtype) {
  return dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16 ? 2 : 4;
}

int64_t EncodedBytes(absl::Span<const int64_t> shape, v1::DType dtype) {
  int64_t elements = 1;
  for (const int64_t dim : shape) elements *= dim;
  return elements * BytesPerElement(ResolveDType(dtype));
}

absl::Status SerializeTensor(const torch::Tensor& tensor, const std::vector<std::string>& dim_names,
                             v1::DType dtype, v1::Tensor* out) {
  // A one-part stack minus its leading dimension is the tensor itself.
  std::vector<std::string> names = {"part"};
  names.insert(names.end(), dim_names.begin(), dim_names.end());
  if (absl::Status status = SerializeStacked({tensor}, names, dtype, out); !status.ok()) {
    return status;
  }
  out->mutable_shape()->erase(out->mutable_shape()->begin());
  out->mutable_dim_names()->erase(out->mutable_dim_names()->begin());
  return absl::OkStatus();
}

absl::Status SerializeStacked(absl::Span<const torch::Tensor> parts,
                              const std::vector<std::string>& dim_names, v1::DType dtype,
                              v1::Tensor* out) {
  if (parts.empty()) return absl::InvalidArgumentError("tensor codec: no tensors to encode");
  const torch::IntArrayRef part_shape = parts[0].sizes();
  if (dim_names.size() != part_shape.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("tensor codec: expected ", part_shape.size() + 1,
                                                   " dim names, got [",
                                                   absl::StrJoin(dim_names, ", "), "]"));
  }
  for (const torch::Tensor& part : parts) {
    if (part.sizes() != part_shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor codec: expected parts of one shape [",
                                                     absl::StrJoin(part_shape, ", "), "], got [",
                                                     absl::StrJoin(part.sizes(), ", "), "]"));
    }
  }
  const absl::StatusOr<torch::ScalarType> scalar_type = ScalarTypeOf(dtype);
  if (!scalar_type.ok()) return scalar_type.status();

  out->Clear();
  out->set_dtype(ResolveDType(dtype));
  out->add_shape(static_cast<int64_t>(parts.size()));
  for (const int64_t dim : part_shape) out->add_shape(dim);
  for (const std::string& name : dim_names) out->add_dim_names(name);

  const int64_t part_bytes = EncodedBytes(part_shape.vec(), dtype);
  std::string* data = out->mutable_data();
  data->resize(static_cast<size_t>(part_bytes) * parts.size());
  try {
    for (size_t i = 0; i < parts.size(); ++i) {
      // A tensor over the message's own buffer: copy_ converts and gathers strided views in one
      // pass, with LibTorch's own float16/bfloat16 rounding.
      torch::from_blob(data->data() + i * part_bytes, part_shape,
                       torch::TensorOptions().dtype(*scalar_type))
          .copy_(parts[i]);
    }
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("tensor codec: ", error.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace attnscope::server
