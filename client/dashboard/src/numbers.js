// Number formatting and the temperature view's arithmetic, without the DOM.

// The shortest decimal that reads back as the same float32: what the server sent, exactly, in as
// few digits as possible ("0.25", not "0.25000000372529").
export function formatFloat32(value) {
  if (!Number.isFinite(value)) return String(value);
  const target = Math.fround(value);
  for (let digits = 1; digits < 9; ++digits) {
    const text = target.toPrecision(digits);
    if (Math.fround(Number(text)) === target) return String(Number(text));
  }
  return String(Number(target.toPrecision(9)));
}

// softmax(scores / T) of each row of a rows x cols matrix. With `causal`, keys after the query
// (absolute key position > absolute query position) are masked out, as the causal model's own
// mask does: the scores the server returns are taken before the mask.
export function temperedSoftmax(scores, rows, cols, temperature, { causal = false, window = 0, queryStart = 0, keyStart = 0 } = {}) {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; ++r) {
    const query = queryStart + r;
    const last = causal ? Math.min(cols, query - keyStart + 1) : cols;
    const first = causal && window > 0 ? Math.max(0, query - window + 1 - keyStart) : 0;
    let max = -Infinity;
    for (let c = first; c < last; ++c) max = Math.max(max, scores[r * cols + c] / temperature);
    let sum = 0;
    for (let c = first; c < last; ++c) {
      const e = Math.exp(scores[r * cols + c] / temperature - max);
      out[r * cols + c] = e;
      sum += e;
    }
    for (let c = first; c < last; ++c) out[r * cols + c] /= sum;
  }
  return out;
}

// Shannon entropy in bits of each row's distribution.
export function rowEntropies(probabilities, rows, cols) {
  const out = new Float64Array(rows);
  for (let r = 0; r < rows; ++r) {
    let h = 0;
    for (let c = 0; c < cols; ++c) {
      const p = probabilities[r * cols + c];
      if (p > 0) h -= p * Math.log2(p);
    }
    out[r] = h;
  }
  return out;
}
