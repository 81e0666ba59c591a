import assert from 'node:assert/strict';
import test from 'node:test';
import { withControls } from '../../src/requests.js';

test("a server message names the page's control instead of the request field, and keeps its explanation", () => {
  assert.equal(
    withControls('window query positions [5, 2): expected 0 <= query_start < query_end <= 7, got start 5 and end 2; fix `window.query_start` / `window.query_end`'),
    'window query positions [5, 2): expected 0 <= query_start < query_end <= 7, got start 5 and end 2; fix "Window: rows"',
  );
  assert.equal(
    withControls('layer 99: expected an index in [-4, 4) (the model has 4 layers), got 99; fix `layers`'),
    'layer 99: expected an index in [-4, 4) (the model has 4 layers), got 99; fix "Layer"',
  );
  assert.equal(withControls('max_new_tokens: expected 1 to 1024, got 2000'), '"new tokens": expected 1 to 1024, got 2000');
  assert.equal(withControls('num_beams: expected 1 to 64, got 100'), '"beams": expected 1 to 64, got 100');
  assert.equal(withControls('top_p: expected a value in (0, 1], got 5'), '"top-p": expected a value in (0, 1], got 5');
  assert.equal(
    withControls('documents: expected at least one document, got none; add `documents`'),
    '"Documents, one per line": expected at least one document, got none; add "Documents, one per line"',
  );
  assert.equal(withControls('text: expected a non-empty UTF-8 text, got an empty one; set `text`'), '"Text": expected a non-empty UTF-8 text, got an empty one; set "Text"');
  assert.equal(
    withControls("model 'nosuch': not loaded; loaded models: a, b; set `model` to one of them"),
    `model 'nosuch': not loaded; loaded models: a, b; set "Model" to one of them`,
  );
  // A field the page has no control for stays as the server wrote it.
  assert.equal(withControls('tokenization.truncation: expected one of; set `tokenization.truncation`'), 'tokenization.truncation: expected one of; set `tokenization.truncation`');
});
