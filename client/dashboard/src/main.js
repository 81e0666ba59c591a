// The dashboard's shell: the state (in the URL), the common controls, the model picker and its
// information, the view tabs, export, progress and errors. Each view draws itself from the state
// (views/*.js: {id, title, help, controls, render(ctx)}).
import './style.css';
import { ApiError, call, setApiKey, stream } from './api.js';
import { exportPng, exportSvg } from './export.js';
import { TRANSLATION_PRESETS } from './presets.js';
import { textRequest, withControls } from './requests.js';
import { crossAttentionDefaults, defaultState, formatState, parseState } from './state.js';
import { hideTooltip } from './tooltip.js';
import compare from './views/compare.js';
import documents from './views/documents.js';
import generate from './views/generate.js';
import heads from './views/heads.js';
import heatmap from './views/heatmap.js';
import internals from './views/internals.js';
import layers from './views/layers.js';
import model from './views/model.js';
import salience from './views/salience.js';
import temperature from './views/temperature.js';

const VIEWS = [heatmap, heads, model, layers, temperature, generate, documents, salience, compare, internals];

const $ = (id) => document.getElementById(id);
const controls = $('controls').elements;
// Addresses longer than this keep their texts out (the server refuses request URIs over 16 KB, so
// such a link would not load again): the texts stay in the tab's history entry, which a reload
// keeps and a copied link does not, and the address says so with `kept=1`.
const ADDRESS_LIMIT = 8192;
const TEXT_KEYS = ['text', 'pair', 'decoderText', 'query', 'docs'];

function readState() {
  const parsed = parseState(location.search);
  const kept = new URLSearchParams(location.search).get('kept') === '1';
  if (kept && history.state?.kept) return { ...parsed, ...history.state.kept };
  return kept ? { ...parsed, textsLost: true } : parsed;
}

let state = readState();
// A link with a decoder text and no layer or head opens where "Translate first" does; applied once
// the model's decoder depth is known.
let linkNeedsCrossDefaults = state.decoderText !== '';
let models;
let controller;
// The running "Translate first": its source (model and text) and its AbortController.
let translation;
// The last "Translate first" that finished: its source and the decoder text it wrote.
let translated;
let renders = 0;
// New tokens "Translate first" allows: a title or a sentence of the built-in translation model's
// LibreOffice help.
const TRANSLATION_TOKENS = 64;
const tokenizations = new Map();

// What the page itself refuses before asking the server: a hand-edited link's index past the
// decoder's layers or heads, which the views would otherwise draw from another layer's answer.
class PageError extends Error {}

function setStatus(status) {
  document.body.dataset.status = status;
}

function showError(error) {
  const box = $('error');
  box.hidden = !error;
  if (!error) return;
  box.textContent =
    error instanceof PageError
      ? error.message
      : error instanceof ApiError
      ? `${error.method} failed (${error.code}): ${withControls(error.message)}${controlHint(error.message)}`
      : `The attnscope server did not answer (${error.message}). Is attnscope-server still running?`;
}

// The server's messages name the API's fields; this names the page's control that sets them.
function controlHint(message) {
  if (message.includes('tokenization.truncation')) return '\nOn this page: tick "cut long inputs" above.';
  return '';
}

function progress(done, total, text) {
  const box = $('progress');
  box.hidden = done === null;
  if (done === null) return;
  box.querySelector('progress').max = total;
  box.querySelector('progress').value = done;
  box.querySelector('span').textContent = `${done} of ${total}: ${text}`;
}

function update(patch, { quiet = false } = {}) {
  const navigates = patch.view !== undefined && patch.view !== state.view;
  // A text typed since a link lost its own is the one to show.
  state = { ...state, ...patch, textsLost: state.textsLost && !TEXT_KEYS.some((key) => key in patch) };
  let search = formatState(state);
  let entry = null;
  if (search.length > ADDRESS_LIMIT) {
    const kept = Object.fromEntries(TEXT_KEYS.map((key) => [key, state[key]]));
    const defaults = defaultState();
    search = `${formatState({ ...state, ...Object.fromEntries(TEXT_KEYS.map((key) => [key, defaults[key]])) })}&kept=1`;
    entry = { kept };
  }
  const url = `${location.pathname}?${search}`;
  navigates ? history.pushState(entry, '', url) : history.replaceState(entry, '', url);
  if (!quiet) render();
}

