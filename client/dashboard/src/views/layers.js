// Across layers: every layer's head-mean attention side by side, then attention rollout (Abnar &
// Zuidema 2020, computed by the server: request `rollout`), on one colour scale.
import * as d3 from 'd3';
import { fit, newFigure, paintEvery } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawColorBar, drawHeatmap, sequentialScale } from '../heatmap.js';
import { axisLabels } from '../labels.js';
import { keyMask, slidingWindow } from '../masks.js';
import { formatFloat32 } from '../numbers.js';
import { textRequest } from '../requests.js';
import { StreamAssembler } from '../stream.js';
import { attentionDtype, matrix } from '../tensor.js';
import { encoderOnlyNote, windowControl, windowOf } from './heatmap.js';

// Panels wrap to rows as wide as the window, less the colour bar beside them (pixels), and at
// least this wide.
const MIN_ROW_WIDTH = 300;
const COLOR_BAR_WIDTH = 80;

// How often a streamed view lets the browser paint the layers drawn so far.
const PAINT_EVERY_MS = 500;

export default {
  id: 'layers',
  title: 'Across layers',
  help: 'Each layer\'s head-mean attention side by side, then attention rollout: how attention flows from the input through all layers.',
  controls: ['text', 'words'],
  async render(ctx) {
    const { state, info } = ctx;
    windowControl(ctx);
    encoderOnlyNote(ctx);
    const count = (await ctx.tokenize()).tokens.tokens.length;
    const layers = info.numHiddenLayers;
    const dtype = attentionDtype((layers + 1) * count * count);
    // Each panel is drawn as it arrives, on the scale of the values so far; once all have
    // arrived every panel is repainted on one scale, from 0 to the largest value of any.
    const svg = newFigure(ctx.root, 'layers');
    const paint = paintEvery(PAINT_EVERY_MS);
    const drawn = [];
    const gap = 24;
    const rowWidth = Math.max(MIN_ROW_WIDTH, (ctx.root.clientWidth || 1000) - COLOR_BAR_WIDTH);
    let labels;
    let queryStart;
    let keyStart;
    let assembler;
    let cell;
    let asImage;
    let x = 0;
    let y = 0;
    let rowHeight = 0;
    let width = 0;
    let max = 0;
    const place = (panel) => {
      cell ??= cellSize(panel.rows, panel.cols, 220, 24);
      asImage ??= (layers + 1) * panel.rows * panel.cols > CELL_ELEMENT_LIMIT;
      max = Math.max(max, d3.max(panel.values));
      const g = svg.append('g');
      const rowLabels = labels.slice(queryStart, queryStart + panel.rows);
      const colLabels = labels.slice(keyStart, keyStart + panel.cols);
      const map = drawHeatmap(g, {
        values: panel.values,
        rows: panel.rows,
        cols: panel.cols,
        rowLabels,
        colLabels,
        color: sequentialScale(max),
        cell,
        title: panel.title,
        asImage,
        // Rollout multiplies the layers' attentions: only the causal mask's zeros stay zeros.
        masked: keyMask({
          causal: info.isCausal,
          window: panel.layer === 'rollout' ? 0 : slidingWindow(info, panel.layer),
          layer: panel.layer,
          queryStart,
          keyStart,
          words: state.words,
        }),
        describe: (r, c, v) => [panel.title, `${rowLabels[r]} → ${colLabels[c]}`, formatFloat32(v)],
      });
      if (x > 0 && x + map.width > rowWidth) {
        x = 0;
        y += rowHeight + gap;
        rowHeight = 0;
      }
      g.attr('transform', `translate(${x},${y})`);
      map.g.attr('data-layer', panel.layer);
      x += map.width + gap;
      width = Math.max(width, x);
      rowHeight = Math.max(rowHeight, map.height);
      fit(svg, width, y + rowHeight + 4);
      drawn.push({ map, values: panel.values, max });
    };
    ctx.progress(0, layers + 1, 'StreamAttention');
    await ctx.stream(
      'StreamAttention',
      { ...textRequest(state), headAggregation: 'HEAD_AGGREGATION_MEAN', rollout: true, aggregateWords: state.words, dtype, window: windowOf(state) },
      (message) => {
        if (message.header) {
          labels = axisLabels(message.header);
          queryStart = message.header.queryStart ?? 0;
          keyStart = message.header.keyStart ?? 0;
          assembler = new StreamAssembler(message.header);
          return;
        }
        const done = assembler.add(message);
        let panel;
        if (done?.attentions) {
          panel = { layer: done.layer, title: `${info.isEncoderDecoder ? 'encoder ' : ''}layer ${done.layer} · mean of heads`, ...matrix(done.attentions, 0) };
        } else if (done?.rollout) {
          panel = { layer: 'rollout', title: 'rollout', ...matrix(done.rollout) };
        } else {
          return;
        }
        place(panel);
        ctx.progress(drawn.length, layers + 1, panel.title);
        return paint();
      },
    );

    const color = sequentialScale(max);
    // Panels drawn once the largest value had arrived are on the final scale already.
    for (const panel of drawn) if (panel.max !== max) panel.map.update(panel.values, color);
    const barWidth = drawColorBar(svg, color, { x: width, y: 40, height: Math.max(120, rowHeight - 40), label: 'attention' });
    fit(svg, width + barWidth, y + rowHeight + 4);
  },
};
