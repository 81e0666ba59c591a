// ONNX Runtime's CPU forward of the model bench/eager_reference.py exported (--onnx), for
// bench/engine_bench: times `--repeats` runs after `--warmup` untimed ones (8 unless given) and
// prints one JSON line with the median and minimum and the same output values the eager reference
// prints, so that the engine can be checked against it.
//
//   node onnxruntime_reference.js --model DIR/model-128.onnx --ids DIR/input_ids.json \
//     --threads 2 --repeats 5 --warmup 8
//
// Why eight: a new session's third and fourth runs still took 101-130 ms where the later ones took
// 78-92 (BERT base at 128 tokens, two threads), and at 512 tokens its first five took 700-960 ms
// where the later ones took 360-550; timing from the third run on counted that warm-up in ONNX
// Runtime's median.
//
// The session takes every graph optimisation ONNX Runtime has (its default, "all") and as many
// intra-op threads as the engine, one inter-op thread (the graph is one sequence of operators).
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function flags(argv) {
  const out = {threads: 1, repeats: 5, warmup: 8};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    if (!['model', 'ids', 'threads', 'repeats', 'warmup'].includes(name) || i + 1 >= argv.length) {
      throw new Error(
          `flag '${argv[i]}': expected --model, --ids, --threads, --repeats or --warmup with a value`);
    }
    out[name] = ['threads', 'repeats', 'warmup'].includes(name) ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!out.model || !out.ids) throw new Error('--model and --ids: expected both, got ' + argv.join(' '));
  return out;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

async function main() {
  const options = flags(process.argv.slice(2));
  const ids = JSON.parse(fs.readFileSync(options.ids, 'utf8'));
  const session = await ort.InferenceSession.create(options.model, {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    intraOpNumThreads: options.threads,
    interOpNumThreads: 1,
  });
  const shape = [1, ids.length];
  const feeds = {
    input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), shape),
    attention_mask: new ort.Tensor('int64', new BigInt64Array(ids.length).fill(1n), shape),
  };
  let outputs;
  for (let i = 0; i < options.warmup; ++i) outputs = await session.run(feeds);
  const seconds = [];
  for (let i = 0; i < options.repeats; ++i) {
    const start = process.hrtime.bigint();
    outputs = await session.run(feeds);
    seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  }
  const layers = session.outputNames.filter((name) => name.startsWith('attentions.')).length;
  const last = outputs.last_hidden_state;
  const attention = outputs[`attentions.${layers - 1}`];
  const tokens = attention.dims[3];
  // Head 0's last row of the last layer, as eager_reference.py prints it.
  const row = attention.data.subarray((tokens - 1) * tokens, (tokens - 1) * tokens + 16);
  console.log(JSON.stringify({
    onnxruntime_seconds_median: median(seconds),
    onnxruntime_seconds_min: Math.min(...seconds),
    onnxruntime_seconds: seconds,
    onnxruntime_version: ort.env.versions.common,
    last_hidden_state_row0: Array.from(last.data.subarray(0, 16)),
    attention_last_layer_head0_last_row: Array.from(row),
  }));
}

main().catch((error) => {
  console.error(`onnxruntime_reference: ${error.message}`);
  process.exit(1);
});
