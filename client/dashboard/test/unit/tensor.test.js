import assert from 'node:assert/strict';
import test from 'node:test';
import { attentionDtype, decodeTensor, halfToFloat, matrix } from '../../src/tensor.js';

const base64 = (typed) => Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength).toString('base64');

test('binary16 bit patterns decode to their IEEE 754 values', () => {
  assert.equal(halfToFloat(0x3c00), 1);
  assert.equal(halfToFloat(0xc000), -2);
  assert.equal(halfToFloat(0x3555), 0.333251953125);
  assert.equal(halfToFloat(0x0001), 2 ** -24); // smallest subnormal
  assert.equal(halfToFloat(0x7bff), 65504); // largest normal
  assert.equal(halfToFloat(0x7c00), Infinity);
  assert.ok(Number.isNaN(halfToFloat(0x7e00)));
  assert.ok(Object.is(halfToFloat(0x8000), -0));
});

test('tensors decode by dtype, little-endian and row-major', () => {
  const values = new Float32Array([0.25, 0.75, 1, 0, 0.5, 0.5]);
  const float32 = decodeTensor({ shape: ['1', '2', '3'], dtype: 'DTYPE_FLOAT32', data: base64(values) });
  assert.deepEqual(float32.shape, [1, 2, 3]);
  assert.deepEqual([...float32.data], [...values]);

  const halves = new Uint16Array([0x3400, 0x3a00, 0x3c00, 0x0000]);
  const float16 = decodeTensor({ shape: ['2', '2'], dtype: 'DTYPE_FLOAT16', data: base64(halves) });
  assert.deepEqual([...float16.data], [0.25, 0.75, 1, 0]);

  // bfloat16 keeps the upper 16 bits of a binary32.
  const upper = new Uint16Array([0x3e80, 0xbf40]);
  const bfloat16 = decodeTensor({ shape: ['2'], dtype: 'DTYPE_BFLOAT16', data: base64(upper) });
  assert.deepEqual([...bfloat16.data], [0.25, -0.75]);

  const indices = new Int32Array([3, 0, 7]);
  const int32 = decodeTensor({ shape: ['3'], dtype: 'DTYPE_INT32', data: base64(indices) });
  assert.ok(int32.data instanceof Int32Array);
  assert.deepEqual([...int32.data], [3, 0, 7]);
});

test('matrix() views the last two dimensions at the given leading indices', () => {
  // [layer 2, head 3, 2 x 2]: element value = its flat index.
  const data = Float32Array.from({ length: 24 }, (_, i) => i);
  const tensor = { shape: [2, 3, 2, 2], data };
  const m = matrix(tensor, 1, 2);
  assert.equal(m.rows, 2);
  assert.equal(m.cols, 2);
  assert.deepEqual([...m.values], [20, 21, 22, 23]);
  assert.deepEqual([...matrix({ shape: [2, 2], data: data.subarray(0, 4) }).values], [0, 1, 2, 3]);
});

test('float16 is asked for once float32 would pass 16 MB', () => {
  assert.equal(attentionDtype(4 * 4 * 128 * 128), 'DTYPE_FLOAT32');
  // 12 layers x 12 heads x 512 x 512 float32 values: 151 MB.
  assert.equal(attentionDtype(12 * 12 * 512 * 512), 'DTYPE_FLOAT16');
});
