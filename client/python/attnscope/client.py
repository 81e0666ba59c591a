"""attnscope.Client: the Python client of the attnscope.v1 service.

Mirrors the C++ client (client/client.h): the same defaults (a 60 s deadline per call, a receive
limit of the server's default --max_response_bytes plus 1 MiB, four attempts on UNAVAILABLE with
exponential backoff from 0.1 s to 2 s, round-robin over every address a name resolves to), the same
`authorization: Bearer <key>` header, and the same errors (attnscope.Error subclasses carrying the
server's code and message).
"""
import json

import grpc

from attnscope import errors
from attnscope.errors import InternalError, InvalidArgumentError, NotFoundError
from attnscope.results import (AttentionResult, CrossAttentionResult, DecoderAttention,
                               DocumentAttentionResult, EncodeResponse, EncodeResult,
                               GeneratedTokenResult, GenerateResult, ParameterResult)
from attnscope.stream import StreamAssembler
from attnscope.tensor import decode_tensor
from attnscope.v1 import attnscope_pb2 as pb
from attnscope.v1 import attnscope_pb2_grpc as pb_grpc
from attnscope.v1 import health_pb2

#: The server's default --max_response_bytes (common/limits.h kDefaultMaxResponseBytes).
DEFAULT_MAX_RESPONSE_BYTES = 64 << 20
#: Seconds each call may take unless it sets its own timeout; a stream's whole duration.
DEFAULT_TIMEOUT = 60.0

