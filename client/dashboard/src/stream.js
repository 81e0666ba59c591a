// Puts StreamAttention's pieces back together. The server sends a layer larger than its message
// bound (--max_stream_message_bytes) as contiguous runs of the layer's [head, query, key] slice,
// each at (headOffset, queryOffset), and the rollout as runs of rows at queryOffset
// (proto/attnscope/v1/attnscope.proto, StreamAttentionLayer); client/client.cc reassembles the
// same way.

import { decodeTensor } from './tensor.js';

// An encoder-decoder's stream (decoder_text) sends its three attentions as blocks of layers, each
// with its own shape in the header.
const BLOCKS = {
  encoder: ['attentionsShape', 'ATTENTION_BLOCK_SELF'],
  decoder: ['decoderAttentionsShape', 'ATTENTION_BLOCK_DECODER_SELF'],
  cross: ['crossAttentionsShape', 'ATTENTION_BLOCK_CROSS'],
};

export class StreamAssembler {
  // `header`: the stream's first message's header (attentionsShape [layers, heads, query, key]);
  // `block`: which of an encoder-decoder's attentions to put together ('encoder', 'decoder' or
  // 'cross'); layers of the others are passed over.
  constructor(header, block = 'encoder') {
    const [shape, name] = BLOCKS[block];
    this.block = name;
    const [, heads, rows, keys] = (header[shape] ?? []).map(Number);
    this.heads = heads;
    this.rows = rows;
    this.keys = keys;
    this.layer = null;
    this.rollout = null;
  }

  // Adds a layer or rollout message. Returns {layer, attentions} once a layer is complete,
  // {rollout} once the rollout is, otherwise null; throws when a piece is not the next run.
  add(message) {
    if (message.layer) {
      const piece = message.layer;
      if ((piece.block ?? 'ATTENTION_BLOCK_SELF') !== this.block) return null;
      const size = this.heads * this.rows * this.keys;
      if (!this.layer) this.layer = { index: piece.layer ?? 0, data: new Float32Array(size), filled: 0 };
      const start = ((piece.headOffset ?? 0) * this.rows + (piece.queryOffset ?? 0)) * this.keys;
      this.layer.filled = this.place(this.layer, piece.attentions, start, `layer ${this.layer.index}`);
      if (this.layer.filled < size) return null;
      const done = this.layer;
      this.layer = null;
      return { layer: done.index, attentions: { shape: [this.heads, this.rows, this.keys], data: done.data } };
    }
    if (message.rollout) {
      const size = this.rows * this.keys;
      if (!this.rollout) this.rollout = { data: new Float32Array(size), filled: 0 };
      const start = (message.rollout.queryOffset ?? 0) * this.keys;
      this.rollout.filled = this.place(this.rollout, message.rollout.rollout, start, 'rollout');
      if (this.rollout.filled < size) return null;
      const done = this.rollout;
      this.rollout = null;
      return { rollout: { shape: [this.rows, this.keys], data: done.data } };
    }
    return null;
  }

  place(target, tensor, start, what) {
    const values = decodeTensor(tensor).data;
    if (start !== target.filled || start + values.length > target.data.length) {
      throw new Error(
        `StreamAttention sent ${values.length} values of ${what} at element ${start}; expected the run at element ${target.filled} of ${target.data.length}`,
      );
    }
    target.data.set(values, start);
    return start + values.length;
  }
}
