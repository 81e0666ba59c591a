// The dashboard's whole state, and its URL form: a link reproduces the view
// (/?model=default&text=...&view=heatmap&layer=3&head=1). Only values that differ from the
// defaults are written.
import { PRESETS } from './presets.js';

// The ids of main.js's views; any other `view` in a link opens the first.
const VIEWS = ['heatmap', 'heads', 'model', 'layers', 'temperature', 'generate', 'documents', 'salience', 'compare', 'internals'];

// An encoder-decoder's three attentions, for the views that draw one of them.
export const BLOCKS = ['cross', 'decoder', 'encoder'];
export const METHODS = ['greedy', 'beam', 'sampling'];

// The second panel of the compare view; null follows the first panel. `block` is an
// encoder-decoder's attention, b.attn in links as `attn` is the first panel's.
const COMPARE_KEYS = ['model', 'text', 'pair', 'layer', 'head', 'block'];
const compareParam = (key) => `b.${key === 'block' ? 'attn' : key}`;

const INT32_MAX = 2 ** 31 - 1;
const MAX_ZOOM = 16;

export function defaultState() {
  return {
    view: 'heatmap',
    model: '', // empty: the server's first model
    text: 'Tôi yêu Việt Nam quá',
    pair: '',
    // An encoder-decoder's target text, read teacher-forced by the decoder (GetAttention's
    // decoder_text), and which of its attentions a heatmap shows.
    decoderText: '',
    block: 'cross',
    // Cut inputs longer than the model takes (TRUNCATION_LONGEST_FIRST) instead of refusing them.
    truncate: false,
    // Heatmap magnification over the window's width; 1 fits the figure to the window.
    zoom: 1,
    // Heatmap: positions of tokens replaced by the mask token (exBERT's masking).
    masked: [],
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
    ab: '', // head view's sentence filter for a pair: '', 'AA', 'AB', 'BA' or 'BB'
    min: 0, // head view's threshold: lines of smaller weight are hidden
    query: PRESETS[0].query,
    docs: PRESETS[0].docs,
    d2q: false,
    // Generate view: decoding method and options (GenerateRequest).
    method: 'greedy',
    max: 20,
    beams: 4,
    temp: 1,
    topp: 1,
    seed: 0,
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
  if (has('decoder_text')) state.decoderText = params.get('decoder_text');
  if (BLOCKS.includes(params.get('attn'))) state.block = params.get('attn');
  if (METHODS.includes(params.get('method'))) state.method = params.get('method');
  state.truncate = params.get('truncate') === '1';
  state.words = params.get('words') === '1';
  for (const key of ['zoom', 'max', 'beams', 'seed']) {
    if (has(key)) state[key] = Math.max(key === 'seed' ? 0 : 1, integer(params.get(key)) ?? state[key]);
  }
  // Within the request's int32 fields, so that a larger number is refused by the server's limit,
  // which names its control, rather than by the JSON parser.
  for (const key of ['max', 'beams']) state[key] = Math.min(INT32_MAX, state[key]);
  // The page's own zoom choices end at 16; a larger one would make a figure wider than a browser
  // can scroll.
  state.zoom = Math.min(MAX_ZOOM, state.zoom);
  for (const key of ['layer', 'head']) {
    if (typeof state[key] === 'number') state[key] = Math.max(-INT32_MAX, Math.min(INT32_MAX, state[key]));
  }
  for (const key of ['temp', 'topp']) {
    const value = Number(params.get(key));
    if (has(key) && value > 0) state[key] = value;
  }
  state.d2q = params.get('d2q') === '1';
  if (has('t')) {
    const t = Number(params.get('t'));
    if (t > 0) state.t = t;
  }
  for (const key of ['topk', 'qs', 'qe', 'ks', 'ke']) if (has(key)) state[key] = integer(params.get(key));
  if (['AA', 'AB', 'BA', 'BB'].includes(params.get('ab'))) state.ab = params.get('ab');
  if (has('min')) {
    const min = Number(params.get('min'));
    if (min >= 0 && min <= 1) state.min = min;
  }
  if (has('mask')) state.masked = params.get('mask').split(',').map(integer).filter((i) => i !== null);
  if (has('heads')) state.heads = params.get('heads').split(',').filter(Boolean).map(Number);
  if (has('doc')) state.docs = params.getAll('doc');
  for (const key of COMPARE_KEYS) {
    if (!has(compareParam(key))) continue;
    const text = params.get(compareParam(key));
    if (key === 'block' && !BLOCKS.includes(text)) continue;
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
  put('decoder_text', state.decoderText, defaults.decoderText);
  put('attn', state.block, defaults.block);
  if (state.truncate) params.set('truncate', '1');
  put('zoom', state.zoom, defaults.zoom);
  if (state.masked.length) params.set('mask', state.masked.join(','));
  put('layer', state.layer, defaults.layer);
  put('head', state.head, defaults.head);
  if (state.words) params.set('words', '1');
  put('t', state.t, defaults.t);
  for (const key of ['topk', 'qs', 'qe', 'ks', 'ke']) put(key, state[key], null);
  if (state.heads) params.set('heads', state.heads.join(','));
  put('ab', state.ab, defaults.ab);
  put('min', state.min, defaults.min);
  put('query', state.query, defaults.query);
  if (state.docs.join('\n') !== defaults.docs.join('\n')) for (const doc of state.docs) params.append('doc', doc);
  if (state.d2q) params.set('d2q', '1');
  for (const key of ['method', 'max', 'beams', 'temp', 'topp', 'seed']) put(key, state[key], defaults[key]);
  for (const key of COMPARE_KEYS) put(compareParam(key), state.b[key], null);
  return params.toString();
}

// The layer and head cross-attention opens on after "Translate first" or from a translation,
// those the CLI and the demo show: the decoder's last layer and the mean of its heads, unless the
// link (`search`) names its own.
export function crossAttentionDefaults(search, decoderLayers) {
  const params = new URLSearchParams(search);
  return {
    ...(params.has('layer') ? {} : { layer: decoderLayers - 1 }),
    ...(params.has('head') ? {} : { head: 'mean' }),
  };
}
