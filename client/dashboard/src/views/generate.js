// Generation token by token (Generate): a decoder-only model continues the text, an
// encoder-decoder translates it. Each new token arrives with its log-probability and its
// attention over the context (the prompt and the tokens before it; for an encoder-decoder, its
// cross-attention over the source), drawn as one more heatmap row as it arrives. An
// encoder-decoder's translation is then drawn with its decoder's self-attention too.
import { fit, labelled, newFigure, note, numberInput, paintEvery, scrollBox } from '../figure.js';
import { CELL_ELEMENT_LIMIT, colorTable, drawColorBar, drawHeatmap, rowHeightFor, sequentialScale } from '../heatmap.js';
import { tokenLabels } from '../labels.js';
import { keyMask, slidingWindow } from '../masks.js';
import { formatFloat32 } from '../numbers.js';
import { headRequest, headTitle } from '../requests.js';
import { crossAttentionDefaults } from '../state.js';
import { decodeTensor } from '../tensor.js';
import { attentionBlock, attentionFigure, fittedCell, panelRequest } from './heatmap.js';

const METHODS = {
  greedy: ['greedy search', 'DECODING_METHOD_GREEDY'],
  beam: ['beam search', 'DECODING_METHOD_BEAM_SEARCH'],
  sampling: ['sampling', 'DECODING_METHOD_SAMPLING'],
};

function toolbar(ctx) {
  const { state } = ctx;
  const method = document.createElement('select');
  method.name = 'method';
  for (const [value, [text]] of Object.entries(METHODS)) method.append(new Option(text, value));
  method.value = state.method;
  method.addEventListener('change', () => ctx.update({ method: method.value }));
  labelled(ctx.toolbar, 'Decoding', method);
  const field = (key, text, { min = 1, step = 1 } = {}) => {
    const input = numberInput(state[key], { min });
    input.name = key;
    input.step = String(step);
    input.addEventListener('change', () => {
      // Below the least the request takes: said at the field, and the view left as it was.
      const valid = input.valueAsNumber >= min;
      input.setCustomValidity(valid ? '' : `"${text}": expected at least ${min}, got ${input.value || 'nothing'}`);
      if (valid) ctx.update({ [key]: input.valueAsNumber });
      else input.reportValidity();
    });
    labelled(ctx.toolbar, text, input);
  };
  field('max', 'new tokens');
  if (state.method === 'beam') field('beams', 'beams');
  if (state.method === 'sampling') {
    field('temp', 'temperature', { min: 0.01, step: 0.1 });
    field('topp', 'top-p', { min: 0.01, step: 0.05 });
    field('seed', 'seed', { min: 0 });
  }
}

function generateRequest(state, max) {
  const request = {
    model: state.model,
    prompt: state.text,
    maxNewTokens: max,
    method: METHODS[state.method][1],
    outputAttentions: true,
    layers: [state.layer],
    ...headRequest(state.head),
  };
  if (state.method === 'beam') request.numBeams = state.beams;
  if (state.method === 'sampling') Object.assign(request, { temperature: state.temp, topP: state.topp, seed: String(state.seed) });
  return request;
}

// The tokens written so far, each with its log-probability.
function tokenList(root) {
  const list = document.createElement('ol');
  list.className = 'generated';
  root.append(list);
  return (token, label) => {
    const item = document.createElement('li');
    item.dataset.index = String(token.index ?? 0);
    item.dataset.id = String(token.id ?? 0);
    item.dataset.logprob = String(token.logprob ?? 0);
    const text = document.createElement('span');
    text.className = 'token';
    text.textContent = label;
    const logprob = document.createElement('span');
    logprob.className = 'logprob';
    logprob.textContent = (token.logprob ?? 0).toFixed(3);
    // p = exp(log p): the width of the bar under the token.
    logprob.style.setProperty('--p', String(Math.exp(token.logprob ?? 0)));
    item.title = `token ${token.index ?? 0}: ${token.token} (id ${token.id ?? 0}), log p = ${formatFloat32(token.logprob ?? 0)}, p = ${Math.exp(token.logprob ?? 0).toFixed(3)}`;
    item.append(text, logprob);
    list.append(item);
  };
}

