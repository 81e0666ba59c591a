import assert from 'node:assert/strict';
import test from 'node:test';
import { formatFloat32, rowEntropies, temperedSoftmax } from '../../src/numbers.js';

test('formatFloat32 gives the shortest text that reads back as the same float32', () => {
  assert.equal(formatFloat32(Math.fround(0.1)), '0.1');
  assert.equal(formatFloat32(0.25), '0.25');
  assert.equal(formatFloat32(0), '0');
  const awkward = Math.fround(0.123456789);
  assert.equal(Math.fround(Number(formatFloat32(awkward))), awkward);
  for (let i = 0; i < 1000; ++i) {
    const value = Math.fround(Math.random() * 2 - 1);
    assert.equal(Math.fround(Number(formatFloat32(value))), value);
  }
});

test('temperedSoftmax divides scores by T before the softmax', () => {
  const scores = [1, 2, 3, 0, 0, 0];
  const probabilities = temperedSoftmax(scores, 2, 3, 1);
  const z = Math.exp(1) + Math.exp(2) + Math.exp(3);
  assert.ok(Math.abs(probabilities[0] - Math.exp(1) / z) < 1e-15);
  assert.ok(Math.abs(probabilities[3] - 1 / 3) < 1e-15);
  const hot = temperedSoftmax(scores, 2, 3, 2);
  const z2 = Math.exp(0.5) + Math.exp(1) + Math.exp(1.5);
  assert.ok(Math.abs(hot[2] - Math.exp(1.5) / z2) < 1e-15);
});

test('the causal mask drops keys after each query, by absolute position', () => {
  const scores = Array(9).fill(0);
  const p = temperedSoftmax(scores, 3, 3, 1, { causal: true });
  assert.deepEqual([...p], [1, 0, 0, 0.5, 0.5, 0, 1 / 3, 1 / 3, 1 / 3]);
  // A window starting at query 1 and key 0: its first row is query 1, which sees keys 0 and 1.
  const windowed = temperedSoftmax([0, 0, 0], 1, 3, 1, { causal: true, queryStart: 1, keyStart: 0 });
  assert.deepEqual([...windowed], [0.5, 0.5, 0]);
});

test('a sliding window of 2 drops keys 2 or more positions back, as transformers masks them', () => {
  // Query q sees key k when q - 2 < k <= q.
  const p = temperedSoftmax(Array(16).fill(0), 4, 4, 1, { causal: true, window: 2 });
  assert.deepEqual([...p], [1, 0, 0, 0, 0.5, 0.5, 0, 0, 0, 0.5, 0.5, 0, 0, 0, 0.5, 0.5]);
  // Rows of queries 2 and 3 over keys 1 to 3: query 2 sees keys 1 and 2, query 3 keys 2 and 3.
  const cut = temperedSoftmax([0, 5, 9, 0, 0, 0], 2, 3, 1, { causal: true, window: 2, queryStart: 2, keyStart: 1 });
  const z = Math.exp(0) + Math.exp(5);
  assert.ok(Math.abs(cut[0] - 1 / z) < 1e-15 && Math.abs(cut[1] - Math.exp(5) / z) < 1e-15);
  assert.deepEqual([cut[2], ...cut.slice(3)], [0, 0, 0.5, 0.5]);
});

test('row entropy is in bits and rises as the temperature flattens a row', () => {
  const h = rowEntropies([1, 0, 0, 0, 0.25, 0.25, 0.25, 0.25], 2, 4);
  assert.equal(h[0], 0);
  assert.equal(h[1], 2);
  const scores = [3, 1, 0, -2];
  const entropy = (t) => rowEntropies(temperedSoftmax(scores, 1, 4, t), 1, 4)[0];
  assert.ok(entropy(0.5) < entropy(1));
  assert.ok(entropy(1) < entropy(4));
  assert.ok(entropy(100) < 2 && entropy(100) > 1.99);
});
