"""The answers of the attnscope client: dataclasses whose tensors are attnscope.Tensor arrays.

Token lists (Tokens), words, model descriptions and other tensor-free parts are the proto messages
themselves (attnscope.pb), as in the C++ client: their fields are named as in
proto/attnscope/v1/attnscope.proto (tokens, input_ids, offsets, word_ids, ...).
"""
from dataclasses import dataclass, field
from typing import List, Optional

from attnscope.tensor import Tensor
from attnscope.v1 import attnscope_pb2 as pb


@dataclass
class DecoderAttention:
    """The decoder's side of an encoder-decoder's attention (get_attention with decoder_text)."""
    #: The decoder's input: its start token, then the target's tokens.
    tokens: pb.Tokens
    #: The token each decoder position writes: the target's tokens, then the end-of-sequence token.
    labels: pb.Tokens
    #: Resolved decoder layer and head indices, in output order.
    layers: List[int]
    heads: List[int]
    #: Decoder position of output query / key index 0 (decoder_window's start).
    query_start: int
    key_start: int
    #: [layer, head, decoder_token, decoder_token] causal self-attention ([..., k] with top_k).
    attentions: Tensor
    #: [layer, head, decoder_token, encoder_token] ([..., k] with top_k); the encoder axis starts at
    #: the encoder's key_start.
    cross_attentions: Tensor
    #: int32 absolute decoder / encoder positions [layer, head, decoder_token, k], with top_k.
    top_k_indices: Optional[Tensor] = None
    cross_top_k_indices: Optional[Tensor] = None


@dataclass
class AttentionResult:
    """The answer of get_attention and (reassembled) stream_attention.

    attentions is [layer, head, query_token, key_token] (key_token becomes k with top_k), float32
    probabilities in [0, 1] whose rows sum to 1 (unless windowed or aggregated by max); scores has
    the same shape, unbounded pre-softmax values; top_k_indices [layer, head, query_token, k] int32
    absolute key positions; rollout [query_token, key_token].
    """
    model: str
    tokens: pb.Tokens
    #: Resolved (non-negative) layer and head indices, in output order.
    layers: List[int]
    heads: List[int]
    #: Token position (a word index with aggregate_words) of output query / key index 0.
    query_start: int
    key_start: int
    #: With aggregate_words: the words the query and key axes count, in order.
    words: List[pb.Word]
    attentions: Tensor
    #: Present when the request asked for them (include_scores, top_k, rollout).
    scores: Optional[Tensor] = None
    top_k_indices: Optional[Tensor] = None
    rollout: Optional[Tensor] = None
    #: With decoder_text (encoder-decoders); the fields above are then the encoder's.
    decoder: Optional[DecoderAttention] = None


@dataclass
class EncodeResult:
    """One input's answer of encode."""
    tokens: pb.Tokens
    #: [token, hidden].
    last_hidden_state: Tensor
    #: [layer + 1, token, hidden] (embeddings first), with output_hidden_states.
    hidden_states: Optional[Tensor] = None
    #: [hidden], with pooling.
    pooled: Optional[Tensor] = None


@dataclass
class EncodeResponse:
    model: str
    #: One per input, in request order.
    results: List[EncodeResult]


@dataclass
class DocumentAttentionResult:
    """One document's answer of cross_attention."""
    #: The joint input ([CLS] query [SEP] document [SEP] for encoders).
    tokens: pb.Tokens
    #: Positions in `tokens` of the query's and the document's text tokens.
    query_positions: List[int]
    document_positions: List[int]
    #: [layer, head, query_token, document_token].
    query_to_document: Tensor
    #: [layer, head, document_token, query_token], with include_document_to_query.
    document_to_query: Optional[Tensor] = None
    #: Classifier logits [num_labels]; empty for models without a classifier head.
    logits: List[float] = field(default_factory=list)
    #: Relevance score (a logit) of a cross-encoder.
    relevance_score: Optional[float] = None
    #: Whether truncation cut the query's or the document's tokens (the model read the first ones).
    query_truncated: bool = False
    document_truncated: bool = False


@dataclass
class CrossAttentionResult:
    model: str
    layers: List[int]
    heads: List[int]
    #: One per document, in request order.
    documents: List[DocumentAttentionResult]


@dataclass
class ParameterResult:
    """Rows [row_start, row_start + tensor.shape[0]) of a checkpoint tensor."""
    model: str
    name: str
    row_start: int
    tensor: Tensor


@dataclass
class GeneratedTokenResult:
    """One token of a generate stream."""
    #: The message as sent (index, position, id, token, text, logprob), its attention cleared.
    token: pb.GeneratedToken
    #: [layer, head, key_token] over the token.position tokens before it (encoder tokens for an
    #: encoder-decoder), with output_attentions.
    attention: Optional[Tensor] = None

    @property
    def text(self):
        """The text this token adds to the output ("" while a character is incomplete)."""
        return self.token.text


@dataclass
class GenerateResult:
    """A whole generate stream."""
    header: pb.GenerateHeader
    tokens: List[GeneratedTokenResult]
    #: finish_reason, ids, text (the tokens' texts joined) and score.
    done: pb.GenerateDone

    @property
    def text(self):
        """The generated text (done.text)."""
        return self.done.text
