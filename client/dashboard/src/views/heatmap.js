// One layer and one head (or the heads' mean or max) as a heatmap, tokens or words on both axes;
// for an encoder-decoder with a decoder text, its encoder self-, decoder self- or cross-attention
// (target tokens down, source tokens across).
import * as d3 from 'd3';
import { fit, labelled, newFigure, note, numberInput, scrollBox } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawColorBar, drawHeatmap, rowHeightFor, sequentialScale, stickLabels } from '../heatmap.js';
import { axisLabels, cutAt, maskablePosition, maskedTexts, secondTextStart, tokenLabels } from '../labels.js';
import { keyMask, slidingWindow } from '../masks.js';
import { formatFloat32 } from '../numbers.js';
import { headRequest, headTitle, textRequest } from '../requests.js';
import { decodeTensor, matrix } from '../tensor.js';

export const BLOCK_TITLES = {
  encoder: 'encoder self-attention',
  decoder: 'decoder self-attention',
  cross: 'cross-attention',
};

// Which attention an encoder-decoder's panel shows: none but the encoder's without a decoder text.
export function blockOf(state, info) {
  return info.isEncoderDecoder && state.decoderText ? state.block : 'encoder';
}

// GetAttention for one (layer, head) panel. `layers` and `heads` select the encoder's and the
// decoder's alike, so an index only one side has (T5's third decoder layer over two encoder
// layers) is asked for as every layer or head, and picked from the answer (pickMatrix).
export function panelRequest(panel, info, words) {
  const request = { ...textRequest(panel), aggregateWords: words };
  const window = (qs, qe, ks, ke) => ({ queryStart: qs ?? 0, queryEnd: qe ?? 0, keyStart: ks ?? 0, keyEnd: ke ?? 0 });
  const block = blockOf(panel, info);
  if (block === 'encoder') request.window = window(panel.qs, panel.qe, panel.ks, panel.ke);
  if (!info.isEncoderDecoder || !panel.decoderText) {
    return { ...request, layers: [panel.layer], ...headRequest(panel.head) };
  }
  const layers = Math.min(info.numHiddenLayers, info.decoderLayers);
  const heads = Math.min(info.numAttentionHeads, info.decoderAttentionHeads);
  if (block === 'cross') {
    request.decoderWindow = window(panel.qs, panel.qe, 0, 0);
    request.window = window(0, 0, panel.ks, panel.ke);
  } else if (block === 'decoder') {
    request.decoderWindow = window(panel.qs, panel.qe, panel.ks, panel.ke);
  }
  return {
    ...request,
    aggregateWords: false,
    decoderText: panel.decoderText,
    layers: panel.layer < layers ? [panel.layer] : [],
    ...(typeof panel.head === 'number' && panel.head >= heads ? {} : headRequest(panel.head)),
  };
}

// The [query, key] matrix of (layer, head) in a [layer, head, query, key] tensor whose axes list
// `layers` and `heads`; an aggregated head is the tensor's only one.
function pickMatrix(tensor, layers, heads, layer, head) {
  const decoded = decodeTensor(tensor);
  const h = typeof head === 'number' && decoded.shape[1] > 1 ? heads.indexOf(head) : 0;
  return matrix(decoded, Math.max(0, layers.indexOf(layer)), h);
}

// What one panel draws from an answer: the matrix, its axes (labels and tokens), where the
// window starts, which keys are masked (after the query in a causal model, outside a layer's
// sliding window), and the pair's divider.
export function attentionBlock(answer, panel, info) {
  const block = blockOf(panel, info);
  if (block === 'encoder') {
    const labels = axisLabels(answer);
    const tokens = answer.words?.length ? null : answer.tokens.tokens;
    const second = secondTextStart(answer);
    const layer = answer.layers[0] ?? panel.layer;
    return {
      block,
      layer,
      ...pickMatrix(answer.attentions, answer.layers, answer.heads, panel.layer, panel.head),
      rowLabels: labels.slice(answer.queryStart),
      colLabels: labels.slice(answer.keyStart),
      rowTokens: tokens?.slice(answer.queryStart),
      colTokens: tokens?.slice(answer.keyStart),
      queryStart: answer.queryStart,
      keyStart: answer.keyStart,
      causal: info.isCausal,
      window: slidingWindow(info, layer),
      words: Boolean(answer.words?.length),
      dividers: second > 0 ? { row: second - answer.queryStart, col: second - answer.keyStart } : null,
    };
  }
  // Decoder rows are labelled with what each position writes (decoder_labels); its self-attention's
  // columns with what each position reads (decoder_tokens).
  const queryStart = answer.decoderQueryStart ?? 0;
  const writes = tokenLabels(answer.decoderLabels).slice(queryStart);
  const writesTokens = answer.decoderLabels.tokens.slice(queryStart);
  const picked = pickMatrix(
    block === 'cross' ? answer.crossAttentions : answer.decoderAttentions,
    answer.decoderLayers,
    answer.decoderHeads,
    panel.layer,
    panel.head,
  );
  if (block === 'cross') {
    return {
      block,
      layer: panel.layer,
      ...picked,
      rowLabels: writes,
      colLabels: tokenLabels(answer.tokens).slice(answer.keyStart),
      rowTokens: writesTokens,
      colTokens: answer.tokens.tokens.slice(answer.keyStart),
      queryStart,
      keyStart: answer.keyStart,
      causal: false,
    };
  }
  const keyStart = answer.decoderKeyStart ?? 0;
  return {
    block,
    layer: panel.layer,
    ...picked,
    rowLabels: writes,
    colLabels: tokenLabels(answer.decoderTokens).slice(keyStart),
    rowTokens: writesTokens,
    colTokens: answer.decoderTokens.tokens.slice(keyStart),
    queryStart,
    keyStart,
    causal: true,
  };
}