// GenerateRequest.max_new_tokens' upper bound (models/generation.h kMaxNewTokens).
const MAX_NEW_TOKENS = 1024;

// How often the stream stops for the browser to paint the rows drawn so far.
const PAINT_EVERY_MS = 100;

// While tokens arrive, each one's row is painted once, a pixel a cell, into a canvas with room for
// every row the request allows: drawing the labelled heatmap again at each token took time
// quadratic in the tokens per token (150 tokens: one 25 s task). The labelled heatmap, with its
// hover, is drawn once the stream has ended. `windowSize`: the layer's sliding window (0: none).
// Returns paint(row, attention).
function rowPainter(box, rows, cols, cell, rowHeight, windowSize) {
  const canvas = document.createElement('canvas');
  canvas.className = 'generate-rows';
  canvas.width = cols;
  canvas.height = rows;
  canvas.style.width = `${cols * cell}px`;
  canvas.style.height = `${rows * rowHeight}px`;
  canvas.style.imageRendering = 'pixelated';
  box.append(canvas);
  const context = canvas.getContext('2d');
  const { table, lo, hi } = colorTable(sequentialScale(1));
  return (row, attention) => {
    const image = context.createImageData(cols, 1);
    for (let c = 0; c < cols; ++c) {
      const at = c * 4;
      image.data[at + 3] = 255;
      // Keys after the row's own position or outside the window: the masks' grey.
      if (c >= attention.length || (windowSize > 0 && attention.length - 1 - c >= windowSize)) {
        image.data.set([0xd9, 0xd9, 0xd9], at);
        continue;
      }
      const index = Math.round(Math.max(0, Math.min(1, (attention[c] - lo) / (hi - lo))) * 255) * 3;
      image.data.set(table.subarray(index, index + 3), at);
    }
    context.putImageData(image, 0, row);
    canvas.dataset.rows = String(row + 1);
  };
}

// The decoder's self-attention over what it wrote. Generate streams each new token's
// cross-attention only; this is GetAttention of the written text read back by the decoder
// (teacher-forced), whose inputs are the tokens it wrote. Its cross-attention rows are compared
// with the streamed ones: the same computation, within float rounding. A text read back always
// ends with the row that writes the end-of-text token; when the generation stopped at its length
// instead, that row was never written, and is said so.
async function decoderSelfAttention(ctx, text, streamed, stoppedAtLength) {
  const { state, info } = ctx;
  const panel = { ...state, decoderText: text, block: 'decoder', qs: null, qe: null, ks: null, ke: null };
  const answer = await ctx.call('GetAttention', panelRequest(panel, info, false));
  const cross = attentionBlock(answer, { ...panel, block: 'cross' }, info);
  const unwritten = stoppedAtLength && cross.rows === streamed.length + 1;
  let check;
  if (cross.rows === streamed.length || unwritten) {
    let difference = 0;
    streamed.forEach((row, r) => {
      for (let c = 0; c < cross.cols; ++c) difference = Math.max(difference, Math.abs(row.attention[c] - cross.values[r * cross.cols + c]));
    });
    check = `its cross-attention differs from the streamed rows by at most ${difference.toExponential(1)}`;
    if (unwritten) {
      check += `. Its last row, writing the end-of-text token, was not written: the generation stopped at ${streamed.length} new tokens, so that row is what the decoder would read next`;
    }
  } else {
    check = `the text read back is ${cross.rows} tokens where ${streamed.length} were written, so its rows are not the streamed ones`;
  }
  const explanation = note(
    ctx.root,
    `The decoder's self-attention while it wrote: each row is a written token, its cells the tokens before it (from the start token). Generate streams only the cross-attention above, so this is GetAttention of the written text read back by the decoder (teacher-forced); ${check}.`,
  );
  explanation.classList.add('decoder-self');
  if (unwritten) explanation.dataset.unwrittenRow = String(cross.rows - 1);
  const svg = newFigure(scrollBox(ctx.root), 'generate-decoder');
  const color = sequentialScale(1);
  const map = attentionFigure(svg, answer, { panel, info, color, cellFor: (rows, cols) => fittedCell(ctx.root, rows, cols, { max: 28 }) });
  const barWidth = drawColorBar(svg, color, { x: map.cellsRight + 16, y: map.top, height: 120, label: 'attention' });
  fit(svg, Math.max(map.width + 8, map.cellsRight + 16 + barWidth), Math.max(map.height, map.top + 120) + 4);
}