function options(select, values, selected) {
  select.replaceChildren(
    ...values.map(([value, text]) => {
      const option = document.createElement('option');
      option.value = String(value);
      option.textContent = text;
      return option;
    }),
  );
  // A value the model does not have (a hand-edited link) stays visible; the server says why it fails.
  if (!values.some(([value]) => String(value) === String(selected))) {
    const option = document.createElement('option');
    option.value = String(selected);
    option.textContent = `${selected} (not available)`;
    select.append(option);
  }
  select.value = String(selected);
}

// The layers and heads the layer and head pickers offer: the decoder's when the view shows an
// encoder-decoder's decoder self- or cross-attention (or its generation).
function layerCounts(view, info, viewState) {
  if (info.isEncoderDecoder && view.usesDecoder?.(viewState)) {
    return { layers: info.decoderLayers, heads: info.decoderAttentionHeads, decoder: true };
  }
  return { layers: info.numHiddenLayers, heads: info.numAttentionHeads, decoder: false };
}

function syncControls(view, info, viewState) {
  for (const name of ['text', 'layer', 'head', 'words']) {
    $(`control-${name}`).hidden = !view.controls.includes(name);
  }
  // An encoder-decoder reads one source text; its second text is the decoder's. A view that sends
  // no pair (Generate's prompt is one text) does not offer one.
  $('control-pair').hidden = Boolean(info.isEncoderDecoder) || view.pair === false;
  $('control-decoder').hidden = !info.isEncoderDecoder || !view.decoderText;
  // Marian's multilingual models read the target language from the source's first token.
  const examples = info.architecture === 'marian' ? TRANSLATION_PRESETS : [];
  $('translation-examples').replaceChildren(
    ...(examples.length ? ['Examples:'] : []),
    ...examples.map((example) => {
      const button = document.createElement('button');
      button.type = 'button';
      button.name = 'translation-example';
      button.textContent = example.name;
      button.title = example.text;
      button.addEventListener('click', () => update({ text: example.text, decoderText: '' }));
      return button;
    }),
  );
  options(controls.model, models.map((m) => [m.name, m.name]), info.name);
  controls.text.value = state.text;
  controls.pair.value = state.pair;
  controls.decoderText.value = state.decoderText;
  controls.truncate.checked = state.truncate;
  const counts = layerCounts(view, info, viewState);
  $('control-layer').firstChild.textContent = `${counts.decoder ? 'Decoder layer' : 'Layer'} `;
  options(controls.layer, [...Array(counts.layers).keys()].map((i) => [i, String(i)]), state.layer);
  options(
    controls.head,
    [['mean', 'mean'], ['max', 'max'], ...[...Array(counts.heads).keys()].map((i) => [i, String(i)])],
    state.head,
  );
  controls.words.checked = state.words;
  for (const tab of $('tabs').querySelectorAll('button')) tab.setAttribute('aria-pressed', String(tab.value === view.id));
  $('view-help').textContent = view.help;
}

function showModelInfo(info) {
  const kind = [
    info.architecture,
    ...(info.isEncoderDecoder
      ? [
          `encoder-decoder: encoder ${info.numHiddenLayers} layers × ${info.numAttentionHeads} heads (bidirectional), decoder ${info.decoderLayers} layers × ${info.decoderAttentionHeads} heads (causal self-attention and cross-attention over the source)`,
        ]
      : [`${info.numHiddenLayers} layers × ${info.numAttentionHeads} heads`]),
    info.numKeyValueHeads !== info.numAttentionHeads ? `${info.numKeyValueHeads} key/value heads` : null,
    `hidden ${info.hiddenSize}`,
    `up to ${info.maxPositionEmbeddings} tokens`,
    `${info.tokenizerKind} tokenizer`,
    info.isEncoderDecoder ? null : info.isCausal ? 'causal (decoder-only)' : 'bidirectional (encoder)',
    info.hasClassifier ? `classifier (${info.labels.join(', ')})` : 'no classifier',
  ];
  $('model-summary').textContent = `${info.name}: ${kind.filter(Boolean).join(', ')}`;
  $('model-normalization').textContent = `Tokenizer: ${info.normalization?.description ?? 'no normalization reported'}.`;
}

