import assert from 'node:assert/strict';
import test from 'node:test';
import { axisLabels, tokenLabels } from '../../src/labels.js';

const tokens = {
  tokens: ['[CLS]', 'to', '##i', 'ᄅ', '##ᅢᆼ', '[SEP]'],
  originalTexts: ['', 'Tô', 'i', '랭', '랭', ''],
};

test('labels are the original texts, and special tokens show themselves', () => {
  assert.deepEqual(tokenLabels(tokens), ['[CLS]', 'Tô', 'i', '랭', '랭', '[SEP]']);
  assert.deepEqual(tokenLabels({ tokens: ['▁', 'x'], originalTexts: [' ', 'x'] }), ['▁', 'x']);
});

test('with words, the axes are labelled by the words', () => {
  const words = [{ text: '[CLS]' }, { text: 'Tôi' }, { text: '랭' }, { text: '[SEP]' }];
  assert.deepEqual(axisLabels({ tokens, words }), ['[CLS]', 'Tôi', '랭', '[SEP]']);
  assert.deepEqual(axisLabels({ tokens, words: [] }), tokenLabels(tokens));
});
