// Pieces of request bodies and titles shared by the views.

// The text (and text pair) fields of a GetAttention or Tokenize request, cut to the model's
// length when the page's "cut long inputs" is ticked.
export function textRequest({ model, text, pair, truncate }) {
  return {
    model,
    text,
    ...(pair ? { textPair: pair } : {}),
    ...(truncate ? { tokenization: { truncation: 'TRUNCATION_LONGEST_FIRST' } } : {}),
  };
}

// The head selection of a request: one head, or every head's mean or max.
export function headRequest(head) {
  if (head === 'mean') return { headAggregation: 'HEAD_AGGREGATION_MEAN' };
  if (head === 'max') return { headAggregation: 'HEAD_AGGREGATION_MAX' };
  return { heads: [head] };
}

export function headTitle(head) {
  return typeof head === 'number' ? `head ${head}` : `${head} of heads`;
}

// GetAttention of one layer and one head (or the heads' mean or max): the heatmap and compare views.
export function layerHeadRequest(panel, words) {
  return { ...textRequest(panel), layers: [panel.layer], ...headRequest(panel.head), aggregateWords: words };
}

// The page's control for each request field the server's messages name (in backquotes, or before
// the message's first colon), so that a message says what to change on the page.
const CONTROLS = {
  text: 'Text',
  prompt: 'Text',
  text_pair: 'Pair',
  decoder_text: 'Decoder text',
  model: 'Model',
  layers: 'Layer',
  heads: 'Head',
  'window.query_start': 'Window: rows',
  'window.query_end': 'Window: rows',
  'window.key_start': 'Window: columns',
  'window.key_end': 'Window: columns',
  'decoder_window.query_start': 'Window: rows',
  'decoder_window.query_end': 'Window: rows',
  'decoder_window.key_start': 'Window: columns',
  'decoder_window.key_end': 'Window: columns',
  top_k: 'top-k keys',
  max_new_tokens: 'new tokens',
  num_beams: 'beams',
  top_p: 'top-p',
  query: 'Query',
  documents: 'Documents, one per line',
};

export function withControls(message) {
  const named = (field) => `"${CONTROLS[field]}"`;
  return message
    .replace(/^([a-z_.]+):/, (whole, field) => (CONTROLS[field] ? `${named(field)}:` : whole))
    .replace(/`([a-z_.]+)`(?: \/ `([a-z_.]+)`)?/g, (whole, field, second) => {
      if (!CONTROLS[field] || (second && !CONTROLS[second])) return whole;
      return second && CONTROLS[second] !== CONTROLS[field] ? `${named(field)} / ${named(second)}` : named(field);
    });
}
