import assert from 'node:assert/strict';
import test from 'node:test';
import { axisLabels, maskedTexts, tokenLabels } from '../../src/labels.js';

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

test("a character's byte pieces share its label, and invisible text shows its code points", () => {
  const tokens = {
    tokens: ['<s>', '▁', '<0xEB>', '<0x9E>', '<0xAD>', '<0xE2>', '<0x80>', '<0x8D>', '▁o', '<0xF0>'],
    originalTexts: ['', '', '', '', '랭', '', '', '\u200d', ' o', ''],
  };
  assert.deepEqual(tokenLabels(tokens), ['<s>', '▁', '랭 1/3', '랭 2/3', '랭 3/3', 'U+200D 1/3', 'U+200D 2/3', 'U+200D 3/3', ' o', '<0xF0>']);
  assert.deepEqual(tokenLabels({ tokens: ['zwj'], originalTexts: ['\u200d'] }), ['U+200D']);
});

test('masking replaces the chosen tokens by their offsets, in the text and the pair', () => {
  const tokens = {
    tokens: ['[CLS]', 'tôi', 'yêu', '[SEP]', 'việt', 'nam', '[SEP]'],
    sequenceIds: [-1, 0, 0, -1, 1, 1, -1],
    specialTokensMask: [1, 0, 0, 1, 0, 0, 1],
    offsets: [{}, { start: '0', end: '3' }, { start: '4', end: '7' }, {}, { start: '0', end: '4' }, { start: '5', end: '8' }, {}],
  };
  assert.deepEqual(maskedTexts(tokens, { text: 'Tôi yêu', pair: 'Việt Nam' }, [0, 2, 5], '[MASK]'), { text: 'Tôi [MASK]', pair: 'Việt [MASK]' });
  assert.deepEqual(maskedTexts(tokens, { text: 'Tôi yêu', pair: '' }, [1], '<mask>'), { text: '<mask> yêu', pair: '' });
});