# gRPC message sizes are ints.
_MAX_CHANNEL_MESSAGE_BYTES = 2**31 - 1
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def service_config_json(max_attempts=4, initial_backoff=0.1, max_backoff=2.0,
                        backoff_multiplier=2.0):
    """The gRPC service config (JSON text) a Client installs on its channel: round_robin load
    balancing and a retryPolicy on UNAVAILABLE for the attnscope and health services, as
    client.cc's ServiceConfigJson. Backoffs in seconds."""
    method = {"name": [{"service": "attnscope.v1.AttentionService"},
                       {"service": "grpc.health.v1.Health"}]}
    # gRPC rejects a retryPolicy with maxAttempts < 2; one attempt simply means no policy.
    if max_attempts >= 2:
        method["retryPolicy"] = {
            "maxAttempts": max_attempts,
            "initialBackoff": f"{initial_backoff:g}s",
            "maxBackoff": f"{max_backoff:g}s",
            "backoffMultiplier": backoff_multiplier,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
    return json.dumps({"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [method]},
                      separators=(",", ":"))


def tls_credentials(ca_file=None, cert_file=None, key_file=None):
    """grpc.ChannelCredentials for a TLS server, from PEM files, for Client(tls=...).

    ca_file verifies the server's certificate (None: the system's roots); cert_file and key_file
    (both or neither) are this client's certificate for a server that requires one
    (--tls_client_ca_file). Raises NotFoundError naming a file that cannot be read,
    InvalidArgumentError when only one of cert_file and key_file is given.
    """
    if bool(cert_file) != bool(key_file):
        raise InvalidArgumentError(
            f"cert_file {cert_file!r} and key_file {key_file!r}: expected both (a client "
            "certificate) or neither, got one")

    def read(what, path):
        if not path:
            return None
        try:
            with open(path, "rb") as file:
                return file.read()
        except OSError as error:
            raise NotFoundError(f"{what} {path!r}: expected a readable PEM file, got "
                                f"{error.strerror}") from None

    return grpc.ssl_channel_credentials(root_certificates=read("ca_file", ca_file),
                                        private_key=read("key_file", key_file),
                                        certificate_chain=read("cert_file", cert_file))


def _enum_value(enum_type, value):
    """An enum field's number from its number, its full name ("DTYPE_FLOAT16") or its name without
    the enum's prefix, any case ("float16")."""
    if isinstance(value, int):
        return value
    prefix = enum_type.values_by_number[0].name[:-len("UNSPECIFIED")]
    name = str(value).upper()
    for candidate in (name, prefix + name):
        if candidate in enum_type.values_by_name:
            return enum_type.values_by_name[candidate].number
    choices = ", ".join(v.name[len(prefix):].lower() for v in enum_type.values)
    raise InvalidArgumentError(f"{enum_type.name} {value!r}: expected one of {choices}")


def _fill(message, fields):
    """Sets the fields of `message` from keyword arguments: scalars, lists for repeated fields,
    enum names, and dicts or messages for message fields. None leaves a field unset. TypeError
    for a name the message does not have."""
    for name, value in fields.items():
        if value is None:
            continue
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            known = ", ".join(message.DESCRIPTOR.fields_by_name)
            raise TypeError(f"{message.DESCRIPTOR.name} has no field {name!r}; its fields: "
                            f"{known}")
        if field.label == field.LABEL_REPEATED:
            target = getattr(message, name)
            del target[:]
            for item in value:
                if field.message_type is None:
                    target.append(_enum_value(field.enum_type, item) if field.enum_type else item)
                elif isinstance(item, dict):
                    _fill(target.add(), item)
                else:
                    target.add().CopyFrom(item)
        elif field.message_type is not None:
            target = getattr(message, name)
            if isinstance(value, dict):
                target.SetInParent()
                _fill(target, value)
            else:
                target.CopyFrom(value)
        elif field.enum_type is not None:
            setattr(message, name, _enum_value(field.enum_type, value))
        else:
            setattr(message, name, value)
    return message


def _request(cls, first, fields):
    """A `cls` request: a copy of `first` when it is one, else a new one with `first` as its
    text-like field (already in `fields`); then `fields` set on it."""
    request = cls()
    if isinstance(first, cls):
        request.CopyFrom(first)
    return _fill(request, fields)


def _optional_tensor(message, name):
    return decode_tensor(getattr(message, name)) if message.HasField(name) else None


class GenerateStream:
    """A Generate call in progress: iterate it for each GeneratedTokenResult as it arrives (greedy
    search and sampling send them as they are chosen, beam search at the end), or call result()
    for the whole stream.

    Errors (from iteration, `header` or result()): the call's Error, or InternalError for a stream
    out of order (no header first, a token index skipped, no GenerateDone last). Leaving a `with`
    block, or cancel(), ends the call early.
    """

    def __init__(self, call, convert):
        self._call = call
        self._convert = convert
        self._header = None
        self._tokens = []
        self._done = None
        self._ended = False
        # Raised again by every later read, so that the stream keeps failing as it first did.
        self._failure = None

    def __iter__(self):
        return self

    def __next__(self):
        """The next GeneratedTokenResult; StopIteration after GenerateDone."""
        while True:
            message = self._read()
            if message is None:
                raise StopIteration
            token = self._add(message)
            if token is not None:
                return token

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.cancel()

    @property
    def header(self):
        """The GenerateHeader (model, prompt_tokens, method, resolved layers and heads), read from
        the stream when it has not arrived yet."""
        while self._header is None:
            message = self._read()
            if message is None:
                break
            self._add(message)
        return self._header

    def result(self):
        """Reads the rest of the stream and returns the whole of it as a GenerateResult (tokens
        already iterated included)."""
        for _ in self:
            pass
        return GenerateResult(header=self._header, tokens=list(self._tokens), done=self._done)

    def cancel(self):
        """Ends the call (CANCELLED on the server) unless it has ended already; reading on
        raises CancelledError."""
        if not self._ended:
            self._fail(errors.CancelledError("Generate: cancelled by the client"))
            self._call.cancel()

    def _fail(self, error):
        self._ended = True
        self._failure = error
        return error

    def _error(self, what):
        self.cancel()
        return self._fail(InternalError(f"Generate: the server's stream {what}"))

    def _read(self):
        """The next message, or None once the stream has ended with GenerateDone."""
        if self._failure is not None:
            raise self._failure
        if self._ended:
            return None
        try:
            return next(self._call)
        except StopIteration:
            self._ended = True
            if self._done is None:
                raise self._fail(InternalError(
                    "Generate: the server's stream ended without GenerateDone")) from None
            return None
        except grpc.RpcError as error:
            raise self._fail(self._convert(error)) from None

    def _add(self, message):
        """Checks and keeps one message; returns the token it carried, if any."""
        if self._done is not None:
            raise self._error("went on after GenerateDone")
        kind = message.WhichOneof("kind")
        if kind == "header":
            if self._header is not None:
                raise self._error("sent a second header")
            self._header = message.header
        elif kind == "token":
            if self._header is None:
                raise self._error("sent a token before the header")
            if message.token.index != len(self._tokens):
                raise self._error(f"sent token {message.token.index} where {len(self._tokens)} "
                                  "was due")
            attention = _optional_tensor(message.token, "attention")
            message.token.ClearField("attention")
            token = GeneratedTokenResult(token=message.token, attention=attention)
            self._tokens.append(token)
            return token
        elif kind == "done":
            if self._header is None:
                raise self._error("ended before the header")
            self._done = message.done
        else:
            raise self._error("sent an empty message")
        return None


class Client:
    """A client of one attnscope server (or of the replicas a name resolves to). Thread-safe: one
    instance (one channel) is meant to be shared. Connecting is lazy: an unreachable server shows
    up as UnavailableError on the first call, after the retries.

    Every method takes keyword arguments named as the request message's fields in
    proto/attnscope/v1/attnscope.proto (layers=[-1], heads=[0, 1], dtype="float16",
    head_aggregation="mean", window={"query_start": 1}, tokenization={"truncation":
    "longest_first"}; enums by number, full name or name without their prefix), or the request
    message itself (attnscope.pb.GetAttentionRequest(...)) in place of the first argument, and
    `timeout` (seconds) to override the client's for that call. A name the request does not have
    raises TypeError; an unknown enum name InvalidArgumentError. Failed calls raise the Error
    subclass of the server's code (attnscope.errors).
    """

    def __init__(self, address="127.0.0.1:50051", *, api_key=None, tls=None,
                 timeout=DEFAULT_TIMEOUT, max_response_bytes=DEFAULT_MAX_RESPONSE_BYTES,
                 max_attempts=4, initial_backoff=0.1, max_backoff=2.0, backoff_multiplier=2.0,
                 options=()):
        """Creates the channel.

        address: "host:port" or a resolver URI such as "dns:///attnscope.example:50051"; calls
            are spread round-robin over every address the name resolves to.
        api_key: sent as `authorization: Bearer <api_key>` on every call (a server started with
            --api_keys_file answers UNAUTHENTICATED without a valid one).
        tls: None or False for plaintext; True for TLS verified by the system's roots; or
            grpc.ChannelCredentials, e.g. tls_credentials(ca_file=..., cert_file=..., key_file=...).
        timeout: seconds each call may take unless it sets its own; for stream_attention and
            generate, the whole stream.
        max_response_bytes: the server's unary response cap (its --max_response_bytes). The
            channel accepts messages up to this plus 1 MiB, so that an oversized answer is refused
            by the server with its message naming the fixes rather than by this client.
        max_attempts: attempts per call (first try included) when the server answers
            UNAVAILABLE; gRPC caps it at 5; 1 disables retries. initial_backoff, max_backoff
            (seconds) and backoff_multiplier shape the exponential backoff between attempts.
        options: more gRPC channel arguments, (name, value) pairs.

        Raises InvalidArgumentError: an empty address, max_attempts < 1, max_response_bytes
        outside [1, 2 GiB - 1 MiB], or a non-positive timeout or backoff.
        """
        if not address:
            raise InvalidArgumentError("address is empty; pass e.g. 127.0.0.1:50051")
        if max_attempts < 1:
            raise InvalidArgumentError(f"max_attempts is {max_attempts}; it must be >= 1")
        limit = _MAX_CHANNEL_MESSAGE_BYTES - errors.ENVELOPE_BYTES
        if not 1 <= max_response_bytes <= limit:
            raise InvalidArgumentError(
                f"max_response_bytes is {max_response_bytes}; it must be in [1, {limit}]")
        if min(timeout, initial_backoff, max_backoff, backoff_multiplier) <= 0:
            raise InvalidArgumentError(
                "timeout, initial_backoff, max_backoff and backoff_multiplier must be positive")
        self.address = address
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.receive_limit_bytes = max_response_bytes + errors.ENVELOPE_BYTES
        self._metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        channel_options = [
            ("grpc.max_receive_message_length", self.receive_limit_bytes),
            ("grpc.service_config", service_config_json(max_attempts, initial_backoff,
                                                        max_backoff, backoff_multiplier)),
            ("grpc.enable_retries", 1),
            *options,
        ]
        if tls is True:
            tls = grpc.ssl_channel_credentials()
        if tls:
            self.channel = grpc.secure_channel(address, tls, options=channel_options)
        else:
            self.channel = grpc.insecure_channel(address, options=channel_options)
        self._stub = pb_grpc.AttentionServiceStub(self.channel)
        self._health_check = self.channel.unary_unary(
            _HEALTH_CHECK, request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)

    def close(self):
        """Closes the channel; calls in flight are cancelled."""
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _convert(self, error):
        return errors.from_rpc_error(error, self.receive_limit_bytes)

    def _call_options(self, timeout):
        return {"timeout": self.timeout if timeout is None else timeout,
                "metadata": self._metadata}

    def _unary(self, method, request, timeout):
        try:
            return method(request, **self._call_options(timeout))
        except grpc.RpcError as error:
            raise self._convert(error) from None

    def list_models(self, *, timeout=None):
        """The loaded models: a list of attnscope.pb.ModelInfo (name, architecture,
        num_hidden_layers, num_attention_heads, max_position_embeddings, ...)."""
        return list(self._unary(self._stub.ListModels, pb.ListModelsRequest(), timeout).models)

    def get_model_info(self, model="", *, timeout=None):
        """One model's attnscope.pb.ModelInfo; "" selects the server's default model. Raises
        NotFoundError for an unknown name."""
        return self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(model=model), timeout)

    def tokenize(self, text, text_pair=None, *, timeout=None, **fields):
        """Tokens exactly as the model sees them: attnscope.pb.TokenizeResponse with `model` and
        `tokens` (tokens, input_ids, token_type_ids, special_tokens_mask, offsets in code points,
        byte_offsets in UTF-8 bytes, word_ids, sequence_ids, original_texts; one entry per token).

        text: the text, or a TokenizeRequest. fields: model, tokenization. Raises
        InvalidArgumentError for an empty text, NotFoundError for an unknown model.
        """
        request = _request(pb.TokenizeRequest, text,
                           {"text": None if isinstance(text, pb.TokenizeRequest) else text,
                            "text_pair": text_pair, **fields})
        return self._unary(self._stub.Tokenize, request, timeout)

    def get_attention(self, text, text_pair=None, *, timeout=None, **fields):
        """Attention probabilities of one text or text pair, in one message: an AttentionResult
        whose attentions is [layer, head, query_token, key_token] float32 (rows sum to 1).

        text: the text (or source text of an encoder-decoder), or a GetAttentionRequest. fields:
        model, tokenization, layers, heads, head_aggregation, rollout, include_scores, dtype,
        top_k, window, aggregate_words, decoder_text, decoder_window (see the proto). Raises
        ResourceExhaustedError when the answer exceeds the server's cap (use stream_attention,
        fewer layers or heads, dtype="float16" or top_k), InvalidArgumentError for bad options,
        NotFoundError for an unknown model.
        """
        request = self._attention_request(text, text_pair, fields)
        response = self._unary(self._stub.GetAttention, request, timeout)
        result = AttentionResult(
            model=response.model, tokens=response.tokens, layers=list(response.layers),
            heads=list(response.heads), query_start=response.query_start,
            key_start=response.key_start, words=list(response.words),
            attentions=decode_tensor(response.attentions),
            scores=_optional_tensor(response, "scores"),
            top_k_indices=_optional_tensor(response, "top_k_indices"),
            rollout=_optional_tensor(response, "rollout"))
        if response.HasField("decoder_tokens"):
            result.decoder = DecoderAttention(
                tokens=response.decoder_tokens, labels=response.decoder_labels,
                layers=list(response.decoder_layers), heads=list(response.decoder_heads),
                query_start=response.decoder_query_start, key_start=response.decoder_key_start,
                attentions=decode_tensor(response.decoder_attentions),
                cross_attentions=decode_tensor(response.cross_attentions),
                top_k_indices=_optional_tensor(response, "decoder_top_k_indices"),
                cross_top_k_indices=_optional_tensor(response, "cross_top_k_indices"))
        return result

    def stream_attention(self, text, text_pair=None, *, timeout=None, **fields):
        """The same request as get_attention over StreamAttention, without the server's unary size
        cap: the header and each layer's pieces are reassembled into an AttentionResult equal in
        shape and values to get_attention's. `timeout` bounds the whole stream.

        Raises as get_attention, and InternalError when the server's stream breaks its contract
        (a piece out of order or of the wrong shape, a stream cut short).
        """
        request = self._attention_request(text, text_pair, fields)
        call = self._stub.StreamAttention(request, **self._call_options(timeout))
        assembler = StreamAssembler()
        try:
            for message in call:
                try:
                    assembler.add(message)
                except InternalError:
                    # Stops the server's work on an answer that can no longer be used.
                    call.cancel()
                    raise
        except grpc.RpcError as error:
            raise self._convert(error) from None
        return assembler.finish()

    def encode(self, inputs, *, timeout=None, **fields):
        """Hidden states and pooled vectors of a batch of inputs: an EncodeResponse whose results
        (one per input, in order) hold last_hidden_state [token, hidden], hidden_states
        [layer + 1, token, hidden] (embeddings first) with output_hidden_states=True, and pooled
        [hidden] with pooling="cls" or "mean" (L2-normalised with normalize=True).

        inputs: a text, a (text, text_pair) tuple, a list of those, or an EncodeRequest. fields:
        model, tokenization, output_hidden_states, pooling, normalize, dtype. Raises
        InvalidArgumentError for an empty input or more than the server's
        --max_inputs_per_request, NotFoundError for an unknown model.
        """
        if isinstance(inputs, pb.EncodeRequest):
            request = _request(pb.EncodeRequest, inputs, fields)
        else:
            if isinstance(inputs, (str, tuple)):
                inputs = [inputs]
            messages = [pb.EncodeInput(text=item) if isinstance(item, str)
                        else pb.EncodeInput(text=item[0], text_pair=item[1]) for item in inputs]
            request = _request(pb.EncodeRequest, None, {"inputs": messages, **fields})
        response = self._unary(self._stub.Encode, request, timeout)
        return EncodeResponse(model=response.model, results=[
            EncodeResult(tokens=result.tokens,
                         last_hidden_state=decode_tensor(result.last_hidden_state),
                         hidden_states=_optional_tensor(result, "hidden_states"),
                         pooled=_optional_tensor(result, "pooled"))
            for result in response.results])

    def cross_attention(self, query, documents=None, *, timeout=None, **fields):
        """Query-to-document attention for one query and several documents: a CrossAttentionResult
        with one DocumentAttentionResult per document, in order: query_to_document [layer, head,
        query_token, document_token], document_to_query with include_document_to_query=True,
        logits and, for a cross-encoder, relevance_score (a logit); query_truncated and
        document_truncated say whether truncation cut the text the model read.

        query: the query, or a CrossAttentionRequest. documents: a list of texts (one text alone
        is one document, as for encode's inputs). fields: model,
        tokenization, layers, heads, head_aggregation, include_document_to_query, dtype. Raises
        InvalidArgumentError for an empty text or too many documents, NotFoundError for an
        unknown model.
        """
        is_request = isinstance(query, pb.CrossAttentionRequest)
        if isinstance(documents, str):
            documents = [documents]
        request = _request(pb.CrossAttentionRequest, query,
                           {"query": None if is_request else query, "documents": documents,
                            **fields})
        response = self._unary(self._stub.CrossAttention, request, timeout)
        return CrossAttentionResult(
            model=response.model, layers=list(response.layers), heads=list(response.heads),
            documents=[DocumentAttentionResult(
                tokens=document.tokens, query_positions=list(document.query_positions),
                document_positions=list(document.document_positions),
                query_to_document=decode_tensor(document.query_to_document),
                document_to_query=_optional_tensor(document, "document_to_query"),
                logits=list(document.logits),
                relevance_score=(document.relevance_score
                                 if document.HasField("relevance_score") else None),
                query_truncated=document.query_truncated,
                document_truncated=document.document_truncated)
                for document in response.documents])

    def list_parameters(self, model="", *, timeout=None):
        """The names and shapes of a model's checkpoint tensors (attnscope.pb.ParameterInfo), in
        name order. Raises NotFoundError for an unknown model."""
        request = pb.ListParametersRequest(model=model)
        return list(self._unary(self._stub.ListParameters, request, timeout).parameters)

    def get_parameter(self, name, *, timeout=None, **fields):
        """One checkpoint tensor, or rows [row_start, row_end) of it: a ParameterResult whose
        tensor is float32 (dims "row", "column" for a matrix).

        name: a name from list_parameters, or a GetParameterRequest. fields: model, dtype,
        row_start, row_end. Raises NotFoundError for an unknown name (the message names similar
        ones), ResourceExhaustedError over the server's cap (ask for fewer rows or float16).
        """
        is_request = isinstance(name, pb.GetParameterRequest)
        request = _request(pb.GetParameterRequest, name,
                           {"name": None if is_request else name, **fields})
        response = self._unary(self._stub.GetParameter, request, timeout)
        return ParameterResult(model=response.model, name=response.name,
                               row_start=response.row_start,
                               tensor=decode_tensor(response.tensor))

    def get_training_record(self, model="", *, timeout=None):
        """The loss and learning-rate curves of a model folder's training_record.json
        (attnscope.pb.TrainingRecord: points of step and values, record_json). Raises
        NotFoundError when the folder has none."""
        request = pb.GetTrainingRecordRequest(model=model)
        return self._unary(self._stub.GetTrainingRecord, request, timeout)

    def attribute(self, text, text_pair=None, *, timeout=None, **fields):
        """Token and word attributions of a cross-encoder's score (attnscope.pb.AttributeResponse:
        occlusion, gradient_x_input and integrated_gradients, one float per token in logit units,
        and words with their sums).

        text: the query (or the text), or an AttributeRequest. text_pair: the document. fields:
        model, tokenization, target, methods (e.g. ["occlusion"]), occlusion_token, baseline,
        integrated_gradients_steps. Raises UnimplementedError for a decoder-only model,
        InvalidArgumentError for a model without a classifier head or bad options.
        """
        is_request = isinstance(text, pb.AttributeRequest)
        request = _request(pb.AttributeRequest, text,
                           {"text": None if is_request else text, "text_pair": text_pair,
                            **fields})
        return self._unary(self._stub.Attribute, request, timeout)

    def generate(self, prompt="", *, timeout=None, **fields):
        """Starts generating text after `prompt` (a source text for an encoder-decoder) and returns
        a GenerateStream: iterate it for each GeneratedTokenResult as it arrives (token.text is the
        text it adds, token.logprob its log-probability, attention [layer, head, key_token] with
        output_attentions=True), or call .result() for the GenerateResult (header, tokens, done:
        finish_reason, ids, text, score). `timeout` bounds the whole stream.

        prompt: the prompt, or a GenerateRequest. fields: model, max_new_tokens, method
        ("greedy", "beam_search", "sampling"), num_beams, length_penalty, temperature, top_k,
        top_p, seed, ignore_eos, output_attentions, layers, heads, head_aggregation, dtype.
        Errors arrive while reading the stream: InvalidArgumentError for an encoder-only model or
        options out of range, NotFoundError for an unknown model, InternalError for a stream out
        of order.
        """
        is_request = isinstance(prompt, pb.GenerateRequest)
        request = _request(pb.GenerateRequest, prompt,
                           {"prompt": None if is_request else prompt, **fields})
        call = self._stub.Generate(request, **self._call_options(timeout))
        return GenerateStream(call, self._convert)

    def health(self, service="", *, timeout=None):
        """grpc.health.v1 Check of `service` ("" = the whole server, or
        "attnscope.v1.AttentionService"): "SERVING", "NOT_SERVING" or "UNKNOWN". Raises
        NotFoundError for a service the server does not know."""
        response = self._unary(self._health_check,
                               health_pb2.HealthCheckRequest(service=service), timeout)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    @staticmethod
    def _attention_request(text, text_pair, fields):
        is_request = isinstance(text, pb.GetAttentionRequest)
        return _request(pb.GetAttentionRequest, text,
                        {"text": None if is_request else text, "text_pair": text_pair, **fields})
