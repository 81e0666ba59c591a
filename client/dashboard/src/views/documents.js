// A query and several documents through CrossAttention: the documents ranked by the
// cross-encoder's relevance score, each with its query-to-document attention (rows: query
// tokens, columns: document tokens) and, on request, document-to-query.
import * as d3 from 'd3';
import { fit, labelled, newFigure, note } from '../figure.js';
import { CELL_ELEMENT_LIMIT, cellSize, drawColorBar, drawHeatmap, sequentialScale } from '../heatmap.js';
import { cutAt, tokenLabels } from '../labels.js';
import { formatFloat32 } from '../numbers.js';
import { PRESETS } from '../presets.js';
import { headRequest, headTitle } from '../requests.js';
import { decodeTensor, matrix } from '../tensor.js';

function toolbar(ctx) {
  const { state } = ctx;
  const query = document.createElement('input');
  query.name = 'query';
  query.value = state.query;
  query.size = 30;
  labelled(ctx.toolbar, 'Query', query);
  const docs = document.createElement('textarea');
  docs.name = 'docs';
  docs.rows = Math.max(2, state.docs.length);
  docs.cols = 60;
  docs.value = state.docs.join('\n');
  labelled(ctx.toolbar, 'Documents, one per line', docs);
  const submit = () => ctx.update({ query: query.value, docs: docs.value.split('\n').filter((d) => d.trim()) });
  query.addEventListener('change', submit);
  docs.addEventListener('change', submit);
  const presets = document.createElement('span');
  presets.className = 'presets';
  presets.append('Examples: ');
  for (const preset of PRESETS) {
    const button = document.createElement('button');
    button.type = 'button';
    button.textContent = preset.name;
    button.addEventListener('click', () => ctx.update({ query: preset.query, docs: preset.docs }));
    presets.append(button);
  }
  ctx.toolbar.append(presets);
  const d2q = document.createElement('input');
  d2q.type = 'checkbox';
  d2q.name = 'd2q';
  d2q.checked = state.d2q;
  d2q.addEventListener('change', () => ctx.update({ d2q: d2q.checked }));
  labelled(ctx.toolbar, 'document → query too', d2q);
}

// One block of a document ([layer, head, rows, cols] cut to the selected layer and head); rows and
// cols are {labels, tokens} of its axes. Korean syllables fall apart into several tokens with the
// same original text, so the tooltip names the tokens too.
function block(parent, tensor, rows, cols, color, title) {
  const matrixOf = matrix(decodeTensor(tensor), 0, 0);
  return drawHeatmap(parent, {
    values: matrixOf.values,
    rows: matrixOf.rows,
    cols: matrixOf.cols,
    rowLabels: rows.labels,
    colLabels: cols.labels,
    color,
    cell: cellSize(matrixOf.rows, matrixOf.cols, 480, 24),
    title,
    asImage: matrixOf.rows * matrixOf.cols > CELL_ELEMENT_LIMIT,
    describe: (r, c, v) => [
      `${rows.labels[r]} → ${cols.labels[c]}`,
      `tokens ${rows.tokens[r]} → ${cols.tokens[c]}`,
      formatFloat32(v),
    ],
  });
}

