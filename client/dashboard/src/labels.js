// Axis labels of answers: what the caller wrote, not what the tokenizer made of it.

// Each token's original text (Tokens.originalTexts: "Tôi" where the token is "toi"); special
// tokens, whose original text is empty, show the token itself ("[CLS]").
export function tokenLabels(tokens) {
  return tokens.tokens.map((token, i) => {
    const original = tokens.originalTexts?.[i] ?? '';
    return original.trim() ? original : token;
  });
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
