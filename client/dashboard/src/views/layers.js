// Across layers: every layer's head-mean attention side by side, then attention rollout (Abnar &
// Zuidema 2020, computed by the server: request `rollout`), on one colour scale.
import * as d3 from 'd3';
import { fit, newFigure } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawColorBar, drawHeatmap, sequentialScale } from '../heatmap.js';
import { axisLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { textRequest } from '../requests.js';
import { StreamAssembler } from '../stream.js';
import { attentionDtype, matrix } from '../tensor.js';

// Panels wrap to rows of at most this width, in pixels.
const MAX_WIDTH = 1240;

export default {
  id: 'layers',
  title: 'Across layers',
  help: 'Each layer\'s head-mean attention side by side, then attention rollout: how attention flows from the input through all layers.',
  controls: ['text', 'words'],
  async render(ctx) {
    const { state, info } = ctx;
    const count = (await ctx.tokenize()).tokens.tokens.length;
    const layers = info.numHiddenLayers;
    const dtype = attentionDtype((layers + 1) * count * count);
    const panels = [];
    let labels;
    let assembler;
    ctx.progress(0, layers + 1, 'StreamAttention');
    await ctx.stream(
      'StreamAttention',
      { ...textRequest(state), headAggregation: 'HEAD_AGGREGATION_MEAN', rollout: true, aggregateWords: state.words, dtype },
      (message) => {
        if (message.header) {
          labels = axisLabels(message.header);
          assembler = new StreamAssembler(message.header);
          return;
        }
        const done = assembler.add(message);
        if (done?.attentions) {
          panels.push({ layer: done.layer, title: `layer ${done.layer} · mean of heads`, ...matrix(done.attentions, 0) });
        } else if (done?.rollout) {
          panels.push({ layer: 'rollout', title: 'rollout', ...matrix(done.rollout) });
        } else {
          return;
        }
        ctx.progress(panels.length, layers + 1, panels.length ? panels[panels.length - 1].title : 'header');
      },
    );

    const color = sequentialScale(d3.max(panels, (p) => d3.max(p.values)));
    const { rows, cols } = panels[0];
    const cell = cellSize(rows, cols, 220, 24);
    const asImage = panels.length * rows * cols > CELL_ELEMENT_LIMIT;
    const svg = newFigure(ctx.root, 'layers');
    const gap = 24;
    let x = 0;
    let y = 0;
    let rowHeight = 0;
    let width = 0;
    for (const panel of panels) {
      const g = svg.append('g');
      const map = drawHeatmap(g, {
        values: panel.values,
        rows,
        cols,
        rowLabels: labels,
        colLabels: labels,
        color,
        cell,
        title: panel.title,
        asImage,
        describe: (r, c, v) => [panel.title, `${labels[r]} → ${labels[c]}`, formatFloat32(v)],
      });
      if (x > 0 && x + map.width > MAX_WIDTH) {
        x = 0;
        y += rowHeight + gap;
        rowHeight = 0;
      }
      g.attr('transform', `translate(${x},${y})`);
      map.g.attr('data-layer', panel.layer);
      x += map.width + gap;
      width = Math.max(width, x);
      rowHeight = Math.max(rowHeight, map.height);
    }
    const barWidth = drawColorBar(svg, color, { x: width, y: 40, height: Math.max(120, rowHeight - 40), label: 'attention' });
    fit(svg, width + barWidth, y + rowHeight + 4);
  },
};
