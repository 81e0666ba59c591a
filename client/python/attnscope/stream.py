"""Reassembly of a StreamAttention stream into the AttentionResult that GetAttention returns.

A port of client/stream_assembler.cc, with the same contract and the same errors: the header
(tokens, resolved layers and heads, and the full shape of each attention block), then the layers
of each block, then the rollout rows. A layer arrives as one or more pieces of its [head,
query_token, key_token] slice, whole heads or rows of one head, each the next contiguous run of the
slice. Blocks come in pb.AttentionBlock order (self-attention; with decoder_text the decoder's
self-attention, then cross-attention), each complete before the next, layers in the header's
order. Every error is an InternalError whose message starts "StreamAttention: the server's
stream": the server broke this contract.
"""
import math

from attnscope.errors import InternalError
from attnscope.results import AttentionResult, DecoderAttention
from attnscope.tensor import dtype_name, decode_values, empty_tensor
from attnscope.v1 import attnscope_pb2 as pb


def _stream_error(what):
    return InternalError(f"StreamAttention: the server's stream {what}")


def _shape_text(shape):
    return "[" + ", ".join(str(size) for size in shape) + "]"


class _Block:
    """One stacked tensor the layer messages fill, with its scores and top-k indices."""

    def __init__(self, name, layers, shape, dims, dtype, has_scores):
        self.name = name
        self.layers = layers
        self.has_scores = has_scores
        shape = tuple(shape)
        if len(shape) != 4 or shape[0] != len(layers):
            raise _stream_error(f"header has {name} shape {_shape_text(shape)} for {len(layers)} "
                                "layers")
        if any(size < 0 for size in shape[1:]):
            raise _stream_error("header has a negative dimension")
        self.shape = shape
        self.dims = tuple(dims)
        self.slice_elements = math.prod(shape[1:])
        self.attentions = empty_tensor(shape, dims, dtype)
        self.scores = None
        self.top_k_indices = None
        self.next_layer = 0
        # Elements of the current layer's slice received so far.
        self.layer_filled = 0

    def complete(self):
        return self.next_layer == len(self.layers)


