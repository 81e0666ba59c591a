"""attnscope: the Python client of the attnscope service (proto/attnscope/v1/attnscope.proto).

    import attnscope
    client = attnscope.Client("127.0.0.1:50051")
    result = client.get_attention("Tôi yêu Việt Nam quá", model="default", layers=[-1])
    print(result.attentions.dims, result.attentions.shape)   # [layer, head, query_token, key_token]

Tensors are attnscope.Tensor, numpy arrays with `dims` (their dimension names); the messages and
enums of the contract are attnscope.pb.
"""
from attnscope.client import (DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, Client, GenerateStream,
                              service_config_json, tls_credentials)
from attnscope.errors import (CancelledError, DeadlineExceededError, Error,
                              FailedPreconditionError, InternalError, InvalidArgumentError,
                              NotFoundError, PermissionDeniedError, ResourceExhaustedError,
                              UnauthenticatedError, UnavailableError, UnimplementedError)
from attnscope.results import (AttentionResult, CrossAttentionResult, DecoderAttention,
                               DocumentAttentionResult, EncodeResponse, EncodeResult,
                               GeneratedTokenResult, GenerateResult, ParameterResult)
from attnscope.stream import StreamAssembler
from attnscope.tensor import Tensor, decode_tensor
from attnscope.v1 import attnscope_pb2 as pb

__all__ = [
    "AttentionResult", "CancelledError", "Client", "CrossAttentionResult",
    "DEFAULT_MAX_RESPONSE_BYTES", "DEFAULT_TIMEOUT", "DecoderAttention",
    "DeadlineExceededError", "DocumentAttentionResult", "EncodeResponse", "EncodeResult", "Error",
    "FailedPreconditionError", "GenerateResult", "GenerateStream", "GeneratedTokenResult",
    "InternalError", "InvalidArgumentError", "NotFoundError", "ParameterResult",
    "PermissionDeniedError", "ResourceExhaustedError", "StreamAssembler", "Tensor",
    "UnauthenticatedError", "UnavailableError", "UnimplementedError", "decode_tensor", "pb",
    "service_config_json", "tls_credentials",
]
