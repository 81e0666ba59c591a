// One layer and one head (or the heads' mean or max) as a heatmap, tokens or words on both axes.
import * as d3 from 'd3';
import { fit, newFigure } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawColorBar, drawHeatmap, sequentialScale } from '../heatmap.js';
import { axisLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { headTitle, layerHeadRequest } from '../requests.js';
import { decodeTensor, matrix } from '../tensor.js';

// Heatmap of one (layer, head) answer, coloured by `color` or else from 0 to its largest value;
// shared by the heatmap and compare views.
export function attentionFigure(parent, answer, { head, color, span = 560, max = 40 }) {
  const { rows, cols, values } = matrix(decodeTensor(answer.attentions), 0, 0);
  const labels = axisLabels(answer);
  const tokens = answer.tokens.tokens;
  const rowLabels = labels.slice(answer.queryStart, answer.queryStart + rows);
  const colLabels = labels.slice(answer.keyStart, answer.keyStart + cols);
  const scale = color ?? sequentialScale(d3.max(values));
  const map = drawHeatmap(parent, {
    values,
    rows,
    cols,
    rowLabels,
    colLabels,
    color: scale,
    cell: cellSize(rows, cols, span, max),
    title: `${answer.model} · layer ${answer.layers[0]} · ${headTitle(head)}`,
    asImage: rows * cols > CELL_ELEMENT_LIMIT,
    describe: (r, c, v) => [
      `${rowLabels[r]} → ${colLabels[c]}`,
      // What the model saw, where normalisation made it differ from the text ("ᄅ" for "랭").
      ...(answer.words?.length ? [] : [`tokens ${tokens[answer.queryStart + r]} → ${tokens[answer.keyStart + c]}`]),
      `query ${r}, key ${c}: ${formatFloat32(v)}`,
    ],
  });
  map.g.attr('data-layer', answer.layers[0]).attr('data-head', head);
  return { ...map, color: scale };
}

export default {
  id: 'heatmap',
  title: 'Heatmap',
  help: 'Attention of one layer and head (or the mean or max of the heads): each row is a query token, its cells how much it attends to each key token. Hover a cell for its value; "words" sums a word\'s tokens.',
  controls: ['text', 'layer', 'head', 'words'],
  async render(ctx) {
    const { state } = ctx;
    const answer = await ctx.call('GetAttention', layerHeadRequest(state, state.words));
    const svg = newFigure(ctx.root, 'heatmap');
    const map = attentionFigure(svg, answer, { head: state.head });
    const barWidth = drawColorBar(svg, map.color, {
      x: map.width + 16,
      y: map.top,
      height: Math.max(120, map.height - map.top),
      label: 'attention',
    });
    fit(svg, map.width + 16 + barWidth, Math.max(map.height, map.top + 120) + 4);
  },
};
