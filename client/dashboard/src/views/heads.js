// The head view, as bertviz draws it: each query token on the left joined to the key tokens on
// the right it attends to, one colour per head, line opacity the attention weight. Long inputs
// are shown through a window of positions and each query's top-k keys, so that the figure keeps to
// a few thousand lines.
import * as d3 from 'd3';
import { fit, labelled, newFigure, numberInput, textWidth } from '../figure.js';
import { axisLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { textRequest } from '../requests.js';
import { decodeTensor } from '../tensor.js';
import { hideTooltip, showTooltip } from '../tooltip.js';

// Inputs longer than this get a window of this many positions and top-k 4 unless the URL says
// otherwise: 12 heads x 64 x 4 lines.
const LONG = 64;

function headColors(count) {
  return count <= 10 ? d3.schemeTableau10.slice(0, count) : d3.quantize(d3.interpolateSinebow, count + 1).slice(0, count);
}

function toolbar(ctx, heads, colors, shown, lines) {
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
      lines.attr('display', (d) => (shown.has(d.head) ? null : 'none'));
      const all = shown.size === heads.length;
      ctx.update({ heads: all ? null : heads.filter((h) => shown.has(h)) }, { quiet: true });
    });
    const label = document.createElement('label');
    label.style.setProperty('--swatch', colors[i]);
    label.append(input, `head ${head}`);
    box.append(label);
  });
  ctx.toolbar.append(box);
  const input = (key) => {
    const field = numberInput(state[key], { placeholder: 'auto' });
    field.name = key;
    field.addEventListener('change', () => ctx.update({ [key]: field.value === '' ? null : Number(field.value) }));
    return field;
  };
  labelled(ctx.toolbar, 'top-k keys (0 = all)', input('topk'));
  const range = document.createElement('label');
  range.append('window: queries', input('qs'), '–', input('qe'), 'keys', input('ks'), '–', input('ke'));
  ctx.toolbar.append(range);
}

export default {
  id: 'heads',
  title: 'Head view',
  help: 'Lines from each token (left) to the tokens it attends to (right), one colour per head; hover a token to see only its lines, tick heads on or off.',
  controls: ['text', 'layer', 'words'],
  async render(ctx) {
    const { state } = ctx;
    const count = (await ctx.tokenize()).tokens.tokens.length;
    const long = count > LONG;
    const topK = state.topk ?? (long ? 4 : 0);
    const window = {
      queryStart: state.qs ?? 0,
      queryEnd: state.qe ?? (long ? LONG : 0),
      keyStart: state.ks ?? 0,
      keyEnd: state.ke ?? (long ? LONG : 0),
    };
    const answer = await ctx.call('GetAttention', {
      ...textRequest(state),
      layers: [state.layer],
      aggregateWords: state.words,
      topK,
      window,
    });
    const attention = decodeTensor(answer.attentions);
    const indices = answer.topKIndices ? decodeTensor(answer.topKIndices).data : null;
    const [, headCount, queries, columns] = attention.shape;
    const labels = axisLabels(answer);
    const keyEnd = Math.min(labels.length, window.keyEnd || labels.length);
    const queryLabels = labels.slice(answer.queryStart, answer.queryStart + queries);
    const keyLabels = labels.slice(answer.keyStart, keyEnd);
    if (long || topK) {
      const note = document.createElement('p');
      note.className = 'note';
      note.textContent = `${labels.length} positions: showing queries ${answer.queryStart}-${answer.queryStart + queries - 1}, keys ${answer.keyStart}-${keyEnd - 1}${topK ? `, each query's top ${topK} keys` : ''}.`;
      ctx.root.append(note);
    }

    const links = [];
    for (let h = 0; h < headCount; ++h) {
      for (let q = 0; q < queries; ++q) {
        for (let j = 0; j < columns; ++j) {
          const at = ((h * queries) + q) * columns + j;
          const key = indices ? indices[at] : answer.keyStart + j;
          links.push({ head: answer.heads[h], query: answer.queryStart + q, key, value: attention.data[at] });
        }
      }
    }
    const heads = answer.heads;
    const colors = headColors(heads.length);
    const colorOf = new Map(heads.map((h, i) => [h, colors[i]]));
    const shown = new Set(state.heads ?? heads);

    const rowHeight = 26;
    const fontSize = 13;
    const leftWidth = d3.max(queryLabels, (l) => textWidth(l, fontSize)) + 10;
    const rightWidth = d3.max(keyLabels, (l) => textWidth(l, fontSize)) + 10;
    const gap = 320;
    const top = 28;
    const svg = newFigure(ctx.root, 'heads');
    svg
      .append('text')
      .attr('class', 'title')
      .attr('x', 0)
      .attr('y', 16)
      .attr('font-size', 13)
      .attr('font-weight', 'bold')
      .text(`${answer.model} · layer ${answer.layers[0]} · ${heads.length} heads`);
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
      .attr('y1', (d) => top + (d.query - answer.queryStart + 0.5) * rowHeight)
      .attr('x2', leftWidth + gap)
      .attr('y2', (d) => top + (d.key - answer.keyStart + 0.5) * rowHeight)
      .attr('stroke', (d) => colorOf.get(d.head))
      .attr('stroke-width', 2)
      .attr('stroke-opacity', (d) => d.value)
      .attr('display', (d) => (shown.has(d.head) ? null : 'none'))
      .on('pointermove', (event, d) =>
        showTooltip(event, [`head ${d.head}: ${labels[d.query]} → ${labels[d.key]}`, formatFloat32(d.value)]),
      )
      .on('pointerleave', hideTooltip);

    // Hovering a token shows only its lines: from a query on the left, to a key on the right.
    const isolate = (side, position) => {
      svg.classed('isolating', position !== null);
      lines.classed('focus', (d) => position !== null && d[side] === position);
    };
    const column = (items, start, x, anchor, side) =>
      svg
        .append('g')
        .selectAll('text')
        .data(items)
        .join('text')
        .attr('class', `label ${side}-label`)
        .attr('data-position', (_, i) => start + i)
        .attr('x', x)
        .attr('y', (_, i) => top + (i + 0.5) * rowHeight)
        .attr('dy', '0.35em')
        .attr('text-anchor', anchor)
        .attr('font-size', fontSize)
        .text((l) => l)
        .on('pointerenter', function () {
          isolate(side, Number(this.dataset.position));
        })
        .on('pointerleave', () => isolate(side, null));
    column(queryLabels, answer.queryStart, leftWidth - 6, 'end', 'query');
    column(keyLabels, answer.keyStart, leftWidth + gap + 6, 'start', 'key');
    fit(svg, leftWidth + gap + rightWidth, top + Math.max(queryLabels.length, keyLabels.length) * rowHeight + 4);
    toolbar(ctx, heads, colors, shown, lines);
  },
};
