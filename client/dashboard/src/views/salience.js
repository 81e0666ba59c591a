// Salience (Attribute): which tokens or words of a query and document made a cross-encoder's
// score, by occlusion, gradient x input and integrated gradients (as Captum and LIT compute them),
// beside the attention the [CLS] token pays in the last layer, which is not the same thing (Jain
// and Wallace 2019).
import * as d3 from 'd3';
import { fit, newFigure, note, scrollBox } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawHeatmap, sequentialScale } from '../heatmap.js';
import { tokenLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { textRequest } from '../requests.js';
import { decodeTensor, matrix } from '../tensor.js';

const METHODS = [
  ['occlusion', 'ATTRIBUTION_METHOD_OCCLUSION', 'occlusion'],
  ['gradientXInput', 'ATTRIBUTION_METHOD_GRADIENT_X_INPUT', 'gradient × input'],
  ['integratedGradients', 'ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS', 'integrated gradients'],
];

export default {
  id: 'salience',
  title: 'Salience',
  help: 'Which tokens made the cross-encoder\'s score for the text (query) and pair (document): occlusion, gradient × input and integrated gradients, each column on its own scale (blue raises the score, red lowers it), beside the attention of [CLS] in the last layer. "words" sums a word\'s tokens.',
  controls: ['text', 'words'],
  async render(ctx) {
    const { state, info } = ctx;
    if (!info.hasClassifier || info.isCausal || info.isEncoderDecoder) {
      note(ctx.root, `${info.name} has no classifier head to attribute: salience needs a cross-encoder (BERT, RoBERTa, XLM-R, DistilBERT, MPNet or ELECTRA with a classifier), such as the default model.`);
      return;
    }
    if (!state.pair) {
      note(ctx.root, 'Salience attributes a cross-encoder\'s score for a pair: type a document in "Pair" (the text is the query).');
      return;
    }
    const [answer, attention] = await Promise.all([
      ctx.call('Attribute', { ...textRequest(state), methods: METHODS.map(([, method]) => method) }),
      ctx.call('GetAttention', {
        ...textRequest(state),
        layers: [-1],
        headAggregation: 'HEAD_AGGREGATION_MEAN',
        window: { queryStart: 0, queryEnd: 1 },
      }),
    ]);
    const words = state.words;
    const labels = words ? answer.words.map((w) => w.text) : tokenLabels(answer.tokens);
    const columns = METHODS.map(([key, , title]) => ({
      key,
      title,
      values: Float32Array.from(words ? answer.words.map((w) => w[key] ?? 0) : answer[key]),
    }));
    // A word's attention is its tokens' summed, as aggregate_words sums a word's columns.
    const cls = matrix(decodeTensor(attention.attentions), 0, 0).values;
    const clsValues = words ? answer.words.map((w) => d3.sum(cls.subarray(w.tokenStart, w.tokenEnd))) : cls;
    columns.push({ key: 'attention', title: `[CLS] attention, layer ${attention.layers[0]}`, values: Float32Array.from(clsValues), sequential: true });

    const summary = note(
      ctx.root,
      `Score ${answer.score.toFixed(4)} (logit ${answer.target ?? 0}, "${answer.targetLabel}"); baseline score ${answer.baselineScore.toFixed(4)}; integrated gradients over ${answer.integratedGradientsSteps} steps sum to the difference within ${formatFloat32(answer.convergenceDelta ?? 0)}.`,
    );
    summary.dataset.score = String(answer.score);
    // The line between the query and the document.
    const second = (words ? answer.words.map((w) => w.sequenceId ?? 0) : answer.tokens.sequenceIds).indexOf(1);
    const svg = newFigure(scrollBox(ctx.root), 'salience');
    // The export's caption: the score the columns attribute, and how their colours read.
    svg.attr('data-caption', `${summary.textContent}\nColours: a method's column runs from red (lowered the score) through white (no effect) to blue (raised it) at ± its largest magnitude, the attention's from white to dark brown at its largest: ${columns.map((column) => `${column.title} ${column.sequential ? '' : '±'}${formatFloat32(d3.max(column.values, Math.abs) || 1)}`).join(', ')}.`);
    const rows = labels.length;
    const cell = cellSize(rows, 1, 720, 22);
    let x = 0;
    const maps = columns.map((column, i) => {
      const extent = d3.max(column.values, Math.abs) || 1;
      // Diverging around 0, so that white is no effect: blue raised the score, red lowered it.
      const color = column.sequential ? sequentialScale(extent) : d3.scaleDiverging(d3.interpolateRdBu).domain([-extent, 0, extent]);
      const g = svg.append('g').attr('transform', `translate(${x},0)`);
      const map = drawHeatmap(g, {
        values: column.values,
        rows,
        cols: 1,
        cell,
        color,
        rowLabels: i === 0 ? labels : null,
        colLabels: [column.title],
        asImage: rows > CELL_ELEMENT_LIMIT,
        dividers: { row: second },
        describe: (r, c, v) => [`${labels[r]}`, `${column.title}: ${formatFloat32(v)}`],
      });
      map.g.attr('data-method', column.key);
      const placed = { g, x, map };
      x += map.width + 6;
      return placed;
    });
    // Column titles of different lengths: the rows lined up under the longest.
    const top = d3.max(maps, ({ map }) => map.top);
    for (const { g, x: left, map } of maps) g.attr('transform', `translate(${left},${top - map.top})`);
    fit(svg, x, top + rows * cell + 4);
  },
};
