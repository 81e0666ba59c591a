// Model internals: the learned position embeddings (GetParameter; positions down, dimensions
// across, diverging around 0) and, for models that attnscope-train made, the loss curves of their
// training (GetTrainingRecord).
import * as d3 from 'd3';
import { ApiError } from '../api.js';
import { fit, newFigure, note } from '../figure.js';
import { CELL_ELEMENT_LIMIT, drawColorBar, drawHeatmap } from '../heatmap.js';
import { formatFloat32 } from '../numbers.js';
import { decodeTensor } from '../tensor.js';
import { hideTooltip, showTooltip } from '../tooltip.js';

// Transformers' sinusoidal position encodings as Marian builds them
// (MarianSinusoidalPositionalEmbedding): sines in the first half of the dimensions, cosines in the
// second, at frequencies 1 / 10000^(2j / dim).
export function sinusoids(positions, dim) {
  const out = new Float32Array(positions * dim);
  const half = Math.ceil(dim / 2);
  for (let p = 0; p < positions; ++p) {
    for (let j = 0; j < dim; ++j) {
      const k = j < half ? j : j - half;
      const angle = p / 10000 ** ((2 * k) / dim);
      out[p * dim + j] = j < half ? Math.sin(angle) : Math.cos(angle);
    }
  }
  return out;
}

// Position tables as the families keep them: BERT's learned `*.position_embeddings.weight`,
// BART's learned `*.embed_positions.weight` (its first two rows an offset no position uses),
// GPT-2's `wpe.weight`; T5's learned relative-position buckets per head.
const TABLES = [/position_embeddings\.weight$/, /embed_positions\.weight$/, /(^|\.)wpe\.weight$/];
const ROPE = ['llama', 'qwen2', 'qwen3', 'mistral', 'gemma', 'gemma2', 'gemma3_text', 'phi3', 'gpt_neox'];

function drawTable(ctx, { title, name, rows, cols, data, rowAxis, colAxis }) {
  const extent = d3.max(data, Math.abs) || 1;
  // RdBu runs from red (low) to blue (high); symmetric about 0 so that white means 0.
  const color = d3.scaleDiverging(d3.interpolateRdBu).domain([-extent, 0, extent]);
  const cell = Math.max(1, Math.min(8, Math.floor(640 / Math.max(rows, cols))));
  const svg = newFigure(ctx.root, 'position-embeddings');
  const left = 44;
  const top = 56;
  svg.append('text').attr('class', 'title').attr('x', left).attr('y', 14).attr('font-size', 13).attr('font-weight', 'bold').text(title);
  const g = svg.append('g').attr('transform', `translate(${left},${top})`);
  const map = drawHeatmap(g, {
    values: data,
    rows,
    cols,
    color,
    cell,
    asImage: rows * cols > CELL_ELEMENT_LIMIT,
    describe: (r, c, v) => [`${rowAxis} ${r}, ${colAxis} ${c}: ${formatFloat32(v)}`],
  });
  map.g.attr('data-parameter', name);
  // Positions and dimensions are numbers, so the axes have ticks rather than a label per row.
  g.append('g').call(d3.axisLeft(d3.scaleLinear().domain([0, rows]).range([0, rows * cell])).ticks(Math.max(2, Math.min(10, rows / 8))));
  g.append('g').call(d3.axisTop(d3.scaleLinear().domain([0, cols]).range([0, cols * cell])).ticks(Math.max(2, Math.min(10, cols / 8))));
  svg.append('text').attr('transform', `translate(12,${top + (rows * cell) / 2}) rotate(-90)`).attr('text-anchor', 'middle').attr('font-size', 11).text(rowAxis);
  svg.append('text').attr('x', left + (cols * cell) / 2).attr('y', 32).attr('text-anchor', 'middle').attr('font-size', 11).text(colAxis);
  const barWidth = drawColorBar(svg, color, { x: left + cols * cell + 16, y: top, height: Math.max(120, rows * cell), label: 'value' });
  fit(svg, left + cols * cell + 16 + barWidth, top + Math.max(rows * cell, 120) + 4);
}

async function parameterTable(ctx, name, rowAxis, colAxis, kind) {
  const answer = await ctx.call('GetParameter', { model: ctx.info.name, name });
  const { shape, data } = decodeTensor(answer.tensor);
  const [rows, cols] = shape;
  drawTable(ctx, { title: `${name} [${rows} ${rowAxis}s × ${cols} ${colAxis}s]${kind}`, name, rows, cols, data, rowAxis, colAxis });
}

async function positionEmbeddings(ctx) {
  const { info } = ctx;
  const { parameters } = await ctx.call('ListParameters', { model: info.name });
  const tables = parameters.filter((p) => TABLES.some((pattern) => pattern.test(p.name)) && p.shape.length === 2);
  if (tables.length) {
    for (const table of tables) {
      const offset = info.architecture === 'bart' ? ' (learned; BART starts positions at row 2)' : ' (learned)';
      await parameterTable(ctx, table.name, 'position', 'dimension', offset);
    }
    return;
  }
  const buckets = parameters.filter((p) => p.name.endsWith('relative_attention_bias.weight'));
  if (buckets.length) {
    note(ctx.root, `${info.name} has no position table: T5 adds to each attention score a learned bias per head for the query-key distance, in logarithmic buckets (its first layer's tables, below, serve every layer).`);
    for (const table of buckets) await parameterTable(ctx, table.name, 'bucket', 'head', ' (learned relative-position bias)');
    return;
  }
  if (info.architecture === 'marian') {
    const rows = info.maxPositionEmbeddings;
    const cols = info.hiddenSize;
    note(ctx.root, `${info.name} adds fixed sinusoidal position encodings (Vaswani et al. 2017), not learned ones, so its checkpoint has no table: drawn here from Marian's formula.`);
    drawTable(ctx, { title: `sinusoidal position encodings [${rows} positions × ${cols} dimensions] (computed)`, name: 'sinusoidal', rows, cols, data: sinusoids(rows, cols), rowAxis: 'position', colAxis: 'dimension' });
    return;
  }
  note(
    ctx.root,
    ROPE.includes(info.architecture)
      ? `${info.name} has no position-embedding table: ${info.architecture} models rotate queries and keys by their position inside attention (RoPE) instead of adding learned position vectors.`
      : `${info.name} has no position table among its ${parameters.length} parameters.`,
  );
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
  help: 'The position encodings (position down, dimension across: learned tables, Marian\'s sinusoids, T5\'s relative-position buckets) and the loss curves of the model\'s training, when its folder recorded them.',
  controls: [],
  async render(ctx) {
    await positionEmbeddings(ctx);
    await trainingCurves(ctx);
  },
};
