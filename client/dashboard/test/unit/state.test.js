import assert from 'node:assert/strict';
import test from 'node:test';
import { crossAttentionDefaults, defaultState, formatState, parseState } from '../../src/state.js';

test('a link reads back as the state that wrote it', () => {
  const state = {
    ...defaultState(),
    view: 'documents',
    model: 'default',
    text: 'Tôi yêu Việt Nam quá & 랭체인',
    pair: 'second text',
    decoderText: 'Chèn bảng',
    block: 'decoder',
    truncate: true,
    zoom: 4,
    masked: [2, 5],
    layer: 3,
    head: 'mean',
    words: true,
    t: 2.5,
    topk: 4,
    qs: 0,
    qe: 64,
    heads: [0, 2],
    ab: 'AB',
    min: 0.25,
    query: 'chèn bảng',
    docs: ['a, b', 'c'],
    d2q: true,
    method: 'sampling',
    max: 40,
    beams: 3,
    temp: 0.7,
    topp: 0.9,
    seed: 7,
    b: { model: 'llama', text: null, pair: null, layer: 1, head: 0, block: 'decoder' },
  };
  assert.deepEqual(parseState(formatState(state)), state);
});

test('the defaults make an empty query string, and an empty one gives the defaults', () => {
  assert.equal(formatState(defaultState()), '');
  assert.deepEqual(parseState(''), defaultState());
});

test('the documented example link', () => {
  const state = parseState('?model=default&text=T%C3%B4i+y%C3%AAu&view=heatmap&layer=3&head=1');
  assert.equal(state.model, 'default');
  assert.equal(state.text, 'Tôi yêu');
  assert.equal(state.view, 'heatmap');
  assert.equal(state.layer, 3);
  assert.equal(state.head, 1);
});

test('values that are not what a field takes fall back to the defaults', () => {
  const state = parseState('?view=nonsense&layer=x&t=-1&head=avg');
  assert.equal(state.view, 'heatmap');
  assert.equal(state.layer, 0);
  assert.equal(state.t, 1);
  assert.equal(state.head, 0);
});

test('an encoder-decoder link names its decoder text as the API does', () => {
  const state = parseState('?model=translation&text=%3E%3Evie%3C%3C+Inserting+Tables&decoder_text=Ch%C3%A8n+b%E1%BA%A3ng&attn=cross&view=generate');
  assert.equal(state.decoderText, 'Chèn bảng');
  assert.equal(state.block, 'cross');
  assert.equal(state.view, 'generate');
  assert.equal(parseState('?attn=sideways&method=magic&zoom=0').block, 'cross');
  assert.equal(parseState('?method=magic').method, 'greedy');
  assert.equal(parseState('?zoom=0').zoom, 1);
  assert.equal(parseState('?b.attn=encoder').b.block, 'encoder');
  assert.equal(parseState('?b.attn=sideways').b.block, null);
});

test('cross-attention opens on the last decoder layer and the mean of heads, unless the link names them', () => {
  assert.deepEqual(crossAttentionDefaults('?model=translation&text=x', 3), { layer: 2, head: 'mean' });
  assert.deepEqual(crossAttentionDefaults('?model=translation&layer=0', 3), { head: 'mean' });
  assert.deepEqual(crossAttentionDefaults('?layer=1&head=2', 6), {});
});

test('a link\'s new tokens and beams past int32 stay within it, for the server\'s limit to name', () => {
  const state = parseState('?view=generate&max=999999999999&beams=5000000000&seed=7000000000');
  assert.equal(state.max, 2 ** 31 - 1);
  assert.equal(state.beams, 2 ** 31 - 1);
  assert.equal(state.seed, 7000000000);
});

test('a link\'s zoom ends at the page\'s largest, its layer and head within int32', () => {
  const state = parseState('?zoom=100000&layer=99999999999999&head=-99999999999999');
  assert.equal(state.zoom, 16);
  assert.equal(state.layer, 2 ** 31 - 1);
  assert.equal(state.head, -(2 ** 31 - 1));
});
