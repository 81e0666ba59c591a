// Which keys a model hides from each query, as the server's attention has them (probability
// exactly 0): in a causal model the keys after the query, and in a layer with a sliding window
// (ModelInfo.layer_sliding_windows: Mistral, Gemma 2 and 3, Phi-3, Qwen2 with use_sliding_window)
// the keys `window` or more positions before it (transformers' sliding_window: query q sees key k
// when q - window < k <= q).

// The window of `layer`, 0 for none; an encoder-decoder's or a bidirectional encoder's layers have
// none.
export function slidingWindow(info, layer) {
  return Number(info?.layerSlidingWindows?.[layer] ?? 0);
}

// masked(r, c) for a matrix whose row r is query queryStart + r and column c key keyStart + c:
// why the key is hidden from the query (a tooltip line), or null when it is visible. null for the
// whole matrix when nothing is hidden (not causal). A words matrix (`words`: rows and columns are
// words, a window may cut one) is masked only causally.
export function keyMask({ causal, window = 0, layer, queryStart = 0, keyStart = 0, words = false }) {
  if (!causal) return null;
  const span = words ? 0 : window;
  return (r, c) => {
    const query = queryStart + r;
    const key = keyStart + c;
    if (key > query) return 'masked: the causal mask hides keys after the query';
    if (span > 0 && query - key >= span) {
      return `masked: layer ${layer}'s sliding window shows each query its last ${span} keys`;
    }
    return null;
  };
}