class StreamAssembler:
    """Takes the messages of one stream in order (add) and returns the whole answer (finish).

    Not thread-safe; after an error it is not to be used again.
    """

    def __init__(self):
        self._header = None
        # Indexed by pb.AttentionBlock; None for a block the header does not announce.
        self._blocks = [None, None, None]
        self._rollout = None
        self._rollout_rows = 0

    def add(self, message):
        """Takes the next pb.StreamAttentionResponse. InternalError as above."""
        kind = message.WhichOneof("message")
        if kind == "header":
            self._add_header(message.header)
        elif kind == "layer":
            self._add_layer(message.layer)
        elif kind == "rollout":
            self._add_rollout(message.rollout)
        else:
            raise _stream_error("sent an empty message")

    def finish(self):
        """The AttentionResult, once the stream has ended, equal to GetAttention's answer.

        InternalError when the stream ended without a header, before the last layer of a block or
        before the last rollout row.
        """
        header = self._header
        if header is None:
            raise _stream_error("ended without a header")
        for block in self._blocks:
            if block is not None and (not block.complete() or block.layer_filled != 0):
                raise _stream_error(f"ended after {block.next_layer} of {len(block.layers)} "
                                    f"layers of {block.name}")
        if self._rollout is not None and self._rollout_rows != self._rollout.shape[0]:
            raise _stream_error(f"ended after {self._rollout_rows} of {self._rollout.shape[0]} "
                                "rollout rows")
        own = self._blocks[pb.ATTENTION_BLOCK_SELF]
        result = AttentionResult(
            model=header.model, tokens=header.tokens, layers=list(header.layers),
            heads=list(header.heads), query_start=header.query_start,
            key_start=header.key_start, words=list(header.words), attentions=own.attentions,
            scores=own.scores, top_k_indices=own.top_k_indices, rollout=self._rollout)
        if header.HasField("decoder_tokens"):
            decoder = self._blocks[pb.ATTENTION_BLOCK_DECODER_SELF]
            cross = self._blocks[pb.ATTENTION_BLOCK_CROSS]
            result.decoder = DecoderAttention(
                tokens=header.decoder_tokens, labels=header.decoder_labels,
                layers=list(header.decoder_layers), heads=list(header.decoder_heads),
                query_start=header.decoder_query_start, key_start=header.decoder_key_start,
                attentions=decoder.attentions, cross_attentions=cross.attentions,
                top_k_indices=decoder.top_k_indices, cross_top_k_indices=cross.top_k_indices)
        return result

    def _add_header(self, header):
        if self._header is not None:
            raise _stream_error("sent two headers")
        self._header = header
        layers = list(header.layers)
        self._blocks[pb.ATTENTION_BLOCK_SELF] = _Block(
            "attentions", layers, header.attentions_shape, header.dim_names, header.dtype, True)
        if not header.HasField("decoder_tokens"):
            return
        decoder_layers = list(header.decoder_layers)
        self._blocks[pb.ATTENTION_BLOCK_DECODER_SELF] = _Block(
            "decoder_attentions", decoder_layers, header.decoder_attentions_shape,
            header.decoder_dim_names, header.dtype, False)
        self._blocks[pb.ATTENTION_BLOCK_CROSS] = _Block(
            "cross_attentions", decoder_layers, header.cross_attentions_shape,
            header.cross_dim_names, header.dtype, False)

    @staticmethod
    def _add_piece(block, tensor, name, head_offset, query_offset, target):
        """Checks that `tensor` is the piece of the block's current layer at (head_offset,
        query_offset), the next contiguous run of the layer's slice, and decodes it into `target`
        there, allocating the target on the first piece (None). Returns the target."""
        _, heads, rows, keys = block.shape
        shape = tuple(tensor.shape)
        fits = (len(shape) == 3 and shape[0] >= 1 and shape[1] >= 1 and shape[2] == keys
                and head_offset + shape[0] <= heads and query_offset + shape[1] <= rows
                and (shape[1] == rows or shape[0] == 1))
        start = (head_offset * rows + query_offset) * keys
        layer = block.layers[block.next_layer]
        if not fits or start != block.layer_filled:
            raise _stream_error(
                f"sent a piece of layer {layer} {name} of shape {_shape_text(shape)} at head "
                f"{head_offset}, query row {query_offset}; expected whole heads or rows of one "
                f"head of [{heads}, {rows}, {keys}], continuing at element {block.layer_filled}")
        if target is None:
            target = empty_tensor(block.shape, block.dims, tensor.dtype,
                                  integer=tensor.dtype == pb.DTYPE_INT32)
        elif target.wire_dtype != dtype_name(tensor.dtype):
            raise _stream_error(f"sent layer {layer} {name} as {dtype_name(tensor.dtype)}, "
                                f"expected {target.wire_dtype}")
        offset = block.next_layer * block.slice_elements + start
        count = shape[0] * shape[1] * keys
        target.reshape(-1)[offset:offset + count] = decode_values(tensor, count)
        return target

    def _add_layer(self, layer):
        if self._header is None:
            raise _stream_error("sent a layer before the header")
        kind = layer.block
        if kind < 0 or kind >= len(self._blocks) or self._blocks[kind] is None:
            raise _stream_error(f"sent a layer of block {kind}, which its header does not "
                                "announce")
        block = self._blocks[kind]
        for earlier in self._blocks[:kind]:
            if earlier is not None and not earlier.complete():
                raise _stream_error(f"sent {block.name} before the end of {earlier.name}")
        if block.complete():
            raise _stream_error(f"sent more than the {len(block.layers)} layers of {block.name} "
                                "its header announced")
        if layer.layer != block.layers[block.next_layer]:
            raise _stream_error(f"sent {block.name} layer {layer.layer} where the header "
                                f"announced {block.layers[block.next_layer]}")
        head_offset, query_offset = layer.head_offset, layer.query_offset
        self._add_piece(block, layer.attentions, block.name, head_offset, query_offset,
                        block.attentions)
        if layer.HasField("scores"):
            if not block.has_scores:
                raise _stream_error("sent scores of a decoder block")
            block.scores = self._add_piece(block, layer.scores, "scores", head_offset,
                                           query_offset, block.scores)
        if layer.HasField("top_k_indices"):
            block.top_k_indices = self._add_piece(block, layer.top_k_indices, "top_k_indices",
                                                  head_offset, query_offset, block.top_k_indices)
        block.layer_filled += layer.attentions.shape[0] * layer.attentions.shape[1] * block.shape[3]
        if block.layer_filled == block.slice_elements:
            block.layer_filled = 0
            block.next_layer += 1

    def _add_rollout(self, piece):
        if self._header is None:
            raise _stream_error("sent the rollout before the header")
        tensor = piece.rollout
        shape = tuple(tensor.shape)
        rows = self._blocks[pb.ATTENTION_BLOCK_SELF].shape[2]
        if self._rollout is None and len(shape) == 2:
            self._rollout = empty_tensor((rows, shape[1]), tensor.dim_names, tensor.dtype)
        if (len(shape) != 2 or self._rollout is None or shape[1] != self._rollout.shape[1]
                or piece.query_offset != self._rollout_rows
                or piece.query_offset + shape[0] > rows):
            raise _stream_error(f"sent rollout rows of shape {_shape_text(shape)} at row "
                                f"{piece.query_offset}; expected rows from {self._rollout_rows} "
                                f"of {rows}")
        offset = piece.query_offset * shape[1]
        count = shape[0] * shape[1]
        self._rollout.reshape(-1)[offset:offset + count] = decode_values(tensor, count)
        self._rollout_rows += shape[0]
