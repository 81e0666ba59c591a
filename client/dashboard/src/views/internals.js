// Model internals: the learned position embeddings (GetParameter; positions down, dimensions
// across, diverging around 0) and, for models that attnscope-train made, the loss curves of their
// training (GetTrainingRecord).
import * as d3 from 'd3';
import { ApiError } from '../api.js';
import { fit, newFigure } from '../figure.js';
import { CELL_ELEMENT_LIMIT, drawColorBar, drawHeatmap } from '../heatmap.js';
import { formatFloat32 } from '../numbers.js';
import { decodeTensor } from '../tensor.js';
import { hideTooltip, showTooltip } from '../tooltip.js';

function note(root, text) {
  const p = document.createElement('p');
  p.className = 'note';
  p.textContent = text;
  root.append(p);
}

async function positionEmbeddings(ctx) {
  const { info } = ctx;
  const { parameters } = await ctx.call('ListParameters', { model: info.name });
  const table = parameters.find((p) => p.name.endsWith('position_embeddings.weight'));
  if (!table) {
    note(
      ctx.root,
      info.architecture === 'llama'
        ? `${info.name} has no position-embedding table: Llama models rotate queries and keys by their position inside attention (RoPE) instead of adding learned position vectors.`
        : `${info.name} has no parameter named *position_embeddings.weight among its ${parameters.length}.`,
    );
    return;
  }
  const answer = await ctx.call('GetParameter', { model: info.name, name: table.name });
  const { shape, data } = decodeTensor(answer.tensor);
  const [rows, cols] = shape;
  const extent = d3.max(data, Math.abs) || 1;
  // RdBu runs from red (low) to blue (high); symmetric about 0 so that white means 0.
  const color = d3.scaleDiverging(d3.interpolateRdBu).domain([-extent, 0, extent]);
  const cell = Math.max(1, Math.min(8, Math.floor(640 / Math.max(rows, cols))));
  const svg = newFigure(ctx.root, 'position-embeddings');
  const left = 44;
  const top = 56;
  svg.append('text').attr('class', 'title').attr('x', left).attr('y', 14).attr('font-size', 13).attr('font-weight', 'bold').text(`${table.name} [${rows} positions × ${cols} dimensions]`);
  const g = svg.append('g').attr('transform', `translate(${left},${top})`);
  const map = drawHeatmap(g, {
    values: data,
    rows,
    cols,
    color,
    cell,
    asImage: rows * cols > CELL_ELEMENT_LIMIT,
    describe: (r, c, v) => [`position ${r}, dimension ${c}`, formatFloat32(v)],
  });
  map.g.attr('data-parameter', table.name);
  // Positions and dimensions are numbers, so the axes have ticks rather than a label per row.
  g.append('g').call(d3.axisLeft(d3.scaleLinear().domain([0, rows]).range([0, rows * cell])).ticks(Math.min(10, rows / 8)));
  g.append('g').call(d3.axisTop(d3.scaleLinear().domain([0, cols]).range([0, cols * cell])).ticks(Math.min(10, cols / 8)));
  svg.append('text').attr('transform', `translate(12,${top + (rows * cell) / 2}) rotate(-90)`).attr('text-anchor', 'middle').attr('font-size', 11).text('position');
  svg.append('text').attr('x', left + (cols * cell) / 2).attr('y', 32).attr('text-anchor', 'middle').attr('font-size', 11).text('dimension');
  const barWidth = drawColorBar(svg, color, { x: left + cols * cell + 16, y: top, height: Math.max(120, rows * cell), label: 'value' });
  fit(svg, left + cols * cell + 16 + barWidth, top + Math.max(rows * cell, 120) + 4);
}