// The encoder's layer and head are checked by the server; the decoder's are picked from an answer of
// every layer (views/heatmap.js panelRequest), so an index past them is refused here.
function checkDecoderPicks(view, counts) {
  if (!counts.decoder) return;
  if (view.controls.includes('layer') && !(state.layer >= 0 && state.layer < counts.layers)) {
    throw new PageError(`"Decoder layer" ${state.layer}: expected 0 to ${counts.layers - 1}, the decoder's layers; pick one above.`);
  }
  if (view.controls.includes('head') && typeof state.head === 'number' && !(state.head >= 0 && state.head < counts.heads)) {
    throw new PageError(`"Head" ${state.head}: expected mean, max or 0 to ${counts.heads - 1}, the decoder's heads; pick one above.`);
  }
}

// A translation belongs to the source it was asked for: once the model or the text changed, its
// answer would be read as the translation of another text.
function dropStaleTranslation() {
  if (translation && (translation.name !== (state.model || models[0].name) || translation.text !== state.text)) {
    translation.controller.abort();
  }
}

async function render() {
  dropStaleTranslation();
  controller?.abort();
  controller = new AbortController();
  const { signal } = controller;
  document.body.dataset.render = String(++renders);
  setStatus('loading');
  showError(null);
  progress(null);
  hideTooltip();
  const root = $('view');
  const toolbar = $('view-controls');
  root.replaceChildren();
  toolbar.replaceChildren();
  const view = VIEWS.find((v) => v.id === state.view);
  try {
    models ??= (await call('ListModels', {}, { signal })).models;
    const name = state.model || models[0].name;
    const info = models.find((m) => m.name === name) ?? (await call('GetModelInfo', { model: name }, { signal }));
    if (linkNeedsCrossDefaults && info.isEncoderDecoder) {
      update(crossAttentionDefaults(location.search, info.decoderLayers), { quiet: true });
    }
    linkNeedsCrossDefaults = false;
    // A link's negative layer counts from the last, as the API's layer indices do.
    const counts = layerCounts(view, info, state);
    if (state.layer < 0 && state.layer >= -counts.layers) update({ layer: counts.layers + state.layer }, { quiet: true });
    // A link's pair on an encoder-decoder is left out, not appended to the source.
    const viewState = { ...state, model: name, ...(info.isEncoderDecoder ? { pair: '' } : { decoderText: '' }) };
    syncControls(view, info, viewState);
    showModelInfo(info);
    checkDecoderPicks(view, counts);
    if (state.textsLost) {
      throw new PageError(`This link's texts were too long for an address (over ${ADDRESS_LIMIT} characters) and stayed in the browser tab that made it. Paste yours into "Text".`);
    }
    const tokenKey = JSON.stringify([name, viewState.text, viewState.pair, state.truncate]);
    await view.render({
      root,
      toolbar,
      state: viewState,
      info,
      models,
      // Aborted when a newer render takes over: a view that waits for anything else checks it.
      signal,
      call: (method, body) => call(method, body, { signal }),
      stream: (method, body, onMessage) => stream(method, body, onMessage, { signal }),
      tokenize: () => {
        if (!tokenizations.has(tokenKey)) {
          const request = textRequest(viewState);
          tokenizations.set(tokenKey, call('Tokenize', request, { signal }).catch((error) => {
            tokenizations.delete(tokenKey);
            throw error;
          }));
        }
        return tokenizations.get(tokenKey);
      },
      update,
      progress,
    });
    if (signal.aborted) return;
    progress(null);
    $('api-key').hidden = true;
    setStatus('ready');
  } catch (error) {
    // A newer render took over; its own outcome is what the page shows.
    if (signal.aborted) return;
    progress(null);
    showError(error);
    $('api-key').hidden = !(error instanceof ApiError && error.code === 'unauthenticated');
    // The model picker stays usable, e.g. after a link named a model the server does not have.
    if (models) options(controls.model, models.map((m) => [m.name, m.name]), state.model || models[0].name);
    // The text the link asked for stays for the next try; the controls are otherwise set only
    // once the model is known.
    controls.text.value = state.text;
    setStatus('error');
  }
}