export default {
  id: 'documents',
  title: 'Query and documents',
  help: 'A query against several documents with the cross-encoder: documents ranked by relevance score, each with the attention from the query\'s tokens to the document\'s.',
  controls: ['layer', 'head'],
  async render(ctx) {
    const { state, info } = ctx;
    toolbar(ctx);
    const answer = await ctx.call('CrossAttention', {
      model: state.model,
      query: state.query,
      documents: state.docs,
      layers: [state.layer],
      ...headRequest(state.head),
      includeDocumentToQuery: state.d2q,
    });
    const documents = answer.documents.map((doc, index) => ({ ...doc, index, text: state.docs[index] }));
    const ranked = info.hasClassifier ? [...documents].sort((a, b) => b.relevanceScore - a.relevanceScore) : documents;
    const summary = document.createElement('p');
    summary.className = 'note';
    summary.textContent = info.hasClassifier
      ? `Ranked by the cross-encoder's relevance score (its "${info.labels[info.labels.length - 1] ?? 'relevance'}" logit); layer ${answer.layers[0]}, ${headTitle(state.head)}.`
      : `${info.name} has no classifier, so there is no relevance score: documents in the order given; layer ${answer.layers[0]}, ${headTitle(state.head)}.`;
    ctx.root.append(summary);
    // One colour scale for every document and both directions, so that their attention can be
    // compared: from 0 to the largest value shown in any block.
    const blockMax = (tensor) => (tensor ? d3.max(decodeTensor(tensor).data) : 0);
    const color = sequentialScale(
      d3.max(documents, (doc) => Math.max(blockMax(doc.queryToDocument), blockMax(doc.documentToQuery))),
    );

    ranked.forEach((doc, rank) => {
      const section = document.createElement('section');
      section.className = 'document';
      section.dataset.index = String(doc.index);
      section.dataset.rank = String(rank + 1);
      if (doc.relevanceScore !== undefined) section.dataset.score = String(doc.relevanceScore);
      const heading = document.createElement('h3');
      heading.textContent = `#${rank + 1}${doc.relevanceScore !== undefined ? ` · score ${doc.relevanceScore.toFixed(3)}` : ''} · document ${doc.index + 1}`;
      const text = document.createElement('p');
      text.className = 'document-text';
      section.append(heading, text);
      // The server cuts a pair longer than the model takes (the document's end first): the part
      // it never read is greyed and said.
      const cut = cutAt(doc.tokens, doc.text, 1);
      if (cut === null) {
        text.textContent = doc.text;
      } else {
        const characters = [...doc.text];
        const unread = document.createElement('span');
        unread.className = 'unread';
        unread.textContent = characters.slice(cut).join('');
        text.append(characters.slice(0, cut).join(''), unread);
        section.dataset.cut = String(cut);
        note(
          section,
          `Cut: ${info.name} reads at most ${info.maxPositionEmbeddings} tokens of query and document together, so this document was scored and drawn on its first ${doc.documentPositions.length} tokens; the greyed ${characters.length - cut} characters were not read.`,
        ).classList.add('cut');
      }
      // Longest-first truncation cuts the query too when it is the longer text, and it may be cut
      // differently beside each document.
      if (doc.queryTruncated) {
        section.dataset.queryCut = String(doc.queryPositions.length);
        note(
          section,
          `Cut: ${info.name} reads at most ${info.maxPositionEmbeddings} tokens of query and document together, so beside this document it read only the query's first ${doc.queryPositions.length} tokens: its score and rows are for that part of the query.`,
        ).classList.add('cut', 'query-cut');
      }
      ctx.root.append(section);

      const labels = tokenLabels(doc.tokens);
      const axis = (positions) => ({ labels: positions.map((p) => labels[p]), tokens: positions.map((p) => doc.tokens.tokens[p]) });
      const queryAxis = axis(doc.queryPositions);
      const documentAxis = axis(doc.documentPositions);
      const svg = newFigure(section, `document-${doc.index + 1}`).attr('data-caption', `Query: ${state.query}${doc.queryTruncated ? ` (cut: only its first ${doc.queryPositions.length} tokens were read)` : ''}\n${heading.textContent}: ${doc.text}${cut === null ? '' : ` (cut: the last ${[...doc.text].length - cut} characters were not read)`}`);
      const forward = block(svg, doc.queryToDocument, queryAxis, documentAxis, color, 'query → document');
      forward.g.attr('data-block', 'query-to-document');
      let width = forward.width;
      let height = forward.height;
      if (doc.documentToQuery) {
        const g = svg.append('g').attr('transform', `translate(${width + 32},0)`);
        const backward = block(g, doc.documentToQuery, documentAxis, queryAxis, color, 'document → query');
        backward.g.attr('data-block', 'document-to-query');
        width += 32 + backward.width;
        height = Math.max(height, backward.height);
      }
      const barWidth = drawColorBar(svg, color, { x: width + 16, y: forward.top, height: Math.max(80, height - forward.top), label: 'attention' });
      fit(svg, width + 16 + barWidth, Math.max(height, forward.top + 80) + 4);
    });
  },
};