// The heatmap's cell size: the window's width (times `zoom`) shared among the columns, at most
// `max` pixels a cell before zooming.
export function fittedCell(container, rows, cols, { zoom = 1, max = 40, reserve = 260 } = {}) {
  const width = Math.max(400, (container.clientWidth || 1000) - reserve);
  return cellSize(rows, cols, width * zoom, max * zoom);
}

// Heatmap of one panel's answer, coloured by `color` or else from 0 to its largest value; shared
// by the heatmap and compare views.
export function attentionFigure(parent, answer, { panel, info, color, cellFor = cellSize }) {
  const part = attentionBlock(answer, panel, info);
  const { rows, cols, values } = part;
  const rowLabels = part.rowLabels.slice(0, rows);
  const colLabels = part.colLabels.slice(0, cols);
  const scale = color ?? sequentialScale(d3.max(values));
  const title = [
    answer.model,
    ...(info.isEncoderDecoder ? [BLOCK_TITLES[part.block]] : []),
    `${info.isEncoderDecoder && part.block !== 'encoder' ? 'decoder ' : ''}layer ${part.layer}`,
    headTitle(panel.head),
  ].join(' · ');
  const cell = cellFor(rows, cols);
  const map = drawHeatmap(parent, {
    values,
    rows,
    cols,
    rowLabels,
    colLabels,
    color: scale,
    cell,
    // A translation's few rows over a long source: rows tall enough to read.
    rowHeight: part.block === 'cross' ? rowHeightFor(rows, cell) : cell,
    title,
    asImage: rows * cols > CELL_ELEMENT_LIMIT,
    masked: keyMask(part),
    dividers: part.dividers,
    describe: (r, c, v) => [
      `${rowLabels[r]} → ${colLabels[c]}`,
      // What the model saw, where normalisation made it differ from the text ("ᄅ" for "랭").
      ...(part.rowTokens ? [`tokens ${part.rowTokens[r]} → ${part.colTokens[c]}`] : []),
      `query ${part.queryStart + r}, key ${part.keyStart + c}: ${formatFloat32(v)}`,
    ],
  });
  map.g.attr('data-layer', part.layer).attr('data-head', panel.head).attr('data-block', part.block);
  return { ...map, color: scale, part };
}

// Says, in a view that draws an encoder-decoder's encoder only, where its decoder's attentions are:
// the decoder text field is hidden there, and the view would otherwise look like it read it.
export function encoderOnlyNote(ctx) {
  if (!ctx.info.isEncoderDecoder) return;
  note(ctx.root, `${ctx.info.name} is an encoder-decoder: this view shows its encoder's self-attention over the source. Its decoder's self-attention and cross-attention are in Heatmap, Head view, Model view and Compare.`);
}

// The picker of an encoder-decoder's attention, for the views that draw one of the three.
export function blockControl(ctx) {
  const { state, info } = ctx;
  if (!info.isEncoderDecoder) return;
  const block = document.createElement('select');
  block.name = 'attn';
  for (const [value, text] of Object.entries(BLOCK_TITLES)) block.append(new Option(text, value));
  block.value = blockOf(state, info);
  block.disabled = !state.decoderText;
  block.addEventListener('change', () => ctx.update({ block: block.value }));
  labelled(ctx.toolbar, 'Attention', block);
  if (!state.decoderText) {
    note(ctx.root, `${info.name} is an encoder-decoder: this is its encoder's self-attention over the source. Type a decoder text, or press "Translate first", to see the decoder's self-attention and its cross-attention over the source.`);
  }
}

function toolbar(ctx) {
  const { state } = ctx;
  blockControl(ctx);
  const zoom = document.createElement('select');
  zoom.name = 'zoom';
  for (const factor of [1, 2, 4, 8, 16]) zoom.append(new Option(factor === 1 ? 'fit the window' : `× ${factor}`, String(factor)));
  zoom.value = String(state.zoom);
  zoom.addEventListener('change', () => ctx.update({ zoom: Number(zoom.value) }));
  labelled(ctx.toolbar, 'Zoom', zoom);
  windowControl(ctx);
}

// A view's window of positions: rows (queries) from qs to qe and, unless `rowsOnly`, columns
// (keys) from ks to ke; empty is all.
export function windowControl(ctx, { rowsOnly = false } = {}) {
  const { state } = ctx;
  const input = (key) => {
    const field = numberInput(state[key], { placeholder: 'all' });
    field.name = key;
    field.addEventListener('change', () => ctx.update({ [key]: field.value === '' ? null : Number(field.value) }));
    return field;
  };
  const range = document.createElement('label');
  range.append('Window: rows', input('qs'), '–', input('qe'));
  if (!rowsOnly) range.append('columns', input('ks'), '–', input('ke'));
  ctx.toolbar.append(range);
}

