// NumPy .npy files (format version 1.0) for decoded tensors, so that attention can be loaded with
// numpy.load without any attnscope code.
#ifndef ATTNSCOPE_CLIENT_NPY_H_
#define ATTNSCOPE_CLIENT_NPY_H_

#include <string>

#include "absl/status/status.h"
#include "client/tensor.h"

namespace attnscope {

// The complete .npy encoding of `tensor`: the magic "\x93NUMPY", version 1.0, a header dict
// {'descr': '<f4' (float tensors, whatever their wire dtype, since values are widened to float) or
// '<i4' (INT32), 'fortran_order': False, 'shape': (...)} padded with spaces to a multiple of 64
// bytes, then the elements little-endian, row-major.
std::string EncodeNpy(const DecodedTensor& tensor);

// Writes EncodeNpy(tensor) to `path`, replacing an existing file. Internal: the file cannot be
// written (the message names the path and the system error).
absl::Status WriteNpy(const DecodedTensor& tensor, const std::string& path);

}  // namespace attnscope

#endif  // ATTNSCOPE_CLIENT_NPY_H_
