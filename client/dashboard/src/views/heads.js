// The head view, as bertviz draws it: each query token on the left joined to the key tokens on
// the right it attends to, one colour per head, line opacity the attention weight; for an
// encoder-decoder, the decoder's tokens on the left and the source's (cross-attention) or its own
// (self-attention) on the right. Long inputs are shown through a window of positions and each
// query's top-k keys, so that the figure keeps to a few thousand lines. As in bertviz, a pair's
// lines can be kept to sentence A or B on either side, and lines under a threshold hidden; beside
// each key, the attention it receives from the lines shown.
import * as d3 from 'd3';
import { fit, labelled, newFigure, note, numberInput, textWidth } from '../figure.js';
import { axisLabels, secondTextStart, tokenLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { textRequest } from '../requests.js';
import { decodeTensor } from '../tensor.js';
import { hideTooltip, showTooltip } from '../tooltip.js';
import { BLOCK_TITLES, blockControl, blockOf } from './heatmap.js';

// Inputs longer than this get a window of this many positions and top-k 4 unless the URL says
// otherwise: 12 heads x 64 x 4 lines.
const LONG = 64;

function headColors(count) {
  return count <= 10 ? d3.schemeTableau10.slice(0, count) : d3.quantize(d3.interpolateSinebow, count + 1).slice(0, count);
}

// Top-k and the window, drawn before the request: when the server refuses their values, the
// controls that fix them stay on the page.
function requestControls(ctx) {
  const { state } = ctx;
  const input = (key) => {
    const field = numberInput(state[key], { placeholder: 'auto' });
    field.name = key;
    field.addEventListener('change', () => ctx.update({ [key]: field.value === '' ? null : Number(field.value) }));
    return field;
  };
  labelled(ctx.toolbar, 'top-k keys (0 = all)', input('topk'));
  // Named as the heatmap's window, whose names the server's messages are given (requests.js).
  const range = document.createElement('label');
  range.append('Window: rows (queries)', input('qs'), '–', input('qe'), 'columns (keys)', input('ks'), '–', input('ke'));
  ctx.toolbar.append(range);
}

function toolbar(ctx, heads, colors, shown, filters, refresh, pair) {
  const { state } = ctx;
  const box = document.createElement('span');
  box.className = 'head-checkboxes';
  heads.forEach((head, i) => {
    const input = document.createElement('input');
    input.type = 'checkbox';
    input.value = String(head);
    input.checked = shown.has(head);
    input.addEventListener('change', () => {
      input.checked ? shown.add(head) : shown.delete(head);
      refresh();
      const all = shown.size === heads.length;
      ctx.update({ heads: all ? null : heads.filter((h) => shown.has(h)) }, { quiet: true });
    });
    const label = document.createElement('label');
    label.style.setProperty('--swatch', colors[i]);
    label.append(input, `head ${head}`);
    box.append(label);
  });
  ctx.toolbar.append(box);
  if (pair) {
    const sentences = document.createElement('select');
    sentences.name = 'ab';
    for (const [value, text] of SENTENCES) sentences.append(new Option(text, value));
    sentences.value = state.ab;
    sentences.addEventListener('change', () => {
      filters.ab = sentences.value;
      ctx.update({ ab: sentences.value }, { quiet: true });
      refresh();
    });
    labelled(ctx.toolbar, 'Sentences', sentences);
  }
  const threshold = document.createElement('input');
  threshold.type = 'range';
  threshold.name = 'min';
  threshold.min = '0';
  threshold.max = '1';
  threshold.step = '0.01';
  threshold.value = String(state.min);
  const readout = document.createElement('output');
  readout.value = `≥ ${state.min.toFixed(2)}`;
  threshold.addEventListener('input', () => {
    readout.value = `≥ ${threshold.valueAsNumber.toFixed(2)}`;
    filters.min = threshold.valueAsNumber;
    ctx.update({ min: threshold.valueAsNumber }, { quiet: true });
    refresh();
  });
  labelled(ctx.toolbar, 'lines of weight', threshold);
  ctx.toolbar.append(readout);
}

// bertviz's sentence filter: which of a pair's sentences (A before the second text starts, B
// from there) the left and right sides keep.
const SENTENCES = [
  ['', 'all'],
  ['AA', 'A → A'],
  ['AB', 'A → B'],
  ['BA', 'B → A'],
  ['BB', 'B → B'],
];

// GetAttention of one layer, every head, for the head view's side of the answer. `sourceCount`
// and `decoderCount` are the lengths of the encoder's and the decoder's sequences (decoderCount 0
// without a decoder text): each side is windowed to LONG positions when longer, and top-k applies
// to every block of the answer, so it is only asked for when each block's rows hold that many keys.
// `long`: the drawn block is windowed.
function headRequest(state, info, sourceCount, decoderCount) {
  // An end left to the page on a long side: LONG positions from the start, within the sequence.
  const end = (start, given, count) => given ?? (count > LONG ? Math.min((start ?? 0) + LONG, count) : 0);
  const window = (qs, qe, ks, ke, queries, keys) => ({
    queryStart: qs ?? 0,
    queryEnd: end(qs, qe, queries),
    keyStart: ks ?? 0,
    keyEnd: end(ks, ke, keys),
  });
  // Keys a row of a block holds after its window (of `count` positions; none: all of them).
  const keysIn = (w, count) => (w ? (w.keyEnd || count) - w.keyStart : count);
  const sourceLong = sourceCount > LONG;
  const decoderLong = decoderCount > LONG;
  const block = blockOf(state, info);
  const auto = (long, rowKeys) => state.topk ?? (long && rowKeys >= 4 ? 4 : 0);
  const request = { ...textRequest(state), layers: [state.layer], aggregateWords: state.words };
  // The encoder's attention does not depend on the decoder text: asked for without it.
  if (block === 'encoder') {
    request.window = window(state.qs, state.qe, state.ks, state.ke, sourceCount, sourceCount);
    request.topK = auto(sourceLong, keysIn(request.window, sourceCount));
    return { request, topK: request.topK, long: sourceLong };
  }
  let long;
  if (block === 'cross') {
    request.decoderWindow = window(state.qs, state.qe, 0, 0, decoderCount, 0);
    request.window = window(0, 0, state.ks, state.ke, 0, sourceCount);
    long = decoderLong || sourceLong;
  } else {
    request.decoderWindow = window(state.qs, state.qe, state.ks, state.ke, decoderCount, decoderCount);
    long = decoderLong;
  }
  request.topK = auto(long, Math.min(keysIn(request.window, sourceCount), keysIn(request.decoderWindow, decoderCount)));
  // The layer index selects the encoder's and the decoder's alike: one only the decoder has is
  // asked for as every layer (see panelRequest).
  const layers = state.layer < Math.min(info.numHiddenLayers, info.decoderLayers) ? [state.layer] : [];
  return { request: { ...request, aggregateWords: false, decoderText: state.decoderText, layers }, topK: request.topK, long };
}

// The decoder's length for `state`'s decoder text: the answer's decoder tokens of one head of the
// first layer (the dashboard's tokenizer call reads the source only).
async function decoderCountOf(ctx) {
  const { state } = ctx;
  const answer = await ctx.call('GetAttention', { ...textRequest(state), decoderText: state.decoderText, layers: [0], heads: [0], dtype: 'DTYPE_FLOAT16' });
  return answer.decoderTokens.tokens.length;
}

// The side of the answer the head view draws: its tensor at the chosen layer, the top-k indices,
// the heads, where the windows start and every position's label on each side.
function sideOf(answer, state, info) {
  const block = blockOf(state, info);
  const pick = (tensor, indices, layers) => {
    const decoded = decodeTensor(tensor);
    const [, heads, queries, columns] = decoded.shape;
    const size = heads * queries * columns;
    const offset = Math.max(0, layers.indexOf(state.layer)) * size;
    return {
      shape: [heads, queries, columns],
      data: decoded.data.subarray(offset, offset + size),
      indices: indices ? decodeTensor(indices).data.subarray(offset, offset + size) : null,
    };
  };
  if (block === 'encoder') {
    const labels = axisLabels(answer);
    return {
      ...pick(answer.attentions, answer.topKIndices, answer.layers),
      heads: answer.heads,
      layer: answer.layers[Math.max(0, answer.layers.indexOf(state.layer))],
      queryStart: answer.queryStart,
      keyStart: answer.keyStart,
      queryLabels: labels,
      keyLabels: labels,
      second: secondTextStart(answer),
    };
  }
  const writes = tokenLabels(answer.decoderLabels);
  const cross = block === 'cross';
  return {
    ...pick(
      cross ? answer.crossAttentions : answer.decoderAttentions,
      cross ? answer.crossTopKIndices : answer.decoderTopKIndices,
      answer.decoderLayers,
    ),
    heads: answer.decoderHeads,
    layer: state.layer,
    queryStart: answer.decoderQueryStart ?? 0,
    keyStart: cross ? answer.keyStart : answer.decoderKeyStart ?? 0,
    queryLabels: writes,
    keyLabels: cross ? tokenLabels(answer.tokens) : tokenLabels(answer.decoderTokens),
    second: -1,
  };
}

export default {
  id: 'heads',
  title: 'Head view',
  help: 'Lines from each token (left) to the tokens it attends to (right), one colour per head; hover a token to see only its lines, tick heads on or off, keep a pair\'s sentences or lines above a weight. Beside each key: the attention it receives from the lines shown, averaged over the heads shown. For an encoder-decoder with a decoder text: the decoder\'s tokens on the left, the source\'s (cross-attention) on the right.',
  controls: ['text', 'layer', 'words'],
  // Takes an encoder-decoder's decoder text; draws the decoder's layers unless the encoder's.
  decoderText: true,
  usesDecoder: (state) => Boolean(state.decoderText) && state.block !== 'encoder',
  async render(ctx) {
    const { state, info } = ctx;
    blockControl(ctx);
    requestControls(ctx);
    const count = (await ctx.tokenize()).tokens.tokens.length;
    const decoderCount = blockOf(state, info) === 'encoder' ? 0 : await decoderCountOf(ctx);
    const { request, topK, long } = headRequest(state, info, count, decoderCount);
    const answer = await ctx.call('GetAttention', request);
    const side = sideOf(answer, state, info);
    const [headCount, queries, columns] = side.shape;
    // With top-k the columns are each query's k best keys: the key window says where keys end.
    const windowKeyEnd = (blockOf(state, info) === 'decoder' ? request.decoderWindow : request.window).keyEnd;
    const keyEnd = side.indices ? Math.min(side.keyLabels.length, windowKeyEnd || side.keyLabels.length) : side.keyStart + columns;
    const queryLabels = side.queryLabels.slice(side.queryStart, side.queryStart + queries);
    const keyLabels = side.keyLabels.slice(side.keyStart, keyEnd);
    if (long || topK) {
      note(ctx.root, `${side.keyLabels.length} positions: showing queries ${side.queryStart}-${side.queryStart + queries - 1}, keys ${side.keyStart}-${keyEnd - 1}${topK ? `, each query's top ${topK} keys` : ''}.`);
    }

    const links = [];
    for (let h = 0; h < headCount; ++h) {
      for (let q = 0; q < queries; ++q) {
        for (let j = 0; j < columns; ++j) {
          const at = ((h * queries) + q) * columns + j;
          const key = side.indices ? side.indices[at] : side.keyStart + j;
          links.push({ head: side.heads[h], query: side.queryStart + q, key, value: side.data[at] });
        }
      }
    }
    const heads = side.heads;
    const colors = headColors(heads.length);
    const colorOf = new Map(heads.map((h, i) => [h, colors[i]]));
    // A link's heads that this layer lacks are said and left out; with none left, all are shown.
    const picked = (state.heads ?? heads).filter((h) => heads.includes(h));
    if (state.heads && picked.length < state.heads.length) {
      note(ctx.root, `Heads ${state.heads.filter((h) => !heads.includes(h)).join(', ')} of the link are not heads of this layer (${heads[0]} to ${heads.at(-1)}): left out${picked.length ? '' : ', and every head shown'}.`);
    }
    const shown = new Set(picked.length ? picked : heads);

    const rowHeight = 26;
    const fontSize = 13;
    const leftWidth = d3.max(queryLabels, (l) => textWidth(l, fontSize)) + 10;
    const rightWidth = d3.max(keyLabels, (l) => textWidth(l, fontSize)) + 10;
    const totalsWidth = 44;
    const gap = 320;
    const top = 28;
    const svg = newFigure(ctx.root, 'heads');
    const blockTitle = info.isEncoderDecoder ? ` · ${BLOCK_TITLES[blockOf(state, info)]}` : '';
    svg
      .append('text')
      .attr('class', 'title')
      .attr('x', 0)
      .attr('y', 16)
      .attr('font-size', 13)
      .attr('font-weight', 'bold')
      .text(`${answer.model}${blockTitle} · layer ${side.layer} · ${heads.length} heads`);
    const linesG = svg.append('g').attr('class', 'links');
    const lines = linesG
      .selectAll('line')
      .data(links)
      .join('line')
      .attr('class', 'link')
      .attr('data-head', (d) => d.head)
      .attr('data-row', (d) => d.query)
      .attr('data-col', (d) => d.key)
      .attr('data-value', (d) => formatFloat32(d.value))
      .attr('x1', leftWidth)
      .attr('y1', (d) => top + (d.query - side.queryStart + 0.5) * rowHeight)
      .attr('x2', leftWidth + gap)
      .attr('y2', (d) => top + (d.key - side.keyStart + 0.5) * rowHeight)
      .attr('stroke', (d) => colorOf.get(d.head))
      .attr('stroke-width', 2)
      .attr('stroke-opacity', (d) => d.value)
      .on('pointermove', (event, d) =>
        showTooltip(event, [`head ${d.head}: ${side.queryLabels[d.query]} → ${side.keyLabels[d.key]}`, formatFloat32(d.value)]),
      )
      .on('pointerleave', hideTooltip);

    // Hovering a token shows only its lines: from a query on the left, to a key on the right.
    const isolate = (name, position) => {
      svg.classed('isolating', position !== null);
      lines.classed('focus', (d) => position !== null && d[name] === position);
    };
    const column = (items, start, x, anchor, name) =>
      svg
        .append('g')
        .selectAll('text')
        .data(items)
        .join('text')
        .attr('class', `label ${name}-label`)
        .attr('data-position', (_, i) => start + i)
        .attr('x', x)
        .attr('y', (_, i) => top + (i + 0.5) * rowHeight)
        .attr('dy', '0.35em')
        .attr('text-anchor', anchor)
        .attr('font-size', fontSize)
        .text((l) => l)
        .on('pointerenter', function () {
          isolate(name, Number(this.dataset.position));
        })
        .on('pointerleave', () => isolate(name, null));
    column(queryLabels, side.queryStart, leftWidth - 6, 'end', 'query');
    column(keyLabels, side.keyStart, leftWidth + gap + 6, 'start', 'key');
    const totalsX = leftWidth + gap + rightWidth + 6;
    svg.append('text').attr('x', totalsX).attr('y', top - 8).attr('font-size', 10).attr('fill', '#555').text('received');
    const totals = svg
      .append('g')
      .selectAll('text')
      .data(keyLabels.map((_, i) => side.keyStart + i))
      .join('text')
      .attr('class', 'total')
      .attr('data-position', (k) => k)
      .attr('x', totalsX)
      .attr('y', (_, i) => top + (i + 0.5) * rowHeight)
      .attr('dy', '0.35em')
      .attr('font-size', 11)
      .attr('fill', '#555');
    fit(svg, totalsX + totalsWidth, top + Math.max(queryLabels.length, keyLabels.length) * rowHeight + 4);

    // Which lines show: their head ticked, their sentences kept, their weight over the threshold.
    const sentence = (position) => (position < side.second ? 'A' : 'B');
    const filters = { ab: side.second > 0 ? state.ab : '', min: state.min };
    const refresh = () => {
      const { ab, min } = filters;
      const visible = (d) => shown.has(d.head) && d.value >= min && (!ab || sentence(d.query) + sentence(d.key) === ab);
      lines.attr('display', (d) => (visible(d) ? null : 'none'));
      const received = new Map();
      for (const d of links) if (visible(d)) received.set(d.key, (received.get(d.key) ?? 0) + d.value);
      totals
        .attr('data-total', (k) => (received.get(k) ?? 0) / Math.max(1, shown.size))
        .text((k) => ((received.get(k) ?? 0) / Math.max(1, shown.size)).toFixed(2));
    };
    refresh();
    toolbar(ctx, heads, colors, shown, filters, refresh, side.second > 0);
  },
};
