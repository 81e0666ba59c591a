// Compare: two heatmaps side by side on one colour scale from 0 to 1, for two models, two layers
// or heads, two texts, or two of an encoder-decoder's attentions. Panel A is the common controls
// (for an encoder-decoder with a decoder text, the attention picked under "Attention"); panel B
// takes what differs and follows A in the rest.
import { fit, labelled, newFigure, note } from '../figure.js';
import { cellSize, drawColorBar, sequentialScale } from '../heatmap.js';
import { BLOCK_TITLES, attentionFigure, blockControl, blockOf, panelRequest } from './heatmap.js';

function option(select, value, text) {
  const element = document.createElement('option');
  element.value = value;
  element.textContent = text;
  select.append(element);
}

// The layers and heads of the attention a panel shows: the decoder's for its self- and
// cross-attention.
function counts(panel, info) {
  return blockOf(panel, info) === 'encoder'
    ? { layers: info.numHiddenLayers, heads: info.numAttentionHeads }
    : { layers: info.decoderLayers, heads: info.decoderAttentionHeads };
}

function toolbar(ctx, b, infoB) {
  const { state, models } = ctx;
  const bar = ctx.toolbar;
  bar.append('Panel B:');
  const model = document.createElement('select');
  model.name = 'b.model';
  option(model, '', 'same model');
  for (const m of models) option(model, m.name, m.name);
  model.value = state.b.model ?? '';
  labelled(bar, 'model', model);
  const text = document.createElement('input');
  text.name = 'b.text';
  text.placeholder = 'same text';
  text.value = state.b.text ?? '';
  labelled(bar, 'text', text);
  const pair = document.createElement('input');
  pair.name = 'b.pair';
  pair.placeholder = 'same pair';
  pair.value = state.b.pair ?? '';
  labelled(bar, 'pair', pair);
  // Panel B's own attention, when it is an encoder-decoder reading a decoder text.
  const block = document.createElement('select');
  block.name = 'b.attn';
  if (infoB.isEncoderDecoder && b.decoderText) {
    option(block, '', 'same attention');
    for (const [value, title] of Object.entries(BLOCK_TITLES)) option(block, value, title);
    block.value = state.b.block ?? '';
    labelled(bar, 'attention', block);
  }
  const { layers, heads } = counts(b, infoB);
  const layer = document.createElement('select');
  layer.name = 'b.layer';
  const head = document.createElement('select');
  head.name = 'b.head';
  option(layer, '', 'same layer');
  option(head, '', 'same head');
  for (let i = 0; i < layers; ++i) option(layer, String(i), String(i));
  for (const h of ['mean', 'max']) option(head, h, h);
  for (let i = 0; i < heads; ++i) option(head, String(i), String(i));
  layer.value = state.b.layer === null ? '' : String(state.b.layer);
  head.value = state.b.head === null ? '' : String(state.b.head);
  labelled(bar, 'layer', layer);
  labelled(bar, 'head', head);
  const change = () =>
    ctx.update({
      b: {
        model: model.value || null,
        text: text.value || null,
        pair: pair.value || null,
        layer: layer.value === '' ? null : Number(layer.value),
        head: head.value === '' ? null : ['mean', 'max'].includes(head.value) ? head.value : Number(head.value),
        block: block.isConnected ? block.value || null : state.b.block,
      },
    });
  for (const control of [model, text, pair, block, layer, head]) control.addEventListener('change', change);
}

export default {
  id: 'compare',
  title: 'Compare',
  help: 'Two heatmaps on one colour scale (0 to 1): panel A uses the controls above, panel B changes the model, text, layer or head. For an encoder-decoder with a decoder text (or "Translate first"), panel A shows the attention picked under "Attention" (cross-attention unless another) and panel B the same or its own; each panel\'s title says which.',
  controls: ['text', 'layer', 'head', 'words'],
  // Takes an encoder-decoder's decoder text; draws the decoder's layers unless the encoder's.
  decoderText: true,
  usesDecoder: (state) => Boolean(state.decoderText) && state.block !== 'encoder',
  async render(ctx) {
    const { state, models } = ctx;
    blockControl(ctx);
    const a = state;
    const b = { ...a, ...Object.fromEntries(Object.entries(state.b).filter(([, value]) => value !== null)) };
    const infoB = models.find((m) => m.name === b.model) ?? ctx.info;
    if (infoB.isEncoderDecoder) b.pair = '';
    const countsB = counts(b, infoB);
    // Panel B following panel A's layer or head into a model (or a stack) that has fewer: its
    // last one, said.
    const clamp = (key, count, noun) => {
      if (state.b[key] === null && typeof b[key] === 'number' && b[key] >= count) {
        b[key] = count - 1;
        note(ctx.root, `Panel B: ${infoB.name} has ${count} ${noun}s, so it shows its last ${noun}, ${count - 1} (choose another in "${key}" under Panel B).`);
      }
    };
    const decoderB = blockOf(b, infoB) !== 'encoder';
    clamp('layer', countsB.layers, decoderB ? 'decoder layer' : 'layer');
    clamp('head', countsB.heads, decoderB ? 'decoder head' : 'head');
    toolbar(ctx, b, infoB);
    const infos = [ctx.info, infoB];
    const answers = await Promise.all([a, b].map((panel, i) => ctx.call('GetAttention', panelRequest(panel, infos[i], state.words))));
    const color = sequentialScale(1);
    const svg = newFigure(ctx.root, 'compare');
    let x = 0;
    let height = 0;
    let top = 0;
    [a, b].forEach((panel, i) => {
      const g = svg.append('g').attr('transform', `translate(${x},0)`);
      const map = attentionFigure(g, answers[i], { panel, info: infos[i], color, cellFor: (rows, cols) => cellSize(rows, cols, 420, 40) });
      map.g.attr('data-panel', i ? 'b' : 'a');
      // A narrow panel's title (an encoder-decoder's names its attention) is wider than its cells.
      x += Math.max(map.width, g.node().getBBox().width) + 32;
      height = Math.max(height, map.height);
      top = Math.max(top, map.top);
    });
    const barWidth = drawColorBar(svg, color, { x, y: top, height: Math.max(120, height - top), label: 'attention (shared scale)' });
    fit(svg, x + barWidth, Math.max(height, top + 120) + 4);
  },
};
