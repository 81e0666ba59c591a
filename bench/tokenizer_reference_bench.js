// The reference side of tokenizer_bench: Hugging Face's tokenizers library (the Rust crate, as its
// Node binding) encoding every corpus line with special tokens, on one thread (RAYON_NUM_THREADS=1,
// set by tokenizer_bench), `--repeats` times. Prints one JSON line: the token count of one pass and
// the seconds of each pass (encodeBatch alone; loading the file is not timed).
//
//   node bench/tokenizer_reference_bench.js --node_modules DIR --tokenizer FILE --corpus FILE \
//     [--repeats 3]
'use strict'
const fs = require('node:fs')
const path = require('node:path')
const { createRequire } = require('node:module')
const { parseArgs } = require('node:util')

const { values: args } = parseArgs({
  options: {
    node_modules: { type: 'string' },
    tokenizer: { type: 'string' },
    corpus: { type: 'string' },
    repeats: { type: 'string', default: '3' },
  },
})
for (const name of ['node_modules', 'tokenizer', 'corpus']) {
  if (!args[name]) {
    console.error(`--${name}: expected a path`)
    process.exit(2)
  }
}
const { Tokenizer } = createRequire(path.join(args.node_modules, '..', 'package.json'))('tokenizers')

async function main () {
  // One JSON string per line, as tests/data/multilingual_corpus.jsonl holds them.
  const texts = fs.readFileSync(args.corpus, 'utf8').split('\n').filter((line) => line.length > 0)
    .map((line) => JSON.parse(line))
  const tokenizer = Tokenizer.fromFile(args.tokenizer)
  const seconds = []
  let tokens = 0
  for (let i = 0; i < Number(args.repeats); ++i) {
    const start = process.hrtime.bigint()
    const encodings = await tokenizer.encodeBatch(texts, { addSpecialTokens: true })
    seconds.push(Number(process.hrtime.bigint() - start) / 1e9)
    tokens = encodings.reduce((sum, encoding) => sum + encoding.getIds().length, 0)
  }
  console.log(JSON.stringify({ tokens, seconds }))
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
