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