async function trainingCurves(ctx) {
  const { info } = ctx;
  let record;
  try {
    record = await ctx.call('GetTrainingRecord', { model: info.name });
  } catch (error) {
    if (!(error instanceof ApiError) || error.code !== 'not_found') throw error;
    note(ctx.root, `Loss curves: ${error.message}.`);
    return;
  }
  const points = record.points.map((p) => ({ step: Number(p.step), values: p.values }));
  const losses = ['loss', 'mlm_loss', 'relevance_loss'].filter((k) => points.some((p) => k in p.values));
  const hasRate = points.some((p) => 'learning_rate' in p.values);
  const width = 560;
  const height = 260;
  const margin = { top: 30, right: hasRate ? 64 : 16, bottom: 36, left: 52 };
  const x = d3.scaleLinear().domain(d3.extent(points, (p) => p.step)).range([0, width]).nice();
  const y = d3.scaleLinear().domain([0, d3.max(points, (p) => d3.max(losses, (k) => p.values[k] ?? 0))]).range([height, 0]).nice();
  const colors = d3.schemeTableau10;
  const svg = newFigure(ctx.root, 'training');
  svg.append('text').attr('class', 'title').attr('x', margin.left).attr('y', 16).attr('font-size', 13).attr('font-weight', 'bold').text(`${info.name}: training losses (${points.length} recorded steps)`);
  const g = svg.append('g').attr('transform', `translate(${margin.left},${margin.top})`);
  g.append('g').attr('transform', `translate(0,${height})`).call(d3.axisBottom(x).ticks(8));
  g.append('g').call(d3.axisLeft(y));
  g.append('text').attr('x', width / 2).attr('y', height + 32).attr('text-anchor', 'middle').attr('font-size', 11).text('step');
  const series = losses.map((key, i) => ({ key, color: colors[i], scale: y }));
  if (hasRate) {
    const rate = d3.scaleLinear().domain([0, d3.max(points, (p) => p.values.learning_rate ?? 0)]).range([height, 0]).nice();
    g.append('g').attr('transform', `translate(${width},0)`).call(d3.axisRight(rate).ticks(5, '~e'));
    series.push({ key: 'learning_rate', color: colors[losses.length], scale: rate, dashed: true });
  }
  series.forEach((s, i) => {
    const own = points.filter((p) => s.key in p.values);
    g.append('path')
      .attr('fill', 'none')
      .attr('stroke', s.color)
      .attr('stroke-width', 1.5)
      .attr('stroke-dasharray', s.dashed ? '4 3' : null)
      .attr('d', d3.line((p) => x(p.step), (p) => s.scale(p.values[s.key]))(own));
    g.append('g')
      .selectAll('circle')
      .data(own)
      .join('circle')
      .attr('class', 'point')
      .attr('data-key', s.key)
      .attr('data-step', (p) => p.step)
      .attr('data-value', (p) => p.values[s.key])
      .attr('cx', (p) => x(p.step))
      .attr('cy', (p) => s.scale(p.values[s.key]))
      .attr('r', 3)
      .attr('fill', s.color)
      .on('pointermove', (event, p) => showTooltip(event, [`step ${p.step}`, `${s.key} ${p.values[s.key]}`]))
      .on('pointerleave', hideTooltip);
    const legend = g.append('g').attr('transform', `translate(${width - 150},${8 + i * 16})`);
    legend.append('line').attr('x2', 18).attr('y1', 0).attr('y2', 0).attr('stroke', s.color).attr('stroke-width', 2).attr('stroke-dasharray', s.dashed ? '4 3' : null);
    legend.append('text').attr('x', 24).attr('dy', '0.35em').attr('font-size', 11).text(s.key === 'learning_rate' ? 'learning_rate (right axis)' : s.key);
  });
  fit(svg, margin.left + width + margin.right, margin.top + height + margin.bottom);
}

export default {
  id: 'internals',
  title: 'Model internals',
  help: 'The learned position embeddings (position down, dimension across) and the loss curves of the model\'s training, when its folder recorded them.',
  controls: [],
  async render(ctx) {
    await positionEmbeddings(ctx);
    await trainingCurves(ctx);
  },
};
