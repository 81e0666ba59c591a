// Tensor messages of the contract: `data` is base64 of little-endian row-major values of `dtype`,
// `shape` a list of int64 (strings in JSON). Browsers run on little-endian machines, so float32
// and int32 data are viewed in place.

let halfTable;

// IEEE 754 binary16 bits to a number.
export function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

// A 512-token, 12-head layer is 3 M halves. Float16Array (Chromium 135 on) converts them natively,
// several times faster than a loop; elsewhere, one table look-up each instead of the arithmetic.
function decodeHalves(halves) {
  if (globalThis.Float16Array) return new Float32Array(new Float16Array(halves.buffer, halves.byteOffset, halves.length));
  if (!halfTable) {
    halfTable = new Float32Array(65536);
    for (let i = 0; i < 65536; ++i) halfTable[i] = halfToFloat(i);
  }
  const out = new Float32Array(halves.length);
  for (let i = 0; i < halves.length; ++i) out[i] = halfTable[halves[i]];
  return out;
}

// Uint8Array.fromBase64 (Chromium 140 on) decodes a 512-token layer's 8 MB of base64 four times
// as fast as atob and a loop (78 against 319 ms); other browsers and Node take the loop.
function base64Bytes(text) {
  if (Uint8Array.fromBase64) return Uint8Array.fromBase64(text);
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; ++i) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

// {shape, data}: data a Float32Array (any floating dtype) or an Int32Array (DTYPE_INT32).
export function decodeTensor(tensor) {
  const shape = (tensor.shape ?? []).map(Number);
  const bytes = base64Bytes(tensor.data ?? '');
  const count = shape.reduce((a, b) => a * b, 1);
  switch (tensor.dtype) {
    case 'DTYPE_FLOAT16':
      return { shape, data: decodeHalves(new Uint16Array(bytes.buffer, 0, count)) };
    case 'DTYPE_BFLOAT16': {
      // bfloat16 is the upper half of a binary32.
      const halves = new Uint16Array(bytes.buffer, 0, count);
      const words = new Uint32Array(count);
      for (let i = 0; i < count; ++i) words[i] = halves[i] << 16;
      return { shape, data: new Float32Array(words.buffer) };
    }
    case 'DTYPE_INT32':
      return { shape, data: new Int32Array(bytes.buffer, 0, count) };
    default:
      return { shape, data: new Float32Array(bytes.buffer, 0, count) };
  }
}

// The matrix at the given leading indices of a tensor, e.g. matrix(t, layer, head) of
// [layer, head, query, key]: {rows, cols, values} with values a view, not a copy.
export function matrix(tensor, ...leading) {
  const { shape, data } = tensor;
  const rows = shape[shape.length - 2];
  const cols = shape[shape.length - 1];
  let offset = 0;
  leading.forEach((index, axis) => {
    offset = offset * shape[axis] + index;
  });
  offset *= rows * cols;
  return { rows, cols, values: data.subarray(offset, offset + rows * cols) };
}

// dtype for an attention answer of `values` float32 values: float16 when float32 would pass 16 MB
// (the response cap's order of magnitude, and what a browser tab parses without stalling).
export function attentionDtype(values) {
  return values * 4 > 16 << 20 ? 'DTYPE_FLOAT16' : 'DTYPE_FLOAT32';
}