// "Translate first": the model writes the decoder text from the source (Generate, greedy), and the
// view then shows what it read while writing it.
async function translateFirst() {
  const name = state.model || models[0].name;
  // The decoder's positions hold its start token and the new ones.
  const info = models.find((m) => m.name === name);
  const limit = Math.min(TRANSLATION_TOKENS, info.maxPositionEmbeddings - 1);
  // A second press starts over: the source may have changed since the first.
  translation?.controller.abort();
  const current = { name, text: state.text, controller: new AbortController() };
  translation = current;
  const { signal } = current.controller;
  setStatus('loading');
  showError(null);
  try {
    let text = '';
    await stream('Generate', { model: name, prompt: current.text, maxNewTokens: limit }, (message) => {
      if (signal.aborted) return;
      if (message.token) progress((message.token.index ?? 0) + 1, limit, `Generate: ${(text += message.token.text ?? '')}`);
      if (message.done) text = message.done.text ?? '';
    }, { signal });
    if (signal.aborted) return;
    progress(null);
    translated = { text: current.text, decoderText: text.trim() };
    update({ decoderText: translated.decoderText, ...crossAttentionDefaults(location.search, info.decoderLayers) });
  } catch (error) {
    if (signal.aborted) return;
    progress(null);
    showError(error);
    setStatus('error');
  } finally {
    if (translation === current) translation = undefined;
  }
}

function setUp() {
  for (const view of VIEWS) {
    const tab = document.createElement('button');
    tab.type = 'button';
    tab.value = view.id;
    tab.textContent = view.title;
    tab.addEventListener('click', () => update({ view: view.id }));
    $('tabs').append(tab);
  }
  $('controls').addEventListener('submit', (event) => event.preventDefault());
  $('api-key').addEventListener('submit', (event) => {
    event.preventDefault();
    setApiKey($('api-key').elements.key.value);
    models = undefined;
    tokenizations.clear();
    render();
  });
  controls.model.addEventListener('change', () => {
    const info = models.find((m) => m.name === controls.model.value);
    const counts = layerCounts(VIEWS.find((v) => v.id === state.view), info, state);
    const head = typeof state.head === 'number' ? Math.min(state.head, counts.heads - 1) : state.head;
    update({ model: info.name, layer: Math.min(state.layer, counts.layers - 1), head, heads: null });
  });
  // A translation the page wrote is of its source: a new source drops it, as the examples do,
  // rather than show the old translation's cross-attention over the new text.
  controls.text.addEventListener('change', () => {
    const stale = translated && state.decoderText === translated.decoderText && controls.text.value !== translated.text;
    update({ text: controls.text.value, ...(stale ? { decoderText: '' } : {}) });
  });
  controls.pair.addEventListener('change', () => update({ pair: controls.pair.value }));
  controls.decoderText.addEventListener('change', () => update({ decoderText: controls.decoderText.value }));
  controls.truncate.addEventListener('change', () => update({ truncate: controls.truncate.checked }));
  $('translate').addEventListener('click', translateFirst);
  controls.layer.addEventListener('change', () => update({ layer: Number(controls.layer.value) }));
  controls.head.addEventListener('change', () => {
    const value = controls.head.value;
    update({ head: value === 'mean' || value === 'max' ? value : Number(value) });
  });
  controls.words.addEventListener('change', () => update({ words: controls.words.checked }));
  const name = () => `attnscope-${state.view}-${state.model || models?.[0]?.name || 'model'}`;
  $('export-svg').addEventListener('click', () => exportSvg($('view'), name()));
  $('export-png').addEventListener('click', () => exportPng($('view'), name()).catch(showError));
  window.addEventListener('popstate', () => {
    state = readState();
    linkNeedsCrossDefaults = state.decoderText !== '';
    render();
  });
  render();
}

setUp();
