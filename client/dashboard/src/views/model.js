// The model view: every layer and head as a small heatmap (layers down, heads across), read from
// StreamAttention one layer at a time so that a long input shows its first layers while the rest
// arrive. Click a heatmap to open it in the heatmap view.
import { fit, newFigure, paintEvery } from '../figure.js';
import { CELL_ELEMENT_LIMIT, drawColorBar, drawHeatmap, sequentialScale } from '../heatmap.js';
import { axisLabels, tokenLabels } from '../labels.js';
import { keyMask, slidingWindow } from '../masks.js';
import { textRequest } from '../requests.js';
import { StreamAssembler } from '../stream.js';
import { attentionDtype, matrix } from '../tensor.js';
import { hideTooltip, showTooltip } from '../tooltip.js';
import { BLOCK_TITLES, blockControl, blockOf, windowControl, windowOf } from './heatmap.js';

// The axes' labels in order, as text: the small heatmaps have none of their own.
function tokenLegend(root, labels, title) {
  if (title) {
    const heading = document.createElement('h3');
    heading.textContent = title;
    root.append(heading);
  }
  const list = document.createElement('ol');
  list.className = 'token-legend';
  labels.forEach((label, i) => {
    const item = document.createElement('li');
    const index = document.createElement('span');
    index.className = 'index';
    index.textContent = String(i);
    const text = document.createElement('span');
    text.className = 'label';
    text.textContent = label;
    item.append(index, text);
    list.append(item);
  });
  root.append(list);
}

// How often a streamed view lets the browser paint the layers drawn so far.
const PAINT_EVERY_MS = 500;

export default {
  id: 'model',
  title: 'Model view',
  help: 'Every layer and head at once, streamed one layer at a time; grey cells are hidden by a causal mask or a sliding window. Click a small heatmap to open it in the heatmap view. For an encoder-decoder with a decoder text: its encoder self-, decoder self- or cross-attention.',
  controls: ['text', 'words'],
  // Takes an encoder-decoder's decoder text; draws the decoder's layers unless the encoder's.
  decoderText: true,
  usesDecoder: (state) => Boolean(state.decoderText) && state.block !== 'encoder',
  async render(ctx) {
    const { state, info } = ctx;
    blockControl(ctx);
    const block = blockOf(state, info);
    // A window of the encoder's positions; the decoder's blocks are short.
    if (block === 'encoder') windowControl(ctx);
    const decoder = block !== 'encoder';
    const count = (await ctx.tokenize()).tokens.tokens.length;
    const layers = decoder ? info.decoderLayers : info.numHiddenLayers;
    const heads = decoder ? info.decoderAttentionHeads : info.numAttentionHeads;
    const causal = block === 'decoder' || (block === 'encoder' && info.isCausal);
    const dtype = attentionDtype(layers * heads * count * count);
    const thumb = Math.max(48, Math.min(120, Math.floor(720 / heads))) - 8;
    const left = 56;
    const top = 22;
    // Every small heatmap shares one scale from 0 to 1, known before any layer arrives.
    const color = sequentialScale(1);
    const svg = newFigure(ctx.root, 'model');
    const paint = paintEvery(PAINT_EVERY_MS);
    let grid;
    let assembler;
    let done = 0;
    ctx.progress(0, layers, `StreamAttention, ${dtype === 'DTYPE_FLOAT16' ? 'float16' : 'float32'}`);
    const request = { ...textRequest(state), aggregateWords: state.words, dtype, ...(block === 'encoder' ? { window: windowOf(state) } : {}) };
    if (info.isEncoderDecoder && state.decoderText) Object.assign(request, { decoderText: state.decoderText, aggregateWords: false });
    await ctx.stream('StreamAttention', request, (message) => {
      if (message.header) {
        const { header } = message;
        assembler = new StreamAssembler(header, block);
        const [, , rows, cols] = [header.attentionsShape, header.decoderAttentionsShape, header.crossAttentionsShape][['encoder', 'decoder', 'cross'].indexOf(block)].map(Number);
        // Rows and columns of the decoder's blocks: what each position writes; what it reads.
        const axes =
          block === 'encoder'
            ? [['Tokens', axisLabels(header)]]
            : [
                ['Rows (the decoder writes)', tokenLabels(header.decoderLabels)],
                [`Columns (${block === 'cross' ? 'the source' : 'the decoder reads'})`, tokenLabels(block === 'cross' ? header.tokens : header.decoderTokens)],
              ];
        for (const [title, labels] of axes) tokenLegend(ctx.root, labels, axes.length > 1 ? title : null);
        svg.attr('data-caption', `${header.model}, every layer and head${info.isEncoderDecoder ? ` (${BLOCK_TITLES[block]})` : ''}. ${axes.map(([title, labels]) => `${title}: ${labels.map((label, i) => `${i} ${label}`).join('  ')}`).join('\n')}`);
        const starts = block === 'encoder' ? [header.queryStart ?? 0, header.keyStart ?? 0] : [0, 0];
        grid = {
          starts,
          heads: decoder ? header.decoderHeads : header.heads,
          rows,
          cols,
          cell: thumb / Math.max(rows, cols),
          asImage: layers * heads * rows * cols > CELL_ELEMENT_LIMIT,
        };
        grid.heads.forEach((head, i) => {
          svg.append('text').attr('x', left + i * (thumb + 8) + thumb / 2).attr('y', 14).attr('text-anchor', 'middle').text(`head ${head}`);
        });
        const width = left + heads * (thumb + 8);
        const barWidth = drawColorBar(svg, color, { x: width + 8, y: top, height: Math.min(240, layers * (thumb + 8)), label: 'attention' });
        fit(svg, width + 8 + barWidth, top + layers * (thumb + 8));
        return;
      }
      const complete = assembler.add(message);
      if (!complete?.attentions) return;
      const { layer, attentions: tensor } = complete;
      const y = top + done * (thumb + 8);
      svg.append('text').attr('x', left - 8).attr('y', y + thumb / 2).attr('dy', '0.35em').attr('text-anchor', 'end').text(`layer ${layer}`);
      grid.heads.forEach((head, h) => {
        const g = svg
          .append('g')
          .attr('class', 'thumbnail')
          .attr('data-layer', layer)
          .attr('data-head', head)
          .attr('transform', `translate(${left + h * (thumb + 8)},${y})`);
        const { values } = matrix(tensor, h);
        const { rows, cols, cell, asImage } = grid;
        const [queryStart, keyStart] = grid.starts;
        const windowSize = block === 'encoder' ? slidingWindow(info, layer) : 0;
        const masked = keyMask({ causal, window: windowSize, layer, queryStart, keyStart, words: state.words });
        drawHeatmap(g, { values, rows, cols, cell, asImage, color, masked }).g.attr('data-layer', layer).attr('data-head', head);
        g.append('rect')
          .attr('class', 'open')
          .attr('width', thumb)
          .attr('height', thumb)
          .attr('fill', 'transparent')
          .on('pointermove', (event) => showTooltip(event, [`layer ${layer}, head ${head}`, 'click: open in the heatmap view']))
          .on('pointerleave', hideTooltip)
          .on('click', () => {
            hideTooltip();
            ctx.update({ view: 'heatmap', layer, head });
          });
      });
      ctx.progress(++done, layers, `layer ${layer}`);
      return paint();
    });
  },
};
