"""The exceptions of the attnscope client: one class per gRPC status code, all under Error.

A call that fails raises the class of the server's code with the server's message, as the C++
client (client/client.h) returns an absl::Status with the same code and message. The codes are the
ones documented in proto/attnscope/v1/attnscope.proto; INTERNAL also reports a malformed response
(a tensor whose byte size does not match its shape, a stream out of order).
"""
import grpc

# Room above max_response_bytes for the non-tensor part of a response (tokens, offsets): the
# channel's receive limit is max_response_bytes plus this, as in client/client.cc.
ENVELOPE_BYTES = 1 << 20


class Error(Exception):
    """A failed call: `code` is the gRPC status code's name ("NOT_FOUND"), `message` the server's
    text (or the client's, for an error found on this side)."""

    code = "UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    @property
    def status_code(self):
        """The grpc.StatusCode of `code`."""
        return grpc.StatusCode[self.code]

    def __str__(self):
        return f"{self.code}: {self.message}"


class CancelledError(Error):
    code = "CANCELLED"


class InvalidArgumentError(Error, ValueError):
    """Bad input: the message names the field and the fix. Also raised by Client() for bad
    options."""
    code = "INVALID_ARGUMENT"


class DeadlineExceededError(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class NotFoundError(Error, LookupError):
    """An unknown model or parameter, a missing training record, or an unreadable PEM file."""
    code = "NOT_FOUND"


class PermissionDeniedError(Error):
    code = "PERMISSION_DENIED"


class ResourceExhaustedError(Error):
    """An answer over the server's or this client's size cap, or a server at its limits."""
    code = "RESOURCE_EXHAUSTED"


class FailedPreconditionError(Error):
    code = "FAILED_PRECONDITION"


class UnimplementedError(Error):
    code = "UNIMPLEMENTED"


class InternalError(Error):
    """A server bug, or a malformed response."""
    code = "INTERNAL"


class UnavailableError(Error):
    """Loading, shutting down or unreachable, after the client's retries."""
    code = "UNAVAILABLE"


class UnauthenticatedError(Error):
    """No API key, or one the server does not accept."""
    code = "UNAUTHENTICATED"


_BY_CODE = {cls.code: cls for cls in (
    CancelledError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError, UnimplementedError,
    InternalError, UnavailableError, UnauthenticatedError)}


def error_for(code, message):
    """The Error subclass instance for the status code name `code` (Error itself for the codes
    without a class of their own: UNKNOWN, ALREADY_EXISTS, ABORTED, OUT_OF_RANGE, DATA_LOSS)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls else Error(message, code)


def from_rpc_error(error, receive_limit_bytes):
    """The Error for a grpc.RpcError, as client.cc's FromGrpcStatus converts a grpc::Status.

    gRPC's own RESOURCE_EXHAUSTED "Received message larger than max (SIZE vs. LIMIT)" also says
    how to fix it: when LIMIT is this client's receive limit the answer was too large, otherwise
    the server refused the request.
    """
    code = error.code().name
    message = error.details() or ""
    prefix = "Received message larger than max ("
    if code != "RESOURCE_EXHAUSTED" or not message.startswith(prefix):
        return error_for(code, message)
    numbers = message[len(prefix):].removesuffix(")").split(" vs. ")
    if len(numbers) != 2 or not all(n.isdigit() for n in numbers):
        return error_for(code, message)
    size, limit = (int(n) for n in numbers)
    if limit == receive_limit_bytes:
        return ResourceExhaustedError(
            f"{message}: the answer is larger than this client accepts (Client max_response_bytes "
            f"plus {ENVELOPE_BYTES} bytes); raise it to the server's --max_response_bytes, ask "
            "for less (layers, heads, window, top_k, float16) or use stream_attention")
    return ResourceExhaustedError(
        f"{message}: the request is {size} bytes, over the {limit} bytes the server accepts; send "
        "shorter texts, or fewer inputs or documents per call")