export default {
  id: 'generate',
  title: 'Generate',
  help: 'The model writes after the text (a decoder-only model) or translates it (an encoder-decoder), token by token: each new token with its log-probability, and as one more row its attention over the context (an encoder-decoder: its cross-attention over the source, then its decoder\'s self-attention over the translation) in the chosen layer and head.',
  controls: ['text', 'layer', 'head'],
  // The prompt is one text: no pair box.
  pair: false,
  // An encoder-decoder writes with its decoder: the layer and head pickers count the decoder's.
  usesDecoder: () => true,
  async render(ctx) {
    const { state, info } = ctx;
    if (!info.isCausal && !info.isEncoderDecoder) {
      const writers = ctx.models.filter((m) => m.isCausal || m.isEncoderDecoder).map((m) => m.name);
      note(
        ctx.root,
        `${info.name} is an encoder (${info.architecture}): it does not generate. ${writers.length ? `Pick one that does in "Model": ${writers.join(', ')}.` : 'This server has no model that generates: serve a decoder-only model (Llama, GPT-2) or an encoder-decoder (Marian, BART, T5).'}`,
      );
      return;
    }
    toolbar(ctx);
    // A decoder-only model writes within its positions: the new tokens are cut to what the text
    // leaves (the server refuses more). A count the API refuses whatever the text (outside 1 to
    // MAX_NEW_TOKENS) is left for the server's error to name.
    let max = state.max;
    if (info.isCausal && max >= 1 && max <= MAX_NEW_TOKENS) {
      // The prompt alone: Generate sends no pair.
      const used = (await ctx.call('Tokenize', { model: state.model, text: state.text })).tokens.tokens.length;
      const room = info.maxPositionEmbeddings - used;
      if (room < 1) {
        note(ctx.root, `The text's ${used} tokens fill ${info.name}'s ${info.maxPositionEmbeddings} positions: there is no room to write. Shorten the text.`);
        return;
      }
      if (room < max) {
        max = room;
        note(ctx.root, `At most ${room} new tokens: ${info.name}'s ${info.maxPositionEmbeddings} positions less the text's ${used} tokens.`);
      }
    }
    if (state.method === 'beam') {
      note(ctx.root, 'Beam search keeps several candidates to the end: its tokens and their attention arrive when the search has finished.');
    }
    const summary = note(ctx.root, '');
    const addToken = tokenList(ctx.root);
    const box = scrollBox(ctx.root);
    let header;
    let context;
    let windowSize = 0;
    const rows = [];
    const draw = () => {
      box.replaceChildren();
      const hide = keyMask({ causal: true, window: windowSize, layer: header.layers[0] });
      const cols = context.length + (header.encoderDecoder ? 0 : Math.max(0, rows.length - 1));
      const values = new Float32Array(rows.length * cols);
      rows.forEach((row, r) => values.set(row.attention.subarray(0, cols), r * cols));
      const colLabels = header.encoderDecoder ? context : [...context, ...rows.slice(0, -1).map((row) => row.label)];
      const svg = newFigure(box, 'generate');
      const color = sequentialScale(1);
      const cell = fittedCell(ctx.root, rows.length, cols, { max: 28 });
      const map = drawHeatmap(svg, {
        values,
        rows: rows.length,
        cols,
        rowLabels: rows.map((row) => row.label),
        colLabels,
        color,
        cell,
        rowHeight: rowHeightFor(rows.length, cell),
        asImage: rows.length * cols > CELL_ELEMENT_LIMIT,
        title: `${info.name} · ${header.encoderDecoder ? 'cross-attention of decoder' : ''} layer ${header.layers[0]} · ${headTitle(state.head)}`,
        // A row attends to the tokens before it (the prompt's and the ones written before), within
        // the layer's sliding window if it has one; its own position is its attention's last key.
        masked: (r, c) => hide(rows[r].attention.length - 1, c),
        describe: (r, c, v) => [`${rows[r].label} (new token ${r}) → ${colLabels[c]}`, `key ${c}: ${formatFloat32(v)}`],
      });
      map.g.attr('data-block', header.encoderDecoder ? 'cross' : 'self');
      // The export's caption: what the page lists beside the figure.
      svg.attr('data-caption', `${outcome}\nNew tokens (log p): ${rows.map((row, i) => `${i} ${row.label} (${row.logprob.toFixed(3)})`).join('  ')}`);
      const barWidth = drawColorBar(svg, color, { x: map.cellsRight + 16, y: map.top, height: 120, label: 'attention' });
      fit(svg, Math.max(map.width + 8, map.cellsRight + 16 + barWidth), Math.max(map.height, map.top + 120) + 4);
    };
    let written = '';
    let stoppedAtLength = false;
    let outcome = '';
    let paintRow;
    const paint = paintEvery(PAINT_EVERY_MS);
    ctx.progress(0, max, 'Generate');
    await ctx.stream('Generate', generateRequest(state, max), (message) => {
      if (message.header) {
        header = message.header;
        header.encoderDecoder ??= false;
        context = tokenLabels(header.promptTokens);
        const cols = context.length + (header.encoderDecoder ? 0 : max - 1);
        const cell = fittedCell(ctx.root, max, cols, { max: 28 });
        windowSize = header.encoderDecoder ? 0 : slidingWindow(info, header.layers[0]);
        paintRow = rowPainter(box, max, cols, cell, rowHeightFor(max, cell), windowSize);
        summary.textContent = header.encoderDecoder
          ? `${info.name} translates the text (${context.length} source tokens); each row is the decoder's cross-attention over the source while it wrote that token.`
          : `${info.name} continues the text (${context.length} prompt tokens); each row is the new token's attention over the tokens before it.`;
        return;
      }
      if (message.token) {
        const { token } = message;
        const label = token.text?.trim() ? token.text : token.token;
        addToken(token, label);
        const attention = decodeTensor(token.attention);
        rows.push({ label, logprob: token.logprob ?? 0, attention: attention.data.subarray(0, attention.shape[attention.shape.length - 1]) });
        paintRow(rows.length - 1, rows.at(-1).attention);
        ctx.progress(rows.length, max, `Generate: ${label}`);
        return paint();
      }
      if (message.done) {
        const { done } = message;
        stoppedAtLength = done.finishReason !== 'FINISH_REASON_EOS';
        const reason = stoppedAtLength ? `${max} new tokens` : 'the end-of-text token';
        outcome = `Stopped at ${reason}; score ${(done.score ?? 0).toFixed(4)} (${METHODS[state.method][0]}). Text: ${done.text ?? ''}`;
        const result = note(ctx.root, outcome);
        result.classList.add('generated-text');
        result.dataset.score = String(done.score ?? 0);
        if (header.encoderDecoder && done.text?.trim()) {
          written = done.text.trim();
          const open = document.createElement('button');
          open.type = 'button';
          open.name = 'open-cross';
          open.textContent = 'Open the cross-attention heatmap of this translation';
          open.addEventListener('click', () =>
            ctx.update({ view: 'heatmap', decoderText: done.text.trim(), block: 'cross', ...crossAttentionDefaults(location.search, info.decoderLayers) }),
          );
          ctx.root.append(open);
        }
      }
    });
    if (rows.length) draw();
    if (written) await decoderSelfAttention(ctx, written, rows, stoppedAtLength);
  },
};
