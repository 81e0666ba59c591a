"""attnscope.v1.Tensor messages decoded into numpy arrays that carry their dimension names.

As client/tensor.cc decodes them: little-endian bytes, row-major; float16 and bfloat16 are widened
to float32 exactly (every value of both is a float32), int32 stays int32.
"""
import math

import numpy as np

from attnscope.errors import InternalError
from attnscope.v1 import attnscope_pb2 as pb

# The wire's element types: (name, numpy dtype of the bytes). bfloat16 is the upper half of a
# float32, which numpy has no type for: its bits are read as uint16 and shifted into place.
_WIRE = {
    pb.DTYPE_FLOAT32: ("float32", np.dtype("<f4")),
    pb.DTYPE_FLOAT16: ("float16", np.dtype("<f2")),
    pb.DTYPE_BFLOAT16: ("bfloat16", np.dtype("<u2")),
    pb.DTYPE_INT32: ("int32", np.dtype("<i4")),
}


class Tensor(np.ndarray):
    """A decoded tensor: a numpy array (float32, or int32 for top-k indices) with

    - dims: one name per dimension as the server sent them, e.g. ("layer", "head",
      "query_token", "key_token"), or () when the server sent none;
    - wire_dtype: the element type on the wire, "float32", "float16", "bfloat16" or "int32".

    Only the array the client decoded is labelled: numpy does not say which axes an array derived
    from it keeps (a slice, a transpose, a sum), so such arrays have dims and wire_dtype None.
    """

    def __array_finalize__(self, obj):
        self.dims = None
        self.wire_dtype = None


def dtype_name(dtype):
    """The lower-case name of a DType value: "float32", "float16", "bfloat16", "int32", or
    "unknown(N)"."""
    return _WIRE[dtype][0] if dtype in _WIRE else f"unknown({dtype})"


def _labelled(values, shape, dims, wire_dtype):
    tensor = values.reshape(shape).view(Tensor)
    tensor.dims = tuple(dims)
    tensor.wire_dtype = wire_dtype
    return tensor


def decode_values(message, count):
    """The `count` elements of the Tensor message `message` as a flat float32 (int32 for INT32)
    array that owns its memory. InternalError for an unknown or unspecified dtype, or a data field
    whose size is not count elements."""
    if message.dtype not in _WIRE:
        raise InternalError(f"server sent a tensor with dtype {dtype_name(message.dtype)}; "
                            "expected float32, float16, bfloat16 or int32")
    name, wire = _WIRE[message.dtype]
    if len(message.data) != count * wire.itemsize:
        shape = ", ".join(str(size) for size in message.shape)
        raise InternalError(f"server sent a {name} tensor of shape [{shape}] with "
                            f"{len(message.data)} data bytes; expected {count * wire.itemsize}")
    raw = np.frombuffer(message.data, dtype=wire, count=count)
    if message.dtype == pb.DTYPE_BFLOAT16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if message.dtype == pb.DTYPE_INT32:
        return raw.astype(np.int32)
    return raw.astype(np.float32)


def decode_tensor(message):
    """The Tensor message `message` as a Tensor of its shape, dims and wire dtype.

    InternalError (a server bug; the message names the sizes): an unknown or unspecified dtype, a
    negative dimension, dim_names neither empty nor one per dimension, or data whose size is not
    prod(shape) elements of the dtype.
    """
    shape = tuple(message.shape)
    if message.dim_names and len(message.dim_names) != len(shape):
        raise InternalError(f"server sent a tensor with {len(shape)} dimensions but "
                            f"{len(message.dim_names)} dimension names")
    if any(size < 0 for size in shape):
        raise InternalError(f"server sent a tensor of shape [{', '.join(map(str, shape))}] with "
                            f"{len(message.data)} data bytes")
    count = math.prod(shape)
    values = decode_values(message, count)
    return _labelled(values, shape, message.dim_names, dtype_name(message.dtype))


def empty_tensor(shape, dims, dtype, integer=False):
    """A zero Tensor to fill in place (streamed layers), labelled like a decoded one."""
    values = np.zeros(math.prod(shape), np.int32 if integer else np.float32)
    return _labelled(values, shape, dims, dtype_name(dtype))
