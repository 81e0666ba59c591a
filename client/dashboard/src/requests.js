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
