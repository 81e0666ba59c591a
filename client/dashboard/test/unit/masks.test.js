import assert from 'node:assert/strict';
import test from 'node:test';
import { keyMask, slidingWindow } from '../../src/masks.js';

// The hidden cells of a rows x cols matrix as [row, col, reason word].
function hiddenCells(masked, rows, cols) {
  const cells = [];
  for (let r = 0; r < rows; ++r) {
    for (let c = 0; c < cols; ++c) {
      const reason = masked(r, c);
      if (reason) cells.push([r, c, reason.includes('causal') ? 'causal' : 'window']);
    }
  }
  return cells;
}

test('a bidirectional model hides nothing', () => {
  assert.equal(keyMask({ causal: false, window: 4, layer: 0 }), null);
});

test('a causal layer without a window hides the keys after each query', () => {
  assert.deepEqual(hiddenCells(keyMask({ causal: true, layer: 0 }), 3, 3), [
    [0, 1, 'causal'],
    [0, 2, 'causal'],
    [1, 2, 'causal'],
  ]);
});

test('a window of 2 also hides keys 2 or more positions back, by absolute position', () => {
  const masked = keyMask({ causal: true, window: 2, layer: 3, queryStart: 2, keyStart: 0 });
  // Rows are queries 2 and 3.
  assert.deepEqual(hiddenCells(masked, 2, 4), [
    [0, 0, 'window'],
    [0, 3, 'causal'],
    [1, 0, 'window'],
    [1, 1, 'window'],
  ]);
  assert.match(masked(0, 0), /layer 3's sliding window shows each query its last 2 keys/);
});

test('a words matrix is masked only causally: a window may cut a word', () => {
  assert.deepEqual(hiddenCells(keyMask({ causal: true, window: 1, layer: 0, words: true }), 2, 2), [[0, 1, 'causal']]);
});

test('slidingWindow reads ModelInfo.layer_sliding_windows, 0 where it has none', () => {
  const info = { layerSlidingWindows: [4, 0] };
  assert.equal(slidingWindow(info, 0), 4);
  assert.equal(slidingWindow(info, 1), 0);
  assert.equal(slidingWindow({}, 0), 0);
  assert.equal(slidingWindow(info, 7), 0);
});
