import assert from 'node:assert/strict';
import test from 'node:test';
import { StreamAssembler } from '../../src/stream.js';

const base64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');
const tensor = (shape, values) => ({ shape: shape.map(String), dtype: 'DTYPE_FLOAT32', data: base64(new Float32Array(values)) });
// A layer of 2 heads, 2 query rows and 3 keys: element i has value i.
const header = { attentionsShape: ['2', '2', '2', '3'] };
const range = (from, to) => Array.from({ length: to - from }, (_, i) => from + i);

test('a layer sent whole comes back as it is', () => {
  const assembler = new StreamAssembler(header);
  const done = assembler.add({ layer: { layer: 3, attentions: tensor([2, 2, 3], range(0, 12)) } });
  assert.equal(done.layer, 3);
  assert.deepEqual(done.attentions.shape, [2, 2, 3]);
  assert.deepEqual([...done.attentions.data], range(0, 12));
});

test('pieces of heads and of rows of one head fill the layer in order', () => {
  const assembler = new StreamAssembler(header);
  // Head 0 whole; head 1 in two runs of one row (queryOffset 0 is left out of JSON).
  assert.equal(assembler.add({ layer: { attentions: tensor([1, 2, 3], range(0, 6)) } }), null);
  assert.equal(assembler.add({ layer: { attentions: tensor([1, 1, 3], range(6, 9)), headOffset: 1 } }), null);
  const done = assembler.add({ layer: { attentions: tensor([1, 1, 3], range(9, 12)), headOffset: 1, queryOffset: 1 } });
  assert.equal(done.layer, 0);
  assert.deepEqual([...done.attentions.data], range(0, 12));
  // The next layer starts afresh.
  assert.equal(assembler.add({ layer: { layer: 1, attentions: tensor([1, 2, 3], range(0, 6)) } }), null);
});

test('rollout rows arrive in pieces', () => {
  const assembler = new StreamAssembler(header);
  assert.equal(assembler.add({ rollout: { rollout: tensor([1, 3], [1, 2, 3]) } }), null);
  const done = assembler.add({ rollout: { queryOffset: 1, rollout: tensor([1, 3], [4, 5, 6]) } });
  assert.deepEqual(done.rollout.shape, [2, 3]);
  assert.deepEqual([...done.rollout.data], [1, 2, 3, 4, 5, 6]);
});

test('a gap or an overlap is an error naming where the run was expected', () => {
  const gap = new StreamAssembler(header);
  assert.throws(() => gap.add({ layer: { attentions: tensor([1, 2, 3], range(0, 6)), headOffset: 1 } }), /at element 6; expected the run at element 0 of 12/);
  const overlap = new StreamAssembler(header);
  overlap.add({ layer: { attentions: tensor([1, 2, 3], range(0, 6)) } });
  assert.throws(() => overlap.add({ layer: { attentions: tensor([1, 2, 3], range(0, 6)) } }), /expected the run at element 6/);
});

test("an encoder-decoder's blocks: only the chosen one is put together, in its own shape", () => {
  const both = { ...header, crossAttentionsShape: ['2', '2', '1', '3'] };
  const assembler = new StreamAssembler(both, 'cross');
  assert.equal(assembler.add({ layer: { layer: 0, attentions: tensor([2, 2, 3], range(0, 12)) } }), null);
  assert.equal(assembler.add({ layer: { layer: 0, block: 'ATTENTION_BLOCK_DECODER_SELF', attentions: tensor([2, 2, 3], range(0, 12)) } }), null);
  const done = assembler.add({ layer: { layer: 1, block: 'ATTENTION_BLOCK_CROSS', attentions: tensor([2, 1, 3], range(0, 6)) } });
  assert.equal(done.layer, 1);
  assert.deepEqual(done.attentions.shape, [2, 1, 3]);
  assert.deepEqual([...done.attentions.data], range(0, 6));
});