// The request's window of the state's positions (0 ends are the input's end).
export function windowOf(state, { rowsOnly = false } = {}) {
  return { queryStart: state.qs ?? 0, queryEnd: state.qe ?? 0, keyStart: rowsOnly ? 0 : state.ks ?? 0, keyEnd: rowsOnly ? 0 : state.ke ?? 0 };
}

// A note when the tokenizer cut the text (or the pair) to the model's length.
export function cutNote(root, tokens, state, info) {
  for (const [sequence, text, name] of [[0, state.text, 'text'], [1, state.pair, 'pair']]) {
    if (!text) continue;
    const at = cutAt(tokens, text, sequence);
    if (at === null) continue;
    const rest = [...text].slice(at).join('');
    note(
      root,
      `The ${name} was cut to fit the model (at most ${info.maxPositionEmbeddings} tokens): the figure ends before “${rest.slice(0, 40)}${rest.length > 40 ? '…' : ''}” (${[...rest].length} characters left out).`,
    ).classList.add('cut');
  }
}

// The mask token of the families whose tokenizers read it in text (exBERT's masking).
const MASK_TOKENS = { bert: '[MASK]', distilbert: '[MASK]', roberta: '<mask>' };

// Masking: a click on a row label replaces that token by the mask token and draws the attention
// of the text so changed; a note says what was sent, and undoes it.
async function masking(ctx) {
  const { state, info } = ctx;
  const mask = MASK_TOKENS[info.architecture];
  if (!mask || !state.masked.length) return { panel: state, mask };
  const tokens = (await ctx.tokenize()).tokens;
  const panel = { ...state, ...maskedTexts(tokens, state, state.masked, mask) };
  const used = state.masked.filter((i) => maskablePosition(tokens, i));
  const left = state.masked.filter((i) => !maskablePosition(tokens, i));
  const p = note(
    ctx.root,
    `Masked (as exBERT does): ${used.length ? `${used.length === 1 ? 'token' : 'tokens'} ${used.join(', ')} replaced by ${mask}` : 'nothing'}${left.length ? ` (${left.join(', ')}: not a token of this text that can be masked, left out)` : ''}; the model read “${panel.text}”${panel.pair ? ` and “${panel.pair}”` : ''}. `,
  );
  p.classList.add('masked');
  const clear = document.createElement('button');
  clear.type = 'button';
  clear.name = 'unmask';
  clear.textContent = 'Unmask all';
  clear.addEventListener('click', () => ctx.update({ masked: [] }));
  p.append(clear);
  return { panel, mask };
}

export default {
  id: 'heatmap',
  title: 'Heatmap',
  help: 'Attention of one layer and head (or the mean or max of the heads): each row is a query token, its cells how much it attends to each key token; grey cells are hidden by a causal mask or a sliding window. Hover a cell for its value and its labels; "words" sums a word\'s tokens; click a row\'s label to mask that token (BERT, RoBERTa). For an encoder-decoder, give a decoder text (or press "Translate first") to see the cross-attention: target tokens down, source tokens across.',
  controls: ['text', 'layer', 'head', 'words'],
  // Takes an encoder-decoder's decoder text; draws the decoder's layers unless the encoder's.
  decoderText: true,
  usesDecoder: (state) => Boolean(state.decoderText) && state.block !== 'encoder',
  async render(ctx) {
    const { state, info } = ctx;
    toolbar(ctx);
    if (info.isEncoderDecoder && state.decoderText && state.words) {
      note(ctx.root, 'Words: not available with a decoder text; tokens are shown.');
    }
    const { panel, mask } = await masking(ctx);
    const answer = await ctx.call('GetAttention', panelRequest(panel, info, state.words));
    if (state.truncate) cutNote(ctx.root, answer.tokens, panel, info);
    const box = scrollBox(ctx.root);
    const svg = newFigure(box, 'heatmap');
    const cellFor = (rows, cols) => fittedCell(ctx.root, rows, cols, { zoom: state.zoom });
    const map = attentionFigure(svg, answer, { panel, info, cellFor });
    stickLabels(box, map);
    if (mask && !state.words) {
      map.g
        .selectAll('text.row-label')
        .classed('maskable', true)
        .on('click', function () {
          const position = answer.queryStart + Number(this.dataset.index);
          const masked = state.masked.includes(position) ? state.masked.filter((i) => i !== position) : [...state.masked, position].sort((a, b) => a - b);
          ctx.update({ masked });
        });
    }
    const barWidth = drawColorBar(svg, map.color, {
      x: map.cellsRight + 16,
      y: map.top,
      height: Math.max(120, Math.min(600, map.height - map.top)),
      label: 'attention',
    });
    fit(svg, Math.max(map.width + 8, map.cellsRight + 16 + barWidth), Math.max(map.height, map.top + 120) + 4);
  },
};
