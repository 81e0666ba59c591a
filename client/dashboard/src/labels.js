// Axis labels of answers: what the caller wrote, not what the tokenizer made of it.

// A byte-fallback piece of SentencePiece (Llama): one UTF-8 byte of a character the vocabulary
// lacks.
const BYTE_PIECE = /^<0x[0-9A-Fa-f]{2}>$/;
// Text that draws nothing (a zero-width joiner, a format character alone).
const INVISIBLE = /^[\p{Cf}\p{Cc}\p{Z}]+$/u;

// Labels that draw nothing show their code points ("U+200D").
function visible(label) {
  if (!INVISIBLE.test(label)) return label;
  return [...label].map((c) => `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}`).join(' ');
}

// Each token's original text (Tokens.originalTexts: "Tôi" where the token is "toi"); special
// tokens, whose original text is empty, show the token itself ("[CLS]"). The byte pieces of one
// character share its label with their place among them ("랭 1/3", "랭 2/3", "랭 3/3" for
// <0xEB> <0x9E> <0xAD>): the character's text belongs to its last byte.
export function tokenLabels(tokens) {
  const original = (i) => tokens.originalTexts?.[i] ?? '';
  const labels = tokens.tokens.map((token, i) => (original(i).trim() ? original(i) : token));
  const n = labels.length;
  for (let i = 0; i < n; ++i) {
    if (!BYTE_PIECE.test(tokens.tokens[i]) || original(i)) continue;
    let last = i;
    while (last < n && BYTE_PIECE.test(tokens.tokens[last]) && !original(last)) ++last;
    if (last === n || !BYTE_PIECE.test(tokens.tokens[last])) continue;
    const character = visible(original(last));
    for (let k = i; k <= last; ++k) labels[k] = `${character} ${k - i + 1}/${last - i + 1}`;
    i = last;
  }
  return labels.map((label, i) => (BYTE_PIECE.test(tokens.tokens[i]) ? label : visible(label)));
}

// The labels an attention answer's axes count: its words with aggregateWords, else its tokens.
export function axisLabels(answer) {
  return answer.words?.length ? answer.words.map((w) => w.text) : tokenLabels(answer.tokens);
}

// Where the tokenizer cut `text` (sequence `sequence` of `tokens`: 0 the text, 1 the pair) to fit
// the model, as a code-point index, or null when every character reached a token.
export function cutAt(tokens, text, sequence = 0) {
  let end = 0;
  tokens.offsets?.forEach((offset, i) => {
    if ((tokens.sequenceIds?.[i] ?? 0) === sequence) end = Math.max(end, Number(offset.end ?? 0));
  });
  const characters = [...text];
  // Trailing spaces reach no token without having been cut.
  return characters.slice(end).join('').trim() ? end : null;
}

// Where a pair's second text starts among an answer's units (its words with aggregateWords, else
// its tokens), or -1 for a single text.
export function secondTextStart(answer) {
  const ids = answer.words?.length ? answer.words.map((w) => w.sequenceId ?? 0) : answer.tokens.sequenceIds ?? [];
  return ids.indexOf(1);
}

// The text and pair with the tokens at `positions` replaced by `mask` (exBERT's masking: "[MASK]"
// for BERT, "<mask>" for RoBERTa, which their tokenizers read as the mask token), by the tokens'
// code-point offsets in the text they came from.
// Whether position `i` of a Tokenize answer is a token of the texts that masking can replace (not
// a special token, not past the end).
export function maskablePosition(tokens, i) {
  return i >= 0 && i < tokens.tokens.length && (tokens.sequenceIds?.[i] ?? 0) >= 0 && !tokens.specialTokensMask?.[i];
}

export function maskedTexts(tokens, { text, pair }, positions, mask) {
  const texts = [[...text], [...(pair ?? '')]];
  const spans = positions
    .filter((i) => maskablePosition(tokens, i))
    .map((i) => ({ sequence: tokens.sequenceIds?.[i] ?? 0, start: Number(tokens.offsets[i].start ?? 0), end: Number(tokens.offsets[i].end ?? 0) }))
    .filter((span) => span.end > span.start)
    // From the end, so that the offsets of the spans still to replace stay right.
    .sort((a, b) => b.start - a.start);
  for (const { sequence, start, end } of spans) {
    // A space before the mask keeps it a token of its own, as a masked word is.
    texts[sequence].splice(start, end - start, ...(start > 0 && texts[sequence][start - 1] !== ' ' ? ` ${mask}` : mask));
  }
  return { text: texts[0].join(''), pair: pair ? texts[1].join('') : pair };
}
