// The dashboard's whole state, and its URL form: a link reproduces the view
// (/?model=default&text=...&view=heatmap&layer=3&head=1). Only values that differ from the
// defaults are written.
import { PRESETS } from './presets.js';

// The ids of main.js's views; any other `view` in a link opens the first.
const VIEWS = ['heatmap', 'heads', 'model', 'layers', 'temperature', 'documents', 'compare', 'internals'];

// The second panel of the compare view; null follows the first panel.
const COMPARE_KEYS = ['model', 'text', 'pair', 'layer', 'head'];

export function defaultState() {
  return {
    view: 'heatmap',
    model: '', // empty: the server's first model
    text: 'Tôi yêu Việt Nam quá',
    pair: '',
    layer: 0,
    head: 0, // a head index, 'mean' or 'max'
    words: false,
    t: 1,
    // Head view: top-k keys per query and a window of [start, end) positions; null is automatic.
    topk: null,
    qs: null,
    qe: null,
    ks: null,
    ke: null,
    heads: null, // head view's shown heads; null = all
    query: PRESETS[0].query,
    docs: PRESETS[0].docs,
    d2q: false,
    b: Object.fromEntries(COMPARE_KEYS.map((k) => [k, null])),
  };
}

function integer(text) {
  const value = Number.parseInt(text, 10);
  return Number.isFinite(value) ? value : null;
}

function head(text) {
  return text === 'mean' || text === 'max' ? text : integer(text);
}

export function parseState(search) {
  const params = new URLSearchParams(search);
  const state = defaultState();
  const has = (key) => params.has(key);
  if (VIEWS.includes(params.get('view'))) state.view = params.get('view');
  for (const key of ['model', 'text', 'pair', 'query']) if (has(key)) state[key] = params.get(key);
  if (has('layer')) state.layer = integer(params.get('layer')) ?? state.layer;
  if (has('head')) state.head = head(params.get('head')) ?? state.head;
  state.words = params.get('words') === '1';
  state.d2q = params.get('d2q') === '1';
  if (has('t')) {
    const t = Number(params.get('t'));
    if (t > 0) state.t = t;
  }
  for (const key of ['topk', 'qs', 'qe', 'ks', 'ke']) if (has(key)) state[key] = integer(params.get(key));
  if (has('heads')) state.heads = params.get('heads').split(',').filter(Boolean).map(Number);
  if (has('doc')) state.docs = params.getAll('doc');
  for (const key of COMPARE_KEYS) {
    if (!has(`b.${key}`)) continue;
    const text = params.get(`b.${key}`);
    state.b[key] = key === 'layer' ? integer(text) : key === 'head' ? head(text) : text;
  }
  return state;
}

export function formatState(state) {
  const defaults = defaultState();
  const params = new URLSearchParams();
  const put = (key, value, fallback) => {
    if (value !== null && value !== undefined && String(value) !== String(fallback)) params.set(key, String(value));
  };
  put('view', state.view, defaults.view);
  put('model', state.model, defaults.model);
  put('text', state.text, defaults.text);
  put('pair', state.pair, defaults.pair);
  put('layer', state.layer, defaults.layer);
  put('head', state.head, defaults.head);
  if (state.words) params.set('words', '1');
  put('t', state.t, defaults.t);
  for (const key of ['topk', 'qs', 'qe', 'ks', 'ke']) put(key, state[key], null);
  if (state.heads) params.set('heads', state.heads.join(','));
  put('query', state.query, defaults.query);
  if (state.docs.join('\n') !== defaults.docs.join('\n')) for (const doc of state.docs) params.append('doc', doc);
  if (state.d2q) params.set('d2q', '1');
  for (const key of COMPARE_KEYS) put(`b.${key}`, state.b[key], null);
  return params.toString();
}
