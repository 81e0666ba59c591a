// Softmax temperature: softmax(scores / T) computed here from the pre-softmax scores the server
// returns (includeScores), with each row's entropy, so that sharpening (T < 1) and flattening
// (T > 1) can be watched. At T = 1 it is the model's own attention.
import * as d3 from 'd3';
import { fit, labelled, newFigure, nextPaint, scrollBox } from '../figure.js';
import { CELL_ELEMENT_LIMIT, MIN_LABEL_SIZE, cellSize, drawColorBar, drawHeatmap, labelStep, sequentialScale } from '../heatmap.js';
import { axisLabels } from '../labels.js';
import { formatFloat32, rowEntropies, temperedSoftmax } from '../numbers.js';
import { textRequest } from '../requests.js';
import { decodeTensor, matrix } from '../tensor.js';
import { encoderOnlyNote, fittedCell, windowControl, windowOf } from './heatmap.js';
import { keyMask, slidingWindow } from '../masks.js';

// Temperatures of the side-by-side sweep.
const SWEEP = [0.25, 0.5, 1, 2, 4];

export default {
  id: 'temperature',
  title: 'Temperature',
  help: 'softmax(scores / T) from the head\'s pre-softmax scores: move T to sharpen (T < 1) or flatten (T > 1) the attention; the entropy of each row follows.',
  controls: ['text', 'layer', 'head'],
  async render(ctx) {
    const { state, info } = ctx;
    // Scores of a head mean would not be the mean of the heads' softmaxes: one head at a time.
    const head = typeof state.head === 'number' ? state.head : 0;
    // Rows only: a softmax over a window of keys would not be the model's.
    windowControl(ctx, { rowsOnly: true });
    encoderOnlyNote(ctx);
    const answer = await ctx.call('GetAttention', {
      ...textRequest(state),
      layers: [state.layer],
      heads: [head],
      includeScores: true,
      window: windowOf(state, { rowsOnly: true }),
    });
    const scores = matrix(decodeTensor(answer.scores), 0, 0);
    const attention = matrix(decodeTensor(answer.attentions), 0, 0);
    const { rows, cols } = scores;
    const labels = axisLabels(answer);
    const windowSize = slidingWindow(info, answer.layers[0]);
    const mask = { causal: info.isCausal, window: windowSize, queryStart: answer.queryStart, keyStart: answer.keyStart };
    const at = (t) => temperedSoftmax(scores.values, rows, cols, t, mask);
    const masked = keyMask({ ...mask, layer: answer.layers[0] });
    // The most keys one row sees: a window caps it.
    const seen = info.isCausal && windowSize > 0 ? Math.min(cols, windowSize) : cols;

    // What T = 1 reproduces: the check that the scores and the mask are read right.
    const atOne = at(1);
    const difference = d3.max(atOne, (p, i) => Math.abs(p - attention.values[i]));
    const note = document.createElement('p');
    note.className = 'note';
    note.textContent =
      `${answer.model} · layer ${answer.layers[0]} · head ${head}${typeof state.head === 'number' ? '' : ' (temperature needs one head)'}. ` +
      `At T = 1, softmax(scores) differs from the server's attention by at most ${difference.toExponential(1)}` +
      `${info.isCausal ? `; keys after each query${windowSize ? ` and ${windowSize} or more before it (layer ${answer.layers[0]}'s sliding window)` : ''} are masked, as the model does` : ''}. ` +
      `Entropy in bits; uniform over ${seen} keys${seen < cols ? ' (the most a row sees)' : ''} would be ${Math.log2(seen).toFixed(2)}.`;
    ctx.root.append(note);

    const slider = document.createElement('input');
    slider.type = 'range';
    slider.name = 't';
    // log10(T) from 0.1 to 10.
    slider.min = '-1';
    slider.max = '1';
    slider.step = '0.01';
    slider.value = String(Math.log10(state.t));
    const readout = document.createElement('output');
    labelled(ctx.toolbar, 'temperature T', slider);
    ctx.toolbar.append(readout);

    // The entropies shown, for the tooltip: every row's, also those whose number is thinned out.
    let shown;
    const svg = newFigure(scrollBox(ctx.root), 'temperature');
    const color = sequentialScale(1);
    const cell = fittedCell(ctx.root, rows, cols, { max: 36, reserve: 320 });
    // What the heatmap and the entropies show: computed once per temperature (a 400-token head's
    // softmax, and its image, were made twice before the first picture).
    let shownValues = state.t === 1 ? atOne : at(state.t);
    const map = drawHeatmap(svg, {
      values: shownValues,
      rows,
      cols,
      rowLabels: labels.slice(answer.queryStart, answer.queryStart + rows),
      colLabels: labels.slice(answer.keyStart, answer.keyStart + cols),
      color,
      cell,
      title: `softmax(scores / T)`,
      asImage: rows * cols > CELL_ELEMENT_LIMIT,
      masked,
      describe: (r, c, v) => [
        `${labels[answer.queryStart + r]} → ${labels[answer.keyStart + c]}`,
        `row entropy ${shown[r].toFixed(2)} bits`,
        `T = ${slider.valueAsNumber.toFixed(2)}: ${formatFloat32(v)}`,
      ],
    });
    map.g.attr('data-layer', answer.layers[0]).attr('data-head', head);
    const entropyX = map.width + 8;
    svg.append('text').attr('x', entropyX).attr('y', map.top - 6).attr('font-size', 11).attr('font-weight', 'bold').text('entropy');
    const entropies = svg
      .append('g')
      .selectAll('text')
      .data(d3.range(rows))
      .join('text')
      .attr('class', 'entropy')
      .attr('data-row', (r) => r)
      .attr('x', entropyX)
      .attr('y', (r) => map.top + (r + 0.5) * cell)
      .attr('dy', '0.35em')
      .attr('font-size', Math.max(MIN_LABEL_SIZE, Math.min(12, cell - 2)))
      // As the row labels: every few rows when rows are thinner than the text.
      .attr('visibility', (r) => (r % labelStep(cell) ? 'hidden' : null));
    const barX = entropyX + 52;
    const barWidth = drawColorBar(svg, color, { x: barX, y: map.top, height: Math.max(120, rows * cell), label: 'attention' });
    fit(svg, barX + barWidth, Math.max(map.height, map.top + 120) + 4);

    const showEntropies = (t) => {
      const h = rowEntropies(shownValues, rows, cols);
      shown = h;
      entropies.attr('data-value', (r) => h[r]).text((r) => h[r].toFixed(2));
      readout.value = `T = ${t.toFixed(2)}`;
    };
    showEntropies(state.t);
    slider.addEventListener('input', () => {
      const t = 10 ** slider.valueAsNumber;
      shownValues = at(t);
      map.update(shownValues);
      showEntropies(t);
      ctx.update({ t: Number(t.toFixed(2)) }, { quiet: true });
    });

    await nextPaint();
    if (ctx.signal.aborted) return;
    // The tutorials' pictures: the head at five temperatures side by side, and the raw scores.
    // Five panels in the window's width, after the first panel's labels (about 120 px).
    const small = cellSize(rows, cols, Math.max(60, Math.min(200, Math.floor(((ctx.root.clientWidth || 1000) - 120) / SWEEP.length) - 16)), 24);
    const smallLabels = small >= MIN_LABEL_SIZE;
    const sweep = newFigure(scrollBox(ctx.root), 'temperature-sweep');
    let x = 0;
    let height = 0;
    for (const t of SWEEP) {
      const probabilities = at(t);
      const entropy = d3.mean(rowEntropies(probabilities, rows, cols));
      const g = sweep.append('g').attr('transform', `translate(${x},0)`);
      const panel = drawHeatmap(g, {
        values: probabilities,
        rows,
        cols,
        rowLabels: smallLabels && x === 0 ? labels.slice(answer.queryStart, answer.queryStart + rows) : null,
        color,
        cell: small,
        title: `T = ${t} · ${entropy.toFixed(2)} bits`,
        asImage: rows * cols > CELL_ELEMENT_LIMIT,
        masked,
        describe: (r, c, v) => [`${labels[answer.queryStart + r]} → ${labels[answer.keyStart + c]}`, `T = ${t}: ${formatFloat32(v)}`],
      });
      panel.g.attr('data-t', t).attr('data-entropy', entropy);
      x += panel.width + 16;
      height = Math.max(height, panel.height);
    }
    fit(sweep, x, height + 4);

    // Scores of masked keys are set to -inf by the model before the softmax: grey, not a value.
    const unmasked = scores.values.filter((_, i) => !masked?.(Math.floor(i / cols), i % cols));
    const extent = d3.max(unmasked, Math.abs) || 1;
    // Red for high scores, blue for low, white for 0.
    const scoreColor = d3.scaleDiverging((t) => d3.interpolateRdBu(1 - t)).domain([-extent, 0, extent]);
    const scoreSvg = newFigure(scrollBox(ctx.root), 'scores');
    const scoreMap = drawHeatmap(scoreSvg, {
      values: scores.values,
      rows,
      cols,
      rowLabels: labels.slice(answer.queryStart, answer.queryStart + rows),
      colLabels: labels.slice(answer.keyStart, answer.keyStart + cols),
      color: scoreColor,
      cell,
      title: `pre-softmax scores q·k / √d${masked ? ' (grey: masked, -∞ before the softmax)' : ''}`,
      asImage: rows * cols > CELL_ELEMENT_LIMIT,
      masked,
      describe: (r, c, v) => [`${labels[answer.queryStart + r]} → ${labels[answer.keyStart + c]}`, `score: ${formatFloat32(v)}`],
    });
    scoreMap.g.attr('data-block', 'scores');
    const scoreBar = drawColorBar(scoreSvg, scoreColor, {
      x: scoreMap.width + 16,
      y: scoreMap.top,
      height: Math.max(120, Math.min(600, rows * cell)),
      label: 'score',
    });
    fit(scoreSvg, scoreMap.width + 16 + scoreBar, Math.max(scoreMap.height, scoreMap.top + 120) + 4);
  },
};
