// The dashboard in a real browser: Debian's Chromium, headless, driven by puppeteer-core, against a
// real attnscope-server (started by tests/integration/dashboard_test.cc, which passes its URL).
// Every figure's values are compared with the same request sent to the API here, decoded here from
// the contract's documentation (little-endian float32), never with numbers written in the test.
//
//   node browser_test.mjs --url http://127.0.0.1:PORT/ --screenshots DIR --long-text TEXT
//
// The server has twelve models: "default" (checkpoints/default, a 4-layer, 4-head BERT
// cross-encoder), "llama" (stories260K, causal), "big" (a random 12-layer, 12-head BERT; TEXT is
// 512 of its tokens), "reranker" (tests/data/tiny-roberta, an XLM-RoBERTa cross-encoder in
// bge-reranker-v2-m3's layout with an XLM-R tokenizer.json), the encoder-decoders
// "translation" (checkpoints/translation, Marian English -> Vietnamese / Korean), "bart" and "t5"
// (tests/data/tiny-bart, tiny-t5: T5's decoder has three layers over its encoder's two), and
// tests/data's "distilbert" (a cross-encoder), "gpt2", "qwen2", "qwen3" and "mistral".
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parseArgs } from 'node:util';
import puppeteer from 'puppeteer-core';
import { pictureProbe } from './picture_probe.mjs';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    screenshots: { type: 'string' },
    'long-text': { type: 'string' },
    // A second server, started with --api_keys_file holding `api-key`.
    'keyed-url': { type: 'string' },
    'api-key': { type: 'string' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
const base = args.url.replace(/\/$/, '');
const VIETNAMESE = 'Tôi yêu Việt Nam quá';
const KOREAN = '나는 오늘 랭체인을 공부한다';

// The body of a successful POST of `body` to `method` of the HTTP/JSON API.
async function post(method, body) {
  const response = await fetch(`${base}/attnscope.v1.AttentionService/${method}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  assert.equal(response.status, 200, `${method}: ${text}`);
  return text;
}

async function api(method, body) {
  return JSON.parse(await post(method, body));
}

// Tensor.data is base64 of little-endian values (this machine's order too); copied so that the
// view is aligned.
function decoded(tensor, dtype, Type) {
  assert.equal(tensor.dtype, dtype);
  return new Type(Uint8Array.from(Buffer.from(tensor.data, 'base64')).buffer);
}
const float32 = (tensor) => decoded(tensor, 'DTYPE_FLOAT32', Float32Array);

// A streaming method's answer: one JSON message per line.
async function apiStream(method, body) {
  const text = await post(method, body);
  const messages = text.split('\n').filter((line) => line.trim()).map((line) => JSON.parse(line));
  assert.ok(!messages.some((m) => m.error), text);
  return messages;
}

// An axis label as the contract's Tokens.original_texts documents it: the text as written, or the
// token itself where that is empty (special tokens).
const tokenLabel = (tokens, i) => (tokens.originalTexts[i].trim() ? tokens.originalTexts[i] : tokens.tokens[i]);
const int32 = (tensor) => decoded(tensor, 'DTYPE_INT32', Int32Array);

let browser;
let page;
let profile;
let downloads;
// Chromium's downloads by guid: the suggested file name and the state its events last reported.
const downloadStates = new Map();
const consoleErrors = [];

const query = (params) => `/?${new URLSearchParams(params)}`;

// Clicks an export button and returns the path of the file it downloads, once Chromium reports the
// download completed: the file exists on disk before all of it is written.
async function exported(selector, name) {
  const file = path.join(downloads, name);
  fs.rmSync(file, { force: true });
  const before = new Set(downloadStates.keys());
  await page.click(selector);
  const done = () => [...downloadStates].some(([guid, d]) => !before.has(guid) && d.name === name && d.state === 'completed');
  const deadline = Date.now() + 20000;
  while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(done(), `download of ${name}: ${JSON.stringify([...downloadStates.values()])}`);
  return file;
}

async function waitReady() {
  await page.waitForFunction(() => document.body.dataset.status !== 'loading', { timeout: 90000 });
  const status = await page.evaluate(() => document.body.dataset.status);
  const error = await page.$eval('#error', (e) => e.textContent);
  return { status, error };
}

// Opens a dashboard link and waits for its view; the view must draw without any console error.
async function open(params) {
  consoleErrors.length = 0;
  await page.goto(base + query(params));
  const { status, error } = await waitReady();
  assert.equal(status, 'ready', error);
  assert.deepEqual(consoleErrors, []);
}

// Opens a model-internals link of a model without a training record: the NOT_FOUND answer that
// says so is an HTTP 404, which Chromium logs; nothing else may be.
async function openInternals(model) {
  consoleErrors.length = 0;
  await page.goto(base + query({ model, view: 'internals' }));
  const { status, error } = await waitReady();
  assert.equal(status, 'ready', error);
  assert.ok(consoleErrors.every((e) => e.includes('404') && e.includes('GetTrainingRecord')), consoleErrors.join('\n'));
}

// Moves the open page to another link as its back button would, without reloading it.
async function navigate(params) {
  consoleErrors.length = 0;
  await rerender(() =>
    page.evaluate((search) => {
      history.pushState(null, '', search);
      dispatchEvent(new PopStateEvent('popstate'));
    }, query(params)),
  );
}

// Runs `action` (a click, a change) and waits for the render it causes.
async function rerender(action) {
  const before = await page.evaluate(() => document.body.dataset.render);
  await action();
  await page.waitForFunction((b) => document.body.dataset.render !== b, { timeout: 30000 }, before);
  const { status, error } = await waitReady();
  assert.equal(status, 'ready', error);
}

// The page down to the end of its content (a full-page shot would pad short views to the window).
async function screenshot(name) {
  await page.evaluate(() => window.scrollTo(0, 0));
  const height = await page.evaluate(() => Math.ceil(document.body.getBoundingClientRect().bottom) + 16);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  await page.screenshot({ path: path.join(args.screenshots, `${name}.png`), clip: { x: 0, y: 0, width, height } });
}

// The data attributes of every element `selector` matches. (page.$$eval makes a handle per
// element, which took 15 s for the 16 K cells of a position-embedding table.)
function datasets(selector) {
  return page.evaluate((s) => [...document.querySelectorAll(s)].map((e) => ({ ...e.dataset })), selector);
}

async function labels(selector) {
  return page.$$eval(selector, (texts) => texts.map((t) => t.textContent));
}

// Every <rect class="cell"> under `scope` holds the value of `expected` (row-major, `cols` wide)
// at its data-row and data-col: exactly, read back as float32, unless `tolerance` is given.
async function expectCells(scope, expected, cols, tolerance = 0) {
  const cells = await page.evaluate(
    (selector) => [...document.querySelectorAll(selector)].map((r) => [Number(r.dataset.row), Number(r.dataset.col), r.dataset.value]),
    `${scope} rect.cell`,
  );
  assert.equal(cells.length, expected.length, `${scope}: cell count`);
  for (const [row, col, text] of cells) {
    const want = expected[row * cols + col];
    const got = tolerance ? Number(text) : Math.fround(Number(text));
    assert.ok(Math.abs(got - want) <= tolerance, `${scope} [${row}, ${col}]: page ${text}, server ${want}`);
  }
}

// The value the tooltip shows for the cell at (row, col) of the heatmap `scope`, hovered with
// the mouse: the path for heatmaps drawn as one image.
async function hoverValue(scope, row, col, cell) {
  const selector = `${scope} rect.hover-area`;
  // The cell into view: within the figure's scrolling box, then within the window.
  await page.evaluate(
    (s, x, y) => {
      const area = document.querySelector(s);
      const scroller = area.closest('.figure-scroll');
      if (scroller) {
        const [a, b] = [area.getBoundingClientRect(), scroller.getBoundingClientRect()];
        scroller.scrollBy(a.left + x - b.left - b.width / 2, a.top + y - b.top - b.height / 2);
      }
      const a = area.getBoundingClientRect();
      window.scrollBy(a.left + x - innerWidth / 2, a.top + y - innerHeight / 2);
    },
    selector,
    (col + 0.5) * cell,
    (row + 0.5) * cell,
  );
  const area = await page.$(selector);
  const box = await area.boundingBox();
  await page.mouse.move(box.x + (col + 0.5) * cell, box.y + (row + 0.5) * cell);
  const text = await page.$eval('#tooltip', (t) => t.textContent);
  return Math.fround(Number(text.slice(text.lastIndexOf(':') + 1)));
}

describe('dashboard in headless Chromium', () => {
  before(async () => {
    fs.mkdirSync(args.screenshots, { recursive: true });
    profile = fs.mkdtempSync(path.join(os.tmpdir(), 'attnscope-chromium-'));
    downloads = fs.mkdtempSync(path.join(os.tmpdir(), 'attnscope-downloads-'));
    browser = await puppeteer.launch({
      executablePath: args.chromium,
      userDataDir: profile,
      // The background-networking switches keep Chromium from calling out: there is no network.
      // The omnibox popup's page (a WebUI renderer headless Chromium loads again as pages are
      // opened) took a core for a second at each page load.
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--disable-features=WebUIOmniboxPopup,WebUIOmniboxFullPopup,WebUIOmniboxAimPopup,PreloadTopChromeWebUI',
      ],
    });
    page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 800 });
    page.on('console', (message) => {
      if (message.type() === 'error') consoleErrors.push(`${message.text()} (${message.location()?.url ?? ''})`);
    });
    page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));
    const session = await page.createCDPSession();
    session.on('Browser.downloadWillBegin', ({ guid, suggestedFilename }) => downloadStates.set(guid, { name: suggestedFilename, state: 'inProgress' }));
    session.on('Browser.downloadProgress', ({ guid, state }) => {
      if (downloadStates.has(guid)) downloadStates.get(guid).state = state;
    });
    await session.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads, eventsEnabled: true });
  });

  after(async () => {
    await browser?.close();
    for (const dir of [profile, downloads]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  it('heatmap: labels are the original text, every cell is the server value, hover shows it', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'heatmap', layer: 3, head: 1 });
    const rows = await labels('svg.figure text.row-label');
    for (const word of ['Tôi', 'yêu', 'Việt']) assert.ok(rows.includes(word), `${word} in ${rows}`);
    assert.deepEqual(await labels('svg.figure text.col-label'), rows);
    const answer = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [3], heads: [1] });
    const n = answer.tokens.tokens.length;
    await expectCells('g.heatmap[data-layer="3"][data-head="1"]', float32(answer.attentions), n);
    const cell = await page.$eval('rect.cell', (r) => Number(r.getAttribute('width')));
    assert.equal(await hoverValue('g.heatmap', 2, 3, cell), float32(answer.attentions)[2 * n + 3]);
    await page.mouse.move(0, 0);
    await screenshot('heatmap');
  });

  it('heatmap: the words toggle labels whole words ("랭체인을") with the server word-level values', async () => {
    await open({ model: 'default', text: KOREAN, layer: 2, head: 'mean' });
    assert.ok(!(await labels('text.row-label')).includes('랭체인을'));
    await rerender(() => page.click('input[name="words"]'));
    assert.ok(page.url().includes('words=1'));
    const rows = await labels('text.row-label');
    assert.ok(rows.includes('랭체인을'), rows.join(' '));
    const answer = await api('GetAttention', {
      model: 'default',
      text: KOREAN,
      layers: [2],
      headAggregation: 'HEAD_AGGREGATION_MEAN',
      aggregateWords: true,
    });
    assert.deepEqual(rows, answer.words.map((w) => w.text));
    await expectCells('g.heatmap', float32(answer.attentions), answer.words.length);
    await screenshot('heatmap-words');
  });

  it('head view of an encoder-decoder over a long source: each block windowed by its own length', async () => {
    // 69 source tokens and 3 decoder positions: the decoder's short side is not windowed to 64,
    // and top-k (which applies to every block of the answer) is not asked of its 3-key rows.
    const text = '>>vie<< To insert a new table into the document, choose Table - Insert Table. Then set the number of rows and columns, the width of each column, the borders, and the background colour of each cell, and press OK to place it at the cursor. You can also drag the table to another place in the document.';
    const request = { model: 'translation', text, decoderText: 'Chèn bảng', layers: [1] };
    const cases = [
      ['cross', { ...request, window: { keyEnd: 64 } }, (a) => a.crossAttentions],
      ['decoder', request, (a) => a.decoderAttentions],
      ['encoder', { model: 'translation', text, layers: [1], window: { queryEnd: 64, keyEnd: 64 }, topK: 4 }, (a) => a.attentions],
      // A window start alone: the end the page picks stays within the sequence.
      ['encoder', { model: 'translation', text, layers: [1], window: { queryStart: 66, queryEnd: 69, keyEnd: 64 }, topK: 4 }, (a) => a.attentions, { qs: 66 }],
    ];
    for (const [attn, expected, tensorOf, extra] of cases) {
      await open({ model: 'translation', text, decoder_text: 'Chèn bảng', view: 'heads', attn, layer: 1, ...extra });
      const answer = await api('GetAttention', expected);
      const tensor = tensorOf(answer);
      const [, heads, rows, columns] = tensor.shape.map(Number);
      const values = float32(tensor);
      const lines = await datasets('line.link');
      assert.equal(lines.length, heads * rows * columns, attn);
      const [first] = lines;
      assert.ok(values.includes(Math.fround(Number(first.value))), attn);
    }
  });

  it('head view: a line per head, query and key with the server weight; hover isolates, heads toggle', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'heads', layer: 2 });
    const answer = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [2] });
    const values = float32(answer.attentions);
    const n = answer.tokens.tokens.length;
    const heads = answer.heads.length;
    const lines = await datasets('line.link');
    assert.equal(lines.length, heads * n * n);
    for (const { head, row, col, value } of lines) {
      assert.equal(Math.fround(Number(value)), values[(Number(head) * n + Number(row)) * n + Number(col)]);
    }
    const queryLabels = await labels('text.query-label');
    for (const word of ['Tôi', 'yêu', 'Việt']) assert.ok(queryLabels.includes(word));

    await page.hover('text.query-label[data-position="1"]');
    const visible = await page.$$eval('line.link', (ls) =>
      ls.filter((l) => getComputedStyle(l).visibility !== 'hidden').map((l) => l.dataset.row),
    );
    assert.equal(visible.length, heads * n);
    assert.ok(visible.every((row) => row === '1'));
    await page.mouse.move(0, 0);

    await page.click('.head-checkboxes input[value="0"]');
    assert.ok(new URL(page.url()).searchParams.get('heads') === '1,2,3');
    const hidden = (await datasets('line.link[display="none"]')).map((l) => l.head);
    assert.equal(hidden.length, n * n);
    assert.ok(hidden.every((h) => h === '0'));
    await screenshot('heads');
  });

  it('model view: every layer and head, each cell the server value; a click opens the heatmap', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'model' });
    const answer = await api('GetAttention', { model: 'default', text: VIETNAMESE });
    const [layers, heads, n] = answer.attentions.shape.map(Number);
    const values = float32(answer.attentions);
    assert.equal(await page.$$eval('g.thumbnail', (gs) => gs.length), layers * heads);
    for (let l = 0; l < layers; ++l) {
      for (let h = 0; h < heads; ++h) {
        const offset = (l * heads + h) * n * n;
        await expectCells(`g.thumbnail[data-layer="${l}"][data-head="${h}"]`, values.subarray(offset, offset + n * n), n);
      }
    }
    const legend = await labels('.token-legend .label');
    for (const word of ['Tôi', 'yêu', 'Việt']) assert.ok(legend.includes(word));
    await screenshot('model');
    await rerender(() => page.click('g.thumbnail[data-layer="2"][data-head="3"] rect.open'));
    const url = new URL(page.url());
    // The heatmap is the default view, which links leave out.
    assert.equal(url.searchParams.get('view') ?? 'heatmap', 'heatmap');
    assert.equal(await page.$eval('nav button[aria-pressed="true"]', (b) => b.value), 'heatmap');
    assert.equal(url.searchParams.get('layer'), '2');
    assert.equal(url.searchParams.get('head'), '3');
    const offset = (2 * heads + 3) * n * n;
    await expectCells('g.heatmap[data-layer="2"][data-head="3"]', values.subarray(offset, offset + n * n), n);
  });

  it('across layers: each layer the server head mean, then the server rollout', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'layers' });
    const answer = await api('GetAttention', {
      model: 'default',
      text: VIETNAMESE,
      headAggregation: 'HEAD_AGGREGATION_MEAN',
      rollout: true,
    });
    const [layers, , n] = answer.attentions.shape.map(Number);
    const means = float32(answer.attentions);
    for (let l = 0; l < layers; ++l) {
      await expectCells(`g.heatmap[data-layer="${l}"]`, means.subarray(l * n * n, (l + 1) * n * n), n);
    }
    await expectCells('g.heatmap[data-layer="rollout"]', float32(answer.rollout), n);
    assert.ok((await labels('g.heatmap[data-layer="rollout"] text.row-label')).includes('Việt'));
    await screenshot('layers');
  });

  it('temperature: T = 1 is the server attention; higher T raises every row entropy, lower T lowers it', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'temperature', layer: 3, head: 1 });
    const answer = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [3], heads: [1], includeScores: true });
    const n = answer.tokens.tokens.length;
    await expectCells('g.heatmap[data-head]', float32(answer.attentions), n, 1e-6);
    // The sweep's T = 1 panel is the attention too, the scores are the server's, and the values
    // are written in cells wide enough.
    await expectCells('g.heatmap[data-t="1"]', float32(answer.attentions), n, 1e-6);
    await expectCells('g.heatmap[data-block="scores"]', float32(answer.scores), n);
    const sweep = await datasets('g.heatmap[data-t]');
    assert.deepEqual(sweep.map((p) => Number(p.t)), [0.25, 0.5, 1, 2, 4]);
    for (let i = 1; i < sweep.length; ++i) assert.ok(Number(sweep[i].entropy) > Number(sweep[i - 1].entropy));
    const written = await page.$$eval('g.heatmap[data-block="scores"] text.cell-value', (ts) => ts.map((t) => t.textContent));
    assert.deepEqual(written, [...float32(answer.scores)].map((v) => v.toFixed(2)));
    const entropies = () => page.$$eval('text.entropy', (ts) => ts.map((t) => Number(t.dataset.value)));
    const setT = (log10) =>
      page.$eval(
        'input[name="t"]',
        (slider, value) => {
          slider.value = String(value);
          slider.dispatchEvent(new Event('input', { bubbles: true }));
        },
        log10,
      );
    const atOne = await entropies();
    assert.equal(atOne.length, n);
    await setT(0.5);
    const hot = await entropies();
    assert.equal(new URL(page.url()).searchParams.get('t'), '3.16');
    await setT(-0.5);
    const cold = await entropies();
    for (let r = 0; r < n; ++r) {
      assert.ok(hot[r] > atOne[r], `row ${r}: T 3.16 entropy ${hot[r]} <= T 1 ${atOne[r]}`);
      assert.ok(cold[r] < atOne[r], `row ${r}: T 0.32 entropy ${cold[r]} >= T 1 ${atOne[r]}`);
    }
    await setT(0);
    await screenshot('temperature');
  });

  it('temperature on a causal model: the page masks keys after the query as the model did', async () => {
    const text = 'Once upon a time there was a cat';
    await open({ model: 'llama', text, view: 'temperature', layer: 4, head: 5 });
    const answer = await api('GetAttention', { model: 'llama', text, layers: [4], heads: [5] });
    const n = answer.tokens.tokens.length;
    await expectCells('g.heatmap[data-head]', float32(answer.attentions), n, 1e-6);
    // Raw scores: masked keys grey, not coloured as a score.
    const masked = await datasets('g.heatmap[data-block="scores"] rect.cell[data-masked]');
    assert.equal(masked.length, (n * (n - 1)) / 2);
    assert.ok(masked.every((c) => Number(c.col) > Number(c.row)));
  });

  it('sliding window (mistral, 4 keys): keys outside it are grey and exactly 0 in the heatmap, model and temperature views', async () => {
    const text = 'Once upon a time, there was a little girl';
    const info = (await api('ListModels', {})).models.find((m) => m.name === 'mistral');
    assert.deepEqual(info.layerSlidingWindows, [4, 4]);
    const answer = await api('GetAttention', { model: 'mistral', text, layers: [1], heads: [2], includeScores: true });
    const n = answer.tokens.tokens.length;
    assert.ok(n > 6, `${n} tokens: too few for the window to hide anything`);
    // Query q sees key k when q - 4 < k <= q (transformers' sliding_window).
    const hidden = (row, col) => col > row || row - col >= 4;
    let count = 0;
    for (let r = 0; r < n; ++r) for (let c = 0; c < n; ++c) count += hidden(r, c) ? 1 : 0;
    const check = async (scope) => {
      const masked = await datasets(`${scope} rect.cell[data-masked]`);
      assert.equal(masked.length, count);
      assert.ok(masked.every((c) => hidden(Number(c.row), Number(c.col))));
    };
    await open({ model: 'mistral', text, layer: 1, head: 2 });
    await expectCells('g.heatmap[data-head]', float32(answer.attentions), n, 1e-6);
    await check('g.heatmap[data-head]');
    const values = float32(answer.attentions);
    for (let r = 0; r < n; ++r) for (let c = 0; c < n; ++c) if (hidden(r, c)) assert.equal(values[r * n + c], 0);

    await open({ model: 'mistral', text, view: 'model' });
    await check('g.thumbnail[data-layer="1"][data-head="2"]');
    await open({ model: 'mistral', text, view: 'layers' });
    await check('g.heatmap[data-layer="1"]');

    // T = 1 is the server's attention only if the page's softmax leaves out the same keys.
    await open({ model: 'mistral', text, view: 'temperature', layer: 1, head: 2 });
    await expectCells('g.heatmap[data-t="1"]', float32(answer.attentions), n, 1e-6);
    await check('g.heatmap[data-block="scores"]');
    assert.match((await labels('p.note')).join(' '), /and 4 or more before it \(layer 1's sliding window\) are masked/);
  });

  it('generate: a text that nearly fills a decoder asks for only the tokens it leaves room for', async () => {
    const text = 'Once upon a time, there was a little girl who lived in a village near the forest. She liked to play with her friends and her dog every day';
    const used = (await api('Tokenize', { model: 'mistral', text })).tokens.tokens.length;
    const room = 64 - used;
    assert.ok(room > 0 && room < 20, `${used} tokens`);
    // The pair box's text is no part of a prompt: Generate sends none.
    await open({ model: 'mistral', view: 'generate', text, pair: 'dog '.repeat(30), max: 20, method: 'greedy', layer: 0, head: 0 });
    assert.ok((await labels('p.note')).join(' ').includes(`At most ${room} new tokens: mistral's 64 positions less the text's ${used} tokens.`));
    assert.equal(await page.$eval('#control-pair', (label) => label.hidden), true);
    assert.ok((await page.$$('ol.generated li')).length >= 1);
  });

  it('query and documents: ranked by the server relevance score, query-to-document cells the server values', async () => {
    await open({ model: 'default', view: 'documents', layer: 3, head: 'mean' });
    const check = async (queryText, docs, withBackward, model = 'default', layer = 3) => {
      const answer = await api('CrossAttention', {
        model,
        query: queryText,
        documents: docs,
        layers: [layer],
        headAggregation: 'HEAD_AGGREGATION_MEAN',
        includeDocumentToQuery: withBackward,
      });
      const sections = await datasets('section.document');
      const byScore = answer.documents.map((d, i) => [d.relevanceScore, i]).sort((a, b) => b[0] - a[0]);
      assert.deepEqual(
        sections.map((s) => Number(s.index)),
        byScore.map(([, i]) => i),
      );
      sections.forEach((s, rank) => {
        assert.equal(Number(s.rank), rank + 1);
        assert.equal(Math.fround(Number(s.score)), Math.fround(answer.documents[Number(s.index)].relevanceScore));
      });
      // One colour bar per document, from 0 to the largest value of any block shown.
      let largest = 0;
      for (const doc of answer.documents) {
        for (const block of withBackward ? [doc.queryToDocument, doc.documentToQuery] : [doc.queryToDocument]) {
          largest = Math.max(largest, ...float32(block));
        }
      }
      for (const domain of await page.$$eval('section.document g.colorbar', (bars) => bars.map((b) => b.dataset.domain))) {
        const [lo, hi] = domain.split(',').map(Number);
        assert.equal(lo, 0);
        assert.ok(Math.abs(hi - largest) <= 1e-6 * largest, `colour bar ${domain}, largest value ${largest}`);
      }
      for (const [i, doc] of answer.documents.entries()) {
        const scope = `section.document[data-index="${i}"]`;
        await expectCells(`${scope} g.heatmap[data-block="query-to-document"]`, float32(doc.queryToDocument), doc.documentPositions.length);
        if (withBackward) {
          await expectCells(`${scope} g.heatmap[data-block="document-to-query"]`, float32(doc.documentToQuery), doc.queryPositions.length);
        }
      }
      return answer;
    };
    const korean = await page.$eval('input[name="query"]', (q) => q.value);
    assert.equal(korean, '랭체인 뭐야');
    const docs = await page.$eval('textarea[name="docs"]', (t) => t.value.split('\n'));
    await check(korean, docs, false);
    // The LangChain document comes first, whatever order it was given in.
    assert.ok((await page.$eval('section.document[data-rank="1"] .document-text', (p) => p.textContent)).startsWith('랭체인은'));
    const queryLabels = await labels('section.document[data-rank="1"] text.row-label');
    assert.ok(queryLabels.includes('랭') && queryLabels.includes('야'), queryLabels.join(' '));
    await screenshot('documents');

    await rerender(() => page.click('input[name="d2q"]'));
    await check(korean, docs, true);
    await rerender(() => page.click('xpath/.//button[text()="Vietnamese"]'));
    const vietnameseQuery = await page.$eval('input[name="query"]', (q) => q.value);
    const vietnameseDocs = await page.$eval('textarea[name="docs"]', (t) => t.value.split('\n'));
    await check(vietnameseQuery, vietnameseDocs, true);
    const documentLabels = await labels('section.document text.col-label');
    assert.ok(documentLabels.includes('chèn') && documentLabels.includes('bảng'), documentLabels.join(' '));

    // The XLM-R reranker: the same view, its ranking and scores the server's, its Unigram pieces
    // (▁ marks a word start) as labels.
    await open({ model: 'reranker', view: 'documents', layer: 1, head: 'mean' });
    const rerankerDocs = await page.$eval('textarea[name="docs"]', (t) => t.value.split('\n'));
    assert.equal(await page.$eval('input[name="query"]', (q) => q.value), '랭체인 뭐야');
    const reranked = await check('랭체인 뭐야', rerankerDocs, false, 'reranker', 1);
    assert.equal(reranked.documents.length, 2);
    const rerankerLabels = await labels('section.document[data-rank="1"] text.row-label');
    assert.ok(rerankerLabels.length > 0, 'no query labels');
    await screenshot('documents-reranker');
    await rerender(() => page.click('xpath/.//button[text()="Vietnamese"]'));
    await check(
      await page.$eval('input[name="query"]', (q) => q.value),
      await page.$eval('textarea[name="docs"]', (t) => t.value.split('\n')),
      false,
      'reranker',
      1,
    );
  });

  it('compare: two panels, one 0..1 scale, each the server value for its own layer and head', async () => {
    await open({ model: 'default', text: VIETNAMESE, view: 'compare', layer: 3, head: 1, 'b.layer': 0, 'b.head': 'mean' });
    assert.deepEqual(await page.$$eval('g.colorbar', (gs) => gs.map((g) => g.dataset.domain)), ['0,1']);
    const a = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [3], heads: [1] });
    const b = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [0], headAggregation: 'HEAD_AGGREGATION_MEAN' });
    const n = a.tokens.tokens.length;
    await expectCells('g.heatmap[data-panel="a"]', float32(a.attentions), n);
    await expectCells('g.heatmap[data-panel="b"]', float32(b.attentions), n);
    assert.ok((await labels('g.heatmap[data-panel="b"] text.col-label')).includes('yêu'));
    await screenshot('compare');

    // An encoder-decoder with a decoder text: both panels its cross-attention (the "Attention"
    // picker's default), B at its own layer; then B its decoder's self-attention.
    const source = '>>vie<< Inserting Tables';
    await open({ model: 'translation', text: source, decoder_text: 'Chèn bảng', view: 'compare', layer: 2, head: 1, 'b.layer': 0 });
    const all = await api('GetAttention', { model: 'translation', text: source, decoderText: 'Chèn bảng', heads: [1] });
    const [, , rows, cols] = all.crossAttentions.shape.map(Number);
    const cross = float32(all.crossAttentions);
    await expectCells('g.heatmap[data-panel="a"][data-block="cross"]', cross.subarray(2 * rows * cols, 3 * rows * cols), cols);
    await expectCells('g.heatmap[data-panel="b"][data-block="cross"]', cross.subarray(0, rows * cols), cols);
    assert.deepEqual(await labels('g.heatmap[data-panel="b"] text.title'), ['translation · cross-attention · decoder layer 0 · head 1']);
    await rerender(() => page.select('select[name="b.attn"]', 'decoder'));
    assert.equal(new URL(page.url()).searchParams.get('b.attn'), 'decoder');
    await expectCells('g.heatmap[data-panel="b"][data-block="decoder"]', float32(all.decoderAttentions).subarray(0, rows * rows), rows);
    await screenshot('compare-translation');
  });

  it('model internals: the position embeddings and the loss curves are the server values', async () => {
    await open({ model: 'default', view: 'internals' });
    const name = 'bert.embeddings.position_embeddings.weight';
    const parameter = await api('GetParameter', { model: 'default', name });
    const cols = Number(parameter.tensor.shape[1]);
    await expectCells(`g.heatmap[data-parameter="${name}"]`, float32(parameter.tensor), cols);
    const record = await api('GetTrainingRecord', { model: 'default' });
    const points = await datasets('circle.point');
    const expected = record.points.flatMap((p) => Object.entries(p.values).map(([key, value]) => ({ key, step: p.step, value })));
    assert.equal(points.length, expected.length);
    for (const want of expected) {
      const got = points.find((p) => p.key === want.key && p.step === want.step);
      assert.ok(got, `${want.key} at step ${want.step}`);
      assert.equal(Number(got.value), want.value);
    }
    await screenshot('internals');
  });

  it('model internals of a Llama model say it has no position table, and why', async () => {
    consoleErrors.length = 0;
    await page.goto(base + query({ model: 'llama', view: 'internals' }));
    assert.equal((await waitReady()).status, 'ready');
    const notes = (await labels('p.note')).join(' ');
    assert.match(notes, /no position-embedding table.*RoPE/);
    assert.match(notes, /no training record/);
    // The NOT_FOUND answer that says so is an HTTP 404, which Chromium logs; nothing else may be.
    assert.ok(consoleErrors.every((e) => e.includes('404') && e.includes('GetTrainingRecord')), consoleErrors.join('\n'));
  });

  it('an API error is shown with the server message', async () => {
    consoleErrors.length = 0;
    await page.goto(base + query({ model: 'default', text: VIETNAMESE, layer: 9 }));
    const { status, error } = await waitReady();
    assert.equal(status, 'error');
    const response = await fetch(`${base}/attnscope.v1.AttentionService/GetAttention`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'default', text: VIETNAMESE, layers: [9], heads: [0] }),
    });
    const { message } = await response.json();
    // The server's explanation, with the page's control where it names the request's field.
    assert.ok(message.endsWith('; fix `layers`'), message);
    assert.ok(error.includes(message.replace('`layers`', '"Layer"')), `page: ${error}\nserver: ${message}`);
    assert.equal(await page.$eval('select[name="layer"]', (s) => s.selectedOptions[0].textContent), '9 (not available)');
    assert.ok(consoleErrors.every((e) => e.includes('400')), consoleErrors.join('\n'));
    // Generate's fields are named by the view's own controls.
    await page.goto(base + query({ model: 'llama', view: 'generate', text: 'Once upon a time', max: 2000 }));
    assert.match((await waitReady()).error, /: "new tokens": expected 1 to 1024, got 2000/);
    // A negative layer counts from the last, as the API's do: layer -1 of 4 is layer 3.
    await open({ model: 'default', text: VIETNAMESE, layer: -1 });
    assert.equal(await page.$eval('select[name="layer"]', (s) => s.value), '3');
    assert.deepEqual(await page.$$eval('select[name="layer"] option', (o) => o.map((x) => x.value)), ['0', '1', '2', '3']);
    assert.equal(new URL(page.url()).searchParams.get('layer'), '3');
  });

  it('a server that takes API keys: the page asks for one, a wrong key is refused, the right one shows the view', async () => {
    const keyed = args['keyed-url'].replace(/\/$/, '');
    consoleErrors.length = 0;
    await page.goto(`${keyed}/?text=${encodeURIComponent(VIETNAMESE)}`);
    let { status, error } = await waitReady();
    assert.equal(status, 'error');
    assert.ok(error.includes('unauthenticated'), error);
    assert.equal(await page.$eval('#api-key', (f) => f.hidden), false);
    const submit = async (key) => {
      await page.$eval('#api-key input[name="key"]', (input, value) => { input.value = value; }, key);
      const before = await page.evaluate(() => document.body.dataset.render);
      await page.click('#api-key button[type="submit"]');
      await page.waitForFunction((b) => document.body.dataset.render !== b, { timeout: 30000 }, before);
      return waitReady();
    };
    ({ status, error } = await submit('not-the-key'));
    assert.equal(status, 'error');
    assert.ok(error.includes('not one of'), error);
    ({ status, error } = await submit(args['api-key']));
    assert.equal(status, 'ready', error);
    assert.equal(await page.$eval('#api-key', (f) => f.hidden), true);
    assert.ok((await labels('g.heatmap text.row-label')).includes('Việt'));
    // The key is this tab's: the main server's pages do not need it, and get it without harm.
    await page.evaluate(() => sessionStorage.clear());
  });

  it('a link to a model the server does not have shows the error and leaves the model picker usable', async () => {
    consoleErrors.length = 0;
    await page.goto(base + query({ model: 'nosuchmodel', text: VIETNAMESE }));
    const { status, error } = await waitReady();
    assert.equal(status, 'error');
    assert.ok(error.includes("'nosuchmodel'"), error);
    assert.match(error, /set "Model" to one of them/);
    assert.equal(await page.$eval('input[name="text"]', (i) => i.value), VIETNAMESE);
    const choices = await page.$$eval('select[name="model"] option', (o) => o.map((x) => x.value));
    assert.ok(choices.includes('default'), choices.join(' '));
    await rerender(() => page.select('select[name="model"]', 'default'));
    assert.equal(await page.evaluate(() => document.body.dataset.status), 'ready');
    assert.equal(new URL(page.url()).searchParams.get('model'), 'default');
  });

  it('export: the current figure downloads as SVG and PNG', async () => {
    await open({ model: 'default', text: VIETNAMESE, layer: 1, head: 2 });
    const svgFile = await exported('#export-svg', 'attnscope-heatmap-default.svg');
    const pngFile = await exported('#export-png', 'attnscope-heatmap-default.png');
    const svg = fs.readFileSync(svgFile, 'utf8');
    assert.match(svg, /^<svg[^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.ok(svg.includes('>Việt<') && svg.includes('data-value'));
    const png = fs.readFileSync(pngFile);
    assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47]); // "PNG"
    assert.ok(png.readUInt32BE(16) > 200, 'PNG width');

    // What the page shows around the figures in HTML comes along: ranks, scores and texts of
    // documents, the model view's token legend.
    const exportedSvg = async (params, name) => {
      await open(params);
      const file = await exported('#export-svg', `${name}.svg`);
      return fs.readFileSync(file, 'utf8');
    };
    const documentsSvg = await exportedSvg({ model: 'default', view: 'documents', layer: 3, head: 'mean' }, 'attnscope-documents-default');
    const ranked = await api('CrossAttention', { model: 'default', query: '랭체인 뭐야', documents: ['오늘 저녁에는 김치찌개를 먹었다', '랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다'], layers: [3] });
    const best = Math.max(...ranked.documents.map((d) => d.relevanceScore));
    assert.ok(documentsSvg.includes(`#1 · score ${best.toFixed(3)} · document 2: 랭체인은`), 'rank, score and text of document 2');
    assert.ok(documentsSvg.includes('Query: 랭체인 뭐야'));
    const modelSvg = await exportedSvg({ model: 'default', view: 'model', text: VIETNAMESE }, 'attnscope-model-default');
    assert.match(modelSvg, /Tokens: 0 \[CLS\]  1 Tôi/);
    // Generate's tokens, their log-probabilities and the score; a narrow heatmap's whole title.
    const generateSvg = await exportedSvg({ model: 'translation', view: 'generate', text: '>>vie<< Inserting Tables', max: 4 }, 'attnscope-generate-translation');
    const messages = await apiStream('Generate', { model: 'translation', prompt: '>>vie<< Inserting Tables', maxNewTokens: 4 });
    const first = messages.find((m) => m.token).token;
    assert.ok(generateSvg.includes(`score ${messages.at(-1).done.score.toFixed(4)}`), 'score');
    assert.ok(generateSvg.includes(`0 ${first.text.trim() ? first.text : first.token} (${first.logprob.toFixed(3)})`), 'first token and its log p');
    const titleFits = () =>
      page.$eval('svg.figure', (svg) => {
        const title = svg.querySelector('text.title').getBBox();
        return title.x + title.width <= Number(svg.getAttribute('width'));
      });
    assert.ok(await titleFits(), 'Generate title within the figure');
    await open({ model: 'translation', text: '>>vie<< Inserting Tables', decoder_text: 'Chèn bảng', layer: 2, head: 'mean' });
    assert.ok(await titleFits(), 'cross-attention title within the figure');
    // Salience's score, baseline and colour scale.
    const salienceSvg = await exportedSvg({ model: 'default', view: 'salience', text: 'insert a table', pair: 'choose Table - Insert Table' }, 'attnscope-salience-default');
    const attributed = await api('Attribute', { model: 'default', text: 'insert a table', textPair: 'choose Table - Insert Table', methods: ['ATTRIBUTION_METHOD_OCCLUSION', 'ATTRIBUTION_METHOD_GRADIENT_X_INPUT', 'ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS'] });
    assert.ok(salienceSvg.includes(`Score ${attributed.score.toFixed(4)}`), 'score');
    assert.ok(salienceSvg.includes(`baseline score ${attributed.baselineScore.toFixed(4)}`), 'baseline');
    assert.match(salienceSvg, /Colours: a method's column runs from red/);
  });

  it('encoder-decoder, from the start page: Translate first, then cross-, decoder self- and encoder self-attention', async () => {
    const source = '>>vie<< Inserting Tables';
    await open({});
    await rerender(() => page.select('select[name="model"]', 'translation'));
    assert.match(await page.$eval('#model-summary', (p) => p.textContent), /encoder-decoder: encoder 3 layers × 4 heads .* decoder 3 layers × 4 heads/);
    assert.equal(await page.$eval('#control-pair', (e) => e.hidden), true);
    assert.equal(await page.$eval('#control-decoder', (e) => e.hidden), false);
    // An example source, then the model's own translation of it: no typing.
    await rerender(() => page.click('xpath/.//button[text()="English → Vietnamese"]'));
    assert.equal(await page.$eval('input[name="text"]', (i) => i.value), source);
    await rerender(() => page.click('#translate'));
    const generated = await apiStream('Generate', { model: 'translation', prompt: source, maxNewTokens: 64 });
    const translation = generated.at(-1).done.text.trim();
    assert.equal(await page.$eval('input[name="decoderText"]', (i) => i.value), translation);
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('decoder_text'), translation);

    // The heatmap's cross-attention: target tokens down (decoder_labels), source tokens across; as
    // the CLI shows it, in the last decoder layer and the mean of the heads.
    assert.equal(url.searchParams.get('layer'), '2');
    assert.equal(url.searchParams.get('head'), 'mean');
    const answer = await api('GetAttention', { model: 'translation', text: source, decoderText: translation, layers: [2], headAggregation: 'HEAD_AGGREGATION_MEAN' });
    const rows = answer.decoderLabels.tokens.length;
    const n = answer.tokens.tokens.length;
    await expectCells('g.heatmap[data-block="cross"][data-layer="2"][data-head="mean"]', float32(answer.crossAttentions), n);
    assert.deepEqual(await labels('g.heatmap text.row-label'), answer.decoderLabels.tokens.map((_, i) => tokenLabel(answer.decoderLabels, i)));
    assert.deepEqual(await labels('g.heatmap text.col-label'), answer.tokens.tokens.map((_, i) => tokenLabel(answer.tokens, i)));
    assert.ok((await labels('g.heatmap text.row-label')).includes('Chèn'));
    await screenshot('translation-cross');

    // The decoder's self-attention: causal, the hidden cells marked; then the encoder's.
    await rerender(() => page.select('select[name="attn"]', 'decoder'));
    await expectCells('g.heatmap[data-block="decoder"]', float32(answer.decoderAttentions), rows);
    const masked = await datasets('g.heatmap rect.cell[data-masked]');
    assert.equal(masked.length, (rows * (rows - 1)) / 2);
    assert.ok(masked.every((c) => Number(c.col) > Number(c.row)));
    await rerender(() => page.select('select[name="attn"]', 'encoder'));
    await expectCells('g.heatmap[data-block="encoder"]', float32(answer.attentions), n);

    // A shared link with the translation and no layer opens where "Translate first" did.
    await open({ model: 'translation', text: source, decoder_text: translation });
    assert.equal(new URL(page.url()).searchParams.get('layer'), '2');
    await expectCells('g.heatmap[data-block="cross"][data-layer="2"][data-head="mean"]', float32(answer.crossAttentions), n);
  });

  it('Translate first: a translation of a source changed meanwhile is dropped, a second press translates the new one', async () => {
    await open({ model: 'translation', text: '>>vie<< Creating a Formula in the Commands Window' });
    // The first translation's request is held until the source has changed, as a slow answer would be.
    let held;
    const hold = (request) => {
      if (!held && request.url().endsWith('/Generate')) held = request;
      else request.continue();
    };
    await page.setRequestInterception(true);
    page.on('request', hold);
    try {
      await page.click('#translate');
      await page.waitForFunction(() => document.body.dataset.status === 'loading');
      while (!held) await new Promise((resolve) => setTimeout(resolve, 10));
      await rerender(() => page.click('xpath/.//button[text()="English → Korean"]'));
      // The page has dropped the request by now; the interception of a dropped request is gone.
      await held.continue().catch(() => {});
      await rerender(() => page.click('#translate'));
    } finally {
      page.off('request', hold);
      await page.setRequestInterception(false);
    }
    const source = await page.$eval('input[name="text"]', (i) => i.value);
    assert.match(source, /^>>kor<< /);
    const generated = await apiStream('Generate', { model: 'translation', prompt: source, maxNewTokens: 64 });
    const translation = generated.at(-1).done.text.trim();
    assert.equal(await page.$eval('input[name="decoderText"]', (i) => i.value), translation);
    assert.equal(new URL(page.url()).searchParams.get('decoder_text'), translation);
  });

  it('bad picks name their control and draw nothing stale: decoder layer or head past the model, top-k, a new source after Translate first', async () => {
    const source = '>>vie<< Inserting Tables';
    const failing = async (params) => {
      consoleErrors.length = 0;
      await page.goto(base + query(params));
      const { status, error } = await waitReady();
      assert.equal(status, 'error', error);
      return error;
    };
    // The decoder's layers and heads are picked from an answer of every layer: past them, the
    // page would have drawn layer 0 under the title of layer 7.
    assert.match(await failing({ model: 'translation', text: source, decoder_text: 'Chèn bảng', layer: 7 }), /"Decoder layer" 7: expected 0 to 2/);
    assert.equal(await page.$$eval('g.heatmap', (g) => g.length), 0);
    assert.match(await failing({ model: 'translation', text: source, decoder_text: 'Chèn bảng', view: 'heads', layer: 3 }), /"Decoder layer" 3: expected 0 to 2/);
    assert.match(await failing({ model: 'translation', text: source, decoder_text: 'Chèn bảng', layer: 2, head: 9 }), /"Head" 9: expected mean, max or 0 to 3/);
    // The server refuses top-k; the control that fixes it stays on the page.
    assert.match(await failing({ model: 'default', text: VIETNAMESE, view: 'heads', topk: -3 }), /"top-k keys"/);
    await rerender(() => page.$eval('input[name="topk"]', (input) => {
      input.value = '2';
      input.dispatchEvent(new Event('change'));
    }));
    const { status, error } = await waitReady();
    assert.equal(status, 'ready', error);
    assert.ok((await datasets('line.link')).length > 0);

    // Positions and heads a link names that the text or layer lacks: said and left out.
    await open({ model: 'default', text: VIETNAMESE, mask: '-1,999,2' });
    assert.match(await page.$eval('p.masked', (p) => p.textContent), /token 2 replaced by \[MASK\] \(-1, 999: not a token of this text that can be masked, left out\)/);
    await open({ model: 'default', text: VIETNAMESE, view: 'heads', heads: '9,-1' });
    assert.ok((await page.$$eval('main p.note', (ps) => ps.map((p) => p.textContent))).some((t) => t.startsWith('Heads 9, -1 of the link are not heads of this layer')));
    assert.ok((await datasets('line.link')).length > 0);

    // A translation is of its source: typing another source drops it.
    await open({ model: 'translation', text: source });
    await rerender(() => page.click('#translate'));
    assert.notEqual(await page.$eval('input[name="decoderText"]', (i) => i.value), '');
    await rerender(() => page.$eval('input[name="text"]', (input) => {
      input.value = '>>vie<< Deleting Rows and Columns';
      input.dispatchEvent(new Event('change'));
    }));
    assert.equal((await waitReady()).status, 'ready');
    assert.equal(await page.$eval('input[name="decoderText"]', (i) => i.value), '');
    assert.equal(new URL(page.url()).searchParams.get('decoder_text'), null);
    assert.equal(await page.$$eval('g.heatmap[data-block="cross"]', (g) => g.length), 0);
  });

  it('views that draw only an encoder-decoder\'s encoder say so', async () => {
    for (const view of ['layers', 'temperature']) {
      await open({ model: 'translation', text: '>>vie<< Inserting Tables', decoder_text: 'Chèn bảng', view });
      const notes = await page.$$eval('main p.note', (ps) => ps.map((p) => p.textContent));
      assert.ok(notes.some((n) => n.includes("this view shows its encoder's self-attention")), `${view}: ${notes.join(' | ')}`);
    }
    await open({ model: 'translation', text: '>>vie<< Inserting Tables', view: 'layers' });
    const layerTitles = await page.$$eval('g.heatmap text.title', (ts) => ts.map((t) => t.textContent));
    assert.equal(layerTitles.filter((t) => t.startsWith('encoder layer ')).length, 3, layerTitles.join(' | '));
  });

  it('a translation of a long source: its few rows are tall enough for every label, in Generate and the cross-attention heatmap', async () => {
    const words = Array.from({ length: 300 }, (_, i) => ['table', 'insert', 'the', 'page', 'format'][i % 5]).join(' ');
    const text = `>>vie<< ${words}`;
    for (const [params, selector] of [
      [{ view: 'generate', max: 20 }, 'g.heatmap[data-block="cross"]'],
      [{ decoder_text: 'Chèn bảng vào trang', layer: 2, head: 'mean' }, 'g.heatmap[data-block="cross"]'],
    ]) {
      await open({ model: 'translation', text, ...params });
      const rows = await page.$$eval(`${selector} text.row-label`, (ts) => ts.map((t) => ({ shown: getComputedStyle(t).visibility !== 'hidden', y: Number(t.getAttribute('y')) })));
      assert.ok(rows.length >= 5, `${params.view ?? 'heatmap'}: ${rows.length} rows`);
      assert.ok(rows.every((r) => r.shown), `${params.view ?? 'heatmap'}: every row label shown`);
      assert.ok(rows[1].y - rows[0].y >= 10, `${params.view ?? 'heatmap'}: rows ${rows[1].y - rows[0].y} px apart`);
    }
  });

  it('a text too long for an address stays in the tab: the view reloads, a copied link says what was lost', async () => {
    const text = '나는 오늘 랭체인을 공부한다 '.repeat(150).trim();
    await open({ model: 'default', truncate: 1 });
    await rerender(() => page.$eval('input[name="text"]', (input, value) => {
      input.value = value;
      input.dispatchEvent(new Event('change'));
    }, text));
    assert.equal((await waitReady()).status, 'ready');
    const url = page.url();
    assert.ok(url.length < 8192, `address of ${url.length} characters`);
    assert.equal(new URL(url).searchParams.get('kept'), '1');
    const shown = await labels('g.heatmap text.row-label');
    await page.reload();
    assert.equal((await waitReady()).status, 'ready');
    assert.equal(await page.$eval('input[name="text"]', (i) => i.value), text);
    assert.deepEqual(await labels('g.heatmap text.row-label'), shown);
    // Opened elsewhere, without the tab's history: said, not drawn with another text.
    const other = await browser.newPage();
    try {
      await other.goto(url);
      await other.waitForFunction(() => ['ready', 'error'].includes(document.body.dataset.status), { timeout: 30000 });
      assert.match(await other.$eval('#error', (e) => e.textContent), /too long for an address .* Paste yours into "Text"/);
    } finally {
      await other.close();
    }
  });

  it('Generate on an encoder names the served models that generate; beam search says when its tokens come', async () => {
    await open({ model: 'default', view: 'generate' });
    const models = (await api('ListModels', {})).models.filter((m) => m.isCausal || m.isEncoderDecoder).map((m) => m.name);
    assert.ok(models.includes('translation'));
    const said = await page.$$eval('main p.note', (ps) => ps.map((p) => p.textContent).join(' '));
    assert.ok(said.includes(`Pick one that does in "Model": ${models.join(', ')}.`), said);
    await open({ model: 'translation', view: 'generate', text: '>>vie<< Inserting Tables', method: 'beam', max: 4 });
    assert.match(await page.$$eval('main p.note', (ps) => ps.map((p) => p.textContent).join(' ')), /arrive when the search has finished/);
  });

  it('encoder-decoder layers the encoder lacks: T5 decoder layer 2 over its 2 encoder layers', async () => {
    const text = 'hello world';
    await open({ model: 't5', text, decoder_text: 'hallo welt', layer: 2, head: 3 });
    const options = await page.$$eval('select[name="layer"] option', (o) => o.map((x) => x.value));
    assert.deepEqual(options, ['0', '1', '2']);
    const answer = await api('GetAttention', { model: 't5', text, decoderText: 'hallo welt' });
    const [, heads, rows, n] = answer.crossAttentions.shape.map(Number);
    const offset = (2 * heads + 3) * rows * n;
    await expectCells('g.heatmap[data-block="cross"]', float32(answer.crossAttentions).subarray(offset, offset + rows * n), n);
    // "Translate first" within T5's 64 positions: at most 63 new tokens after the start token.
    await rerender(() => page.click('#translate'));
    const generated = await apiStream('Generate', { model: 't5', prompt: text, maxNewTokens: 63 });
    assert.equal(await page.$eval('input[name="decoderText"]', (i) => i.value), generated.at(-1).done.text.trim());
  });

  it('generate: each token, its log-probability and its attention row as the API streams them', async () => {
    const check = async (params, request) => {
      await open({ view: 'generate', ...params });
      const messages = await apiStream('Generate', { outputAttentions: true, ...request });
      const tokens = messages.filter((m) => m.token).map((m) => m.token);
      const items = await datasets('ol.generated li');
      assert.equal(items.length, tokens.length);
      tokens.forEach((token, i) => {
        assert.equal(Number(items[i].logprob), token.logprob);
        assert.equal(Number(items[i].id), token.id ?? 0);
      });
      const context = messages[0].header.promptTokens.tokens.length;
      const encoderDecoder = Boolean(messages[0].header.encoderDecoder);
      const cols = encoderDecoder ? context : context + tokens.length - 1;
      const expected = new Float32Array(tokens.length * cols);
      tokens.forEach((token, r) => expected.set(float32(token.attention), r * cols));
      await expectCells(`g.heatmap[data-block="${encoderDecoder ? 'cross' : 'self'}"]`, expected, cols);
      assert.equal(Number(await page.$eval('p.generated-text', (p) => p.dataset.score)), messages.at(-1).done.score);
      return messages;
    };
    const prompt = 'Once upon a time';
    await check({ model: 'llama', text: prompt, layer: 4, head: 'mean', max: 8 }, { model: 'llama', prompt, maxNewTokens: 8, layers: [4], headAggregation: 'HEAD_AGGREGATION_MEAN' });
    assert.equal((await datasets('g.heatmap rect.cell[data-masked]')).length, (7 * 8) / 2);
    await screenshot('generate');
    await check(
      { model: 'llama', text: prompt, layer: 1, head: 2, max: 6, method: 'sampling', temp: 0.8, topp: 0.9, seed: 7 },
      { model: 'llama', prompt, maxNewTokens: 6, layers: [1], heads: [2], method: 'DECODING_METHOD_SAMPLING', temperature: 0.8, topP: 0.9, seed: '7' },
    );
    await check(
      { model: 'llama', text: prompt, layer: 0, head: 0, max: 5, method: 'beam', beams: 3 },
      { model: 'llama', prompt, maxNewTokens: 5, layers: [0], heads: [0], method: 'DECODING_METHOD_BEAM_SEARCH', numBeams: 3 },
    );
    // A translation, and from it the heatmap of its cross-attention.
    const source = '>>vie<< Inserting Tables';
    const messages = await check({ model: 'translation', text: source, layer: 2, head: 1 }, { model: 'translation', prompt: source, maxNewTokens: 20, layers: [2], heads: [1] });
    // Then its decoder's self-attention: GetAttention's over the written text, whose
    // cross-attention rows are the streamed ones within float rounding.
    const decoderText = messages.at(-1).done.text.trim();
    const readBack = await api('GetAttention', { model: 'translation', text: source, decoderText, layers: [2], heads: [1] });
    const written = readBack.decoderLabels.tokens.length;
    await expectCells('g.heatmap[data-block="decoder"]', float32(readBack.decoderAttentions), written);
    const streamed = messages.filter((m) => m.token).map((m) => float32(m.token.attention));
    assert.equal(streamed.length, written);
    const sourceTokens = readBack.tokens.tokens.length;
    const crossRows = float32(readBack.crossAttentions);
    streamed.forEach((row, r) => row.forEach((v, c) => assert.ok(Math.abs(v - crossRows[r * sourceTokens + c]) < 1e-5, `row ${r}, key ${c}`)));
    assert.match(await page.$eval('p.decoder-self', (p) => p.textContent), /differs from the streamed rows by at most/);
    assert.equal(await page.$eval('p.decoder-self', (p) => p.dataset.unwrittenRow ?? null), null);
    await screenshot('generate-translation');
    await rerender(() => page.click('button[name="open-cross"]'));
    assert.equal(new URL(page.url()).searchParams.get('decoder_text'), decoderText);
    const answer = await api('GetAttention', { model: 'translation', text: source, decoderText, layers: [2], heads: [1] });
    await expectCells('g.heatmap[data-block="cross"]', float32(answer.crossAttentions), answer.tokens.tokens.length);

    // Stopped at its length before the end-of-text token: the read-back's last row, which writes
    // that token, is said not to have been written.
    const cut = await check({ model: 'translation', text: source, layer: 2, head: 1, max: 2 }, { model: 'translation', prompt: source, maxNewTokens: 2, layers: [2], heads: [1] });
    assert.equal(cut.at(-1).done.finishReason, 'FINISH_REASON_LENGTH');
    assert.equal(await page.$eval('p.decoder-self', (p) => p.dataset.unwrittenRow), '2');
    assert.match(await page.$eval('p.decoder-self', (p) => p.textContent), /last row, writing the end-of-text token, was not written: the generation stopped at 2 new tokens/);
  });

  it('generate: 200 tokens are drawn row by row, the page never busy for long, the picture the streamed rows', async () => {
    const prompt = 'Once upon a time';
    // The page's own record of main-thread tasks over 50 ms, from its first script on.
    const observer = await page.evaluateOnNewDocument(() => {
      window.longTasks = [];
      new PerformanceObserver((list) => window.longTasks.push(...list.getEntries().map((e) => e.duration))).observe({ type: 'longtask', buffered: true });
    });
    try {
      await open({ model: 'llama', view: 'generate', text: prompt, layer: 4, head: 'mean', max: 200 });
    } finally {
      await page.removeScriptToEvaluateOnNewDocument(observer.identifier);
    }
    const longest = await page.evaluate(() => Math.max(0, ...window.longTasks));
    // Drawing every row again at each token made 150 tokens one 25 s task.
    assert.ok(longest < 2000, `longest task ${longest} ms`);
    const messages = await apiStream('Generate', { model: 'llama', prompt, maxNewTokens: 200, outputAttentions: true, layers: [4], headAggregation: 'HEAD_AGGREGATION_MEAN' });
    const tokens = messages.filter((m) => m.token).map((m) => m.token);
    assert.equal((await datasets('ol.generated li')).length, tokens.length);
    // 200 rows are painted as one image: the last row's cells read by hovering.
    const cell = await page.$eval('g.heatmap[data-block="self"] image', (i) => Number(i.getAttribute('height')) / 200);
    const last = float32(tokens.at(-1).attention);
    for (const col of [0, 3, last.length - 1]) assert.equal(await hoverValue('g.heatmap', 199, col, cell), last[col]);
  });

  it('salience: each method per token and per word is the API Attribute answer, beside the [CLS] attention', async () => {
    const text = 'how do I insert a table';
    const pair = 'To insert a new table, choose Table - Insert Table.';
    await open({ model: 'default', view: 'salience', text, pair });
    const methods = ['ATTRIBUTION_METHOD_OCCLUSION', 'ATTRIBUTION_METHOD_GRADIENT_X_INPUT', 'ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS'];
    const answer = await api('Attribute', { model: 'default', text, textPair: pair, methods });
    const keys = ['occlusion', 'gradientXInput', 'integratedGradients'];
    for (const key of keys) await expectCells(`g.heatmap[data-method="${key}"]`, Float32Array.from(answer[key]), 1);
    const attention = await api('GetAttention', {
      model: 'default',
      text,
      textPair: pair,
      layers: [-1],
      headAggregation: 'HEAD_AGGREGATION_MEAN',
      window: { queryStart: 0, queryEnd: 1 },
    });
    await expectCells('g.heatmap[data-method="attention"]', float32(attention.attentions), 1);
    assert.equal(Number(await page.$eval('p.note[data-score]', (p) => p.dataset.score)), answer.score);
    assert.deepEqual(await labels('g.heatmap text.row-label'), answer.tokens.tokens.map((_, i) => tokenLabel(answer.tokens, i)));
    await screenshot('salience');
    await rerender(() => page.click('input[name="words"]'));
    assert.deepEqual(await labels('g.heatmap text.row-label'), answer.words.map((w) => w.text));
    for (const key of keys) await expectCells(`g.heatmap[data-method="${key}"]`, Float32Array.from(answer.words.map((w) => w[key])), 1);
  });

  it('head view of a pair: sentence A/B filter, threshold, attention received; of a translation: cross-attention lines', async () => {
    const text = 'how do I insert a table';
    const pair = 'choose Table - Insert Table';
    await open({ model: 'default', text, pair, view: 'heads', layer: 2 });
    const answer = await api('GetAttention', { model: 'default', text, textPair: pair, layers: [2] });
    const second = answer.tokens.sequenceIds.indexOf(1);
    const n = answer.tokens.tokens.length;
    const values = float32(answer.attentions);
    const visibleLines = () => datasets('line.link:not([display="none"])');
    await page.select('select[name="ab"]', 'AB');
    let visible = await visibleLines();
    assert.equal(visible.length, 4 * second * (n - second));
    assert.ok(visible.every((l) => Number(l.row) < second && Number(l.col) >= second));
    await page.$eval('input[name="min"]', (slider) => {
      slider.value = '0.1';
      slider.dispatchEvent(new Event('input', { bubbles: true }));
    });
    visible = await visibleLines();
    assert.ok(visible.length > 0 && visible.every((l) => Math.fround(Number(l.value)) >= 0.1));
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('ab'), 'AB');
    assert.equal(url.searchParams.get('min'), '0.1');
    // Received: the shown lines' weights into each key, averaged over the four heads.
    const totals = await datasets('text.total');
    for (const { position, total } of totals) {
      const key = Number(position);
      let sum = 0;
      for (let h = 0; h < 4; ++h) {
        for (let q = 0; q < second; ++q) {
          const v = values[(h * n + q) * n + key];
          if (key >= second && v >= 0.1) sum += v;
        }
      }
      assert.ok(Math.abs(Number(total) - sum / 4) < 1e-6, `key ${key}: page ${total}, server ${sum / 4}`);
    }
    await screenshot('heads-pair');

    const source = '>>vie<< Inserting Tables';
    await open({ model: 'translation', text: source, decoder_text: 'Chèn bảng', view: 'heads', layer: 1 });
    const cross = await api('GetAttention', { model: 'translation', text: source, decoderText: 'Chèn bảng', layers: [1] });
    const crossValues = float32(cross.crossAttentions);
    const rows = cross.decoderLabels.tokens.length;
    const cols = cross.tokens.tokens.length;
    const lines = await datasets('line.link');
    assert.equal(lines.length, 4 * rows * cols);
    for (const { head, row, col, value } of lines) {
      assert.equal(Math.fround(Number(value)), crossValues[(Number(head) * rows + Number(row)) * cols + Number(col)]);
    }
    assert.ok((await labels('text.query-label')).includes('Chèn'));
    await screenshot('heads-translation');
  });

  it('model view of an encoder-decoder: every decoder layer and head of its cross- and decoder self-attention', async () => {
    const source = '>>vie<< Inserting Tables';
    const answer = await api('GetAttention', { model: 'translation', text: source, decoderText: 'Chèn bảng' });
    for (const [block, tensor] of [['cross', answer.crossAttentions], ['decoder', answer.decoderAttentions]]) {
      await open({ model: 'translation', text: source, decoder_text: 'Chèn bảng', view: 'model', attn: block });
      const [layers, heads, rows, cols] = tensor.shape.map(Number);
      const values = float32(tensor);
      assert.equal(await page.$$eval('g.thumbnail', (gs) => gs.length), layers * heads);
      for (let l = 0; l < layers; ++l) {
        for (let h = 0; h < heads; ++h) {
          const offset = (l * heads + h) * rows * cols;
          await expectCells(`g.thumbnail[data-layer="${l}"][data-head="${h}"]`, values.subarray(offset, offset + rows * cols), cols);
        }
      }
      if (block === 'decoder') assert.equal((await datasets('rect.cell[data-masked]')).length, layers * heads * ((rows * (rows - 1)) / 2));
    }
    await screenshot('model-translation-decoder');
  });

  it('masking (exBERT): a click on a token label replaces it by [MASK]; cells are the API answer for the masked text', async () => {
    await open({ model: 'default', text: VIETNAMESE, layer: 3, head: 'mean' });
    const tokens = (await api('Tokenize', { model: 'default', text: VIETNAMESE })).tokens;
    const position = tokens.originalTexts.indexOf('yêu');
    await rerender(() => page.click(`g.heatmap text.row-label[data-index="${position}"]`));
    assert.equal(new URL(page.url()).searchParams.get('mask'), String(position));
    const { start, end } = tokens.offsets[position];
    const chars = [...VIETNAMESE];
    const masked = [...chars.slice(0, Number(start)), '[MASK]', ...chars.slice(Number(end))].join('');
    const answer = await api('GetAttention', { model: 'default', text: masked, layers: [3], headAggregation: 'HEAD_AGGREGATION_MEAN' });
    assert.equal(answer.tokens.tokens[position], '[MASK]');
    await expectCells('g.heatmap', float32(answer.attentions), answer.tokens.tokens.length);
    assert.ok((await labels('g.heatmap text.row-label')).includes('[MASK]'));
    await rerender(() => page.click('button[name="unmask"]'));
    assert.equal(new URL(page.url()).searchParams.get('mask'), null);
  });

  it('a window in every view: temperature rows, across-layers and model-view rows and columns are the API windows', async () => {
    const text = 'Once upon a time there was a cat';
    const window = { queryStart: 2, queryEnd: 5, keyStart: 1, keyEnd: 6 };
    await open({ model: 'llama', text, view: 'temperature', layer: 2, head: 3, qs: 2, qe: 5 });
    const rows = await api('GetAttention', { model: 'llama', text, layers: [2], heads: [3], window: { queryStart: 2, queryEnd: 5 } });
    const n = rows.tokens.tokens.length;
    await expectCells('g.heatmap[data-head]', float32(rows.attentions), n, 1e-6);
    await open({ model: 'llama', text, view: 'layers', qs: 2, qe: 5, ks: 1, ke: 6 });
    const means = await api('GetAttention', { model: 'llama', text, headAggregation: 'HEAD_AGGREGATION_MEAN', rollout: true, window });
    await expectCells('g.heatmap[data-layer="1"]', float32(means.attentions).subarray(15, 30), 5);
    await expectCells('g.heatmap[data-layer="rollout"]', float32(means.rollout), 5);
    await open({ model: 'llama', text, view: 'model', qs: 2, qe: 5, ks: 1, ke: 6 });
    const all = await api('GetAttention', { model: 'llama', text, window });
    const heads = Number(all.attentions.shape[1]);
    await expectCells('g.thumbnail[data-layer="4"][data-head="7"]', float32(all.attentions).subarray((4 * heads + 7) * 15, (4 * heads + 8) * 15), 5);
    // Keys after each query stay grey in the window: key 1 + c after query 2 + r.
    const masked = await datasets('g.thumbnail[data-layer="0"][data-head="0"] rect.cell[data-masked]');
    assert.deepEqual(masked.map((c) => [Number(c.row), Number(c.col)]), [[0, 2], [0, 3], [0, 4], [1, 3], [1, 4], [2, 4]]);
  });

  it('every view opens on every architecture, each heatmap and salience the API answer', async () => {
    // The cross-encoders, whose classifier the salience view attributes.
    const classifiers = ['default', 'reranker', 'distilbert'];
    const views = ['heatmap', 'heads', 'model', 'layers', 'temperature', 'generate', 'documents', 'salience', 'compare', 'internals'];
    const models = {
      default: {},
      reranker: {},
      distilbert: {},
      llama: {},
      gpt2: {},
      qwen2: {},
      qwen3: {},
      mistral: {},
      translation: { decoder_text: 'Chèn bảng' },
      bart: { decoder_text: 'hello' },
      t5: { decoder_text: 'hallo' },
    };
    const started = Date.now();
    const times = [];
    await open({});
    for (const [model, extra] of Object.entries(models)) {
      for (const view of views) {
        const start = Date.now();
        await navigate({ model, view, text: 'hello world', pair: 'hello there', max: 4, layer: 0, head: 0, ...extra }).catch((error) => {
          throw new Error(`${model} ${view}: ${error.message}`);
        });
        times.push([Date.now() - start, model, view]);
        // The only console error allowed: the 404 of a model without a training record.
        assert.ok(consoleErrors.every((e) => e.includes('404') && e.includes('GetTrainingRecord')), `${model} ${view}: ${consoleErrors.join('\n')}`);
        const shown = await page.$$eval('main svg.figure, main p.note', (e) => e.length);
        assert.ok(shown > 0, `${model} ${view}: nothing drawn or said`);
        if (view === 'heatmap' || view === 'compare') {
          // Layer 0, head 0 of the pair, or of an encoder-decoder's cross-attention; compare's
          // panel B follows panel A.
          const answer = await api('GetAttention', {
            model,
            text: 'hello world',
            ...(extra.decoder_text ? { decoderText: extra.decoder_text } : { textPair: 'hello there' }),
            layers: [0],
            heads: [0],
          });
          const tensor = extra.decoder_text ? answer.crossAttentions : answer.attentions;
          const panel = view === 'compare' ? '[data-panel="b"]' : '';
          await expectCells(`g.heatmap[data-block="${extra.decoder_text ? 'cross' : 'encoder'}"]${panel}`, float32(tensor), Number(tensor.shape[3]));
        }
        if (view === 'salience' && classifiers.includes(model)) {
          const answer = await api('Attribute', { model, text: 'hello world', textPair: 'hello there' });
          for (const key of ['occlusion', 'gradientXInput', 'integratedGradients']) {
            await expectCells(`g.heatmap[data-method="${key}"]`, Float32Array.from(answer[key]), 1);
          }
        }
      }
    }
    times.sort((a, b) => b[0] - a[0]);
    console.log(`# ${views.length} views x ${Object.keys(models).length} models in ${((Date.now() - started) / 1000).toFixed(1)} s; slowest ${times.slice(0, 5).map(([ms, m, v]) => `${m} ${v} ${ms} ms`).join(', ')}`);
  });

  it('model internals of encoder-decoders: BART learned positions, Marian sinusoids, T5 relative buckets', async () => {
    await openInternals('bart');
    for (const name of ['model.encoder.embed_positions.weight', 'model.decoder.embed_positions.weight']) {
      const parameter = await api('GetParameter', { model: 'bart', name });
      await expectCells(`g.heatmap[data-parameter="${name}"]`, float32(parameter.tensor), Number(parameter.tensor.shape[1]));
    }
    await openInternals('t5');
    const bias = 'encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight';
    const buckets = await api('GetParameter', { model: 't5', name: bias });
    await expectCells(`g.heatmap[data-parameter="${bias}"]`, float32(buckets.tensor), Number(buckets.tensor.shape[1]));
    await openInternals('translation');
    assert.match((await labels('p.note')).join(' '), /sinusoidal/);
    // Drawn as an image: hovered cells show transformers' formula, sin then cos halves of 256.
    const cell = await page.$eval('g.heatmap[data-parameter="sinusoidal"] rect.hover-area', (r) => Number(r.getAttribute('width')) / 256);
    for (const [position, dim] of [[5, 3], [40, 200]]) {
      const k = dim < 128 ? dim : dim - 128;
      const angle = position / 10000 ** ((2 * k) / 256);
      const want = Math.fround(dim < 128 ? Math.sin(angle) : Math.cos(angle));
      assert.ok(Math.abs((await hoverValue('g.heatmap[data-parameter="sinusoidal"]', position, dim, cell)) - want) < 1e-6);
    }
    await page.mouse.move(0, 0);
  });

  it('causal cells are marked, a pair has a divider, compare follows a model with fewer layers', async () => {
    const text = 'Once upon a time';
    await open({ model: 'llama', text, layer: 2, head: 1 });
    const n = (await api('Tokenize', { model: 'llama', text })).tokens.tokens.length;
    const masked = await datasets('rect.cell[data-masked]');
    assert.equal(masked.length, (n * (n - 1)) / 2);
    assert.ok(masked.every((c) => Number(c.col) > Number(c.row) && Number(c.value) === 0));
    // stories260K spells Korean in byte pieces: each labelled with its character and place.
    await open({ model: 'llama', text: KOREAN });
    const pieces = await labels('g.heatmap text.row-label');
    assert.ok(['랭 1/3', '랭 2/3', '랭 3/3'].every((l) => pieces.includes(l)), pieces.join(' '));
    assert.ok(!pieces.some((l) => l.startsWith('<0x')), pieces.join(' '));

    await open({ model: 'default', text: 'how do I insert a table', pair: 'choose Table - Insert Table' });
    assert.equal(await page.$$eval('line.divider', (l) => l.length), 2);

    await open({ model: 'translation', text: 'hello', pair: 'dropped' });
    const tokens = await api('Tokenize', { model: 'translation', text: 'hello' });
    assert.equal((await labels('g.heatmap text.row-label')).length, tokens.tokens.tokens.length);

    await open({ model: 'llama', text: VIETNAMESE, view: 'compare', layer: 4, head: 5, 'b.model': 'default' });
    assert.match((await labels('p.note')).join(' '), /default has 4 layers, so it shows its last layer, 3/);
    const b = await api('GetAttention', { model: 'default', text: VIETNAMESE, layers: [3], heads: [3] });
    await expectCells('g.heatmap[data-panel="b"]', float32(b.attentions), b.tokens.tokens.length);
  });

  it('a 512-token input on a 12-layer, 12-head model streams in float16 with progress', async () => {
    const text = args['long-text'];
    const tokens = (await api('Tokenize', { model: 'big', text })).tokens.tokens.length;
    assert.equal(tokens, 512);
    await page.evaluateOnNewDocument(() => {
      window.progressSeen = [];
      new MutationObserver(() => {
        const box = document.getElementById('progress');
        if (box && !box.hidden) window.progressSeen.push(box.querySelector('span').textContent);
      }).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
    });
    const bodies = [];
    const onRequest = (request) => {
      if (request.url().endsWith('/StreamAttention')) bodies.push(JSON.parse(request.postData()));
    };
    page.on('request', onRequest);
    const started = Date.now();
    await open({ model: 'big', text, view: 'model' });
    const seconds = (Date.now() - started) / 1000;
    page.off('request', onRequest);
    assert.equal(bodies.length, 1);
    assert.equal(bodies[0].dtype, 'DTYPE_FLOAT16');
    const progress = await page.evaluate(() => window.progressSeen);
    assert.ok(progress.some((p) => p.startsWith('12 of 12')), progress.join(' | '));
    assert.equal(await page.$$eval('g.thumbnail image', (images) => images.length), 144);
    console.log(`# model view, 512 tokens, 12 x 12 heads: ready in ${seconds.toFixed(1)} s`);
    await screenshot('model-512-tokens');

    // One head of it in the heatmap view: drawn as an image; hovered cells show the server value.
    await open({ model: 'big', text, view: 'heatmap', layer: 11, head: 7 });
    assert.equal(await page.$$eval('rect.cell', (r) => r.length), 0);
    const answer = await api('GetAttention', { model: 'big', text, layers: [11], heads: [7] });
    const values = float32(answer.attentions);
    const cell = await page.$eval('g.heatmap rect.hover-area', (r) => Number(r.getAttribute('width')) / 512);
    for (const [row, col] of [[0, 0], [100, 37], [511, 511], [300, 299]]) {
      assert.equal(await hoverValue('g.heatmap', row, col, cell), values[row * 512 + col], `[${row}, ${col}]`);
    }
    await page.mouse.move(0, 0);

    // The head view keeps to a window and each query's top-k keys.
    await open({ model: 'big', text, view: 'heads', layer: 5 });
    const topK = await api('GetAttention', {
      model: 'big',
      text,
      layers: [5],
      topK: 4,
      window: { queryStart: 0, queryEnd: 64, keyStart: 0, keyEnd: 64 },
    });
    const weights = float32(topK.attentions);
    const keys = int32(topK.topKIndices);
    const lines = await datasets('line.link');
    assert.equal(lines.length, 12 * 64 * 4);
    lines.forEach((line, i) => {
      assert.equal(Number(line.col), keys[i]);
      assert.equal(Math.fround(Number(line.value)), weights[i]);
    });
  });

  it('a 400-token input is readable: the window width, labels thinned to what fits and shown on hover, zoom, window; cuts are said', async () => {
    const words = args['long-text'].split(' ');
    const text = words.slice(0, 398).join(' ');
    assert.equal((await api('Tokenize', { model: 'big', text })).tokens.tokens.length, 400);
    // Milliseconds from the start of the page's load to the first paint of its figure
    // (picture_probe.mjs; bench/dashboard_bench repeats this on a quiet server) and to "ready".
    await page.evaluateOnNewDocument(pictureProbe);
    const firstPicture = async (params, selector) => {
      consoleErrors.length = 0;
      await page.goto(base + query(params));
      await page.waitForSelector(selector, { timeout: 60000 });
      const { status, error } = await waitReady();
      assert.equal(status, 'ready', error);
      assert.deepEqual(consoleErrors, []);
      await page.waitForFunction(() => window.picturePainted, { timeout: 10000 });
      return page.evaluate(() => [window.picturePainted, window.viewReady].map(Math.round));
    };
    const timings = [];
    const time = async (view, params, selector) => timings.push([view, ...(await firstPicture({ model: 'big', text, view, ...params }, selector))]);
    await time('heatmap', { layer: 11, head: 7 }, 'g.heatmap image');
    const figureWidth = await page.$eval('svg.figure', (s) => Number(s.getAttribute('width')));
    assert.ok(figureWidth > 900, `figure ${figureWidth} px wide in a 1200 px window`);
    const rows = await page.$$eval('g.heatmap text.row-label', (ts) =>
      ts.map((t) => ({ text: t.textContent, y: Number(t.getAttribute('y')), size: Number(t.getAttribute('font-size')), shown: getComputedStyle(t).visibility !== 'hidden' })),
    );
    assert.equal(rows.length, 400);
    const shown = rows.filter((r) => r.shown);
    assert.ok(shown.length >= 40, `${shown.length} row labels shown`);
    for (let i = 1; i < shown.length; ++i) {
      assert.ok(shown[i].size >= 9 && shown[i].y - shown[i - 1].y >= shown[i].size, `labels ${i - 1} and ${i} overlap`);
    }
    // A hidden label shows with its row's cells.
    const hidden = rows.findIndex((r) => !r.shown);
    const cell = await page.$eval('g.heatmap rect.hover-area', (r) => Number(r.getAttribute('width')) / 400);
    await hoverValue('g.heatmap', hidden, 5, cell);
    assert.equal(await page.$eval(`g.heatmap text.row-label[data-index="${hidden}"]`, (t) => getComputedStyle(t).visibility), 'visible');
    assert.ok((await page.$eval('#tooltip', (t) => t.textContent)).startsWith(`${rows[hidden].text} →`));
    await page.mouse.move(0, 0);
    await screenshot('heatmap-400-tokens');

    // Zoomed in four times: larger cells, every label, the figure scrolls in its box.
    await rerender(() => page.select('select[name="zoom"]', '4'));
    const zoomed = await page.$eval('g.heatmap rect.hover-area', (r) => Number(r.getAttribute('width')) / 400);
    assert.ok(zoomed >= 4 * cell - 1, `cell ${cell} px, zoomed ${zoomed} px`);
    assert.ok(await page.$eval('.figure-scroll', (b) => b.scrollWidth > b.clientWidth && b.scrollHeight > b.clientHeight));
    // Panned to the middle, the labels of the rows and columns in sight are still beside them.
    const inSight = await page.$eval('.figure-scroll', async (box) => {
      box.scrollTo(box.scrollWidth / 2, box.scrollHeight / 2);
      await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve)));
      const frame = box.getBoundingClientRect();
      const visible = (selector) =>
        [...box.querySelectorAll(selector)].filter((t) => {
          const r = t.getBoundingClientRect();
          return getComputedStyle(t).visibility !== 'hidden' && r.left >= frame.left && r.right <= frame.right && r.top >= frame.top && r.bottom <= frame.bottom;
        }).length;
      return [visible('text.row-label'), visible('text.col-label')];
    });
    assert.ok(inSight[0] >= 5 && inSight[1] >= 5, `labels in sight after panning: ${inSight.join(' rows, ')} columns`);
    // Exported while panned: the labels where they belong in the whole figure.
    const target = await exported('#export-svg', 'attnscope-heatmap-big.svg');
    const panned = fs.readFileSync(target, 'utf8');
    assert.ok(panned.includes('class="row-labels"'), 'row labels in the export');
    assert.ok(!/class="(row|col)-labels" transform=/.test(panned) && !panned.includes('label-backdrop'), 'panned labels in the export');
    await screenshot('heatmap-400-tokens-zoomed-panned');
    // A window of it: 50 rows over 100 columns, each cell the server value.
    await open({ model: 'big', text, layer: 11, head: 7, qs: 100, qe: 150, ks: 200, ke: 300 });
    const windowed = await api('GetAttention', { model: 'big', text, layers: [11], heads: [7], window: { queryStart: 100, queryEnd: 150, keyStart: 200, keyEnd: 300 } });
    await expectCells('g.heatmap', float32(windowed.attentions), 100);
    assert.equal((await labels('g.heatmap text.row-label'))[0], tokenLabel(windowed.tokens, 100));

    await time('heads', { layer: 5 }, 'line.link');
    await time('model', {}, 'g.thumbnail image');
    await time('layers', {}, 'g.heatmap image');
    // In a narrower window the panels (here of 128 tokens, four to a row of 1,200 px) wrap to its
    // width, the colour bar within it.
    await page.setViewport({ width: 1000, height: 800 });
    try {
      await open({ model: 'big', text: words.slice(0, 126).join(' '), view: 'layers' });
      const [figure, window] = await page.evaluate(() => [document.querySelector('svg.figure').getBoundingClientRect().right, document.documentElement.clientWidth]);
      assert.ok(figure <= window, `across layers ends at ${figure} px in a ${window} px window`);
    } finally {
      await page.setViewport({ width: 1200, height: 800 });
    }
    await time('temperature', { layer: 3, head: 2 }, 'g.heatmap image');
    await time('compare', { layer: 11, head: 7, 'b.layer': 0, 'b.head': 'mean' }, 'g.heatmap image');
    console.log(`# 400 tokens, first picture / ready (ms): ${timings.map(([view, first, ready]) => `${view} ${first} / ${ready}`).join(', ')}`);

    // Too long for the model: the error names the page's control; ticked, the text is cut and said.
    const long = `${args['long-text']} ${args['long-text']}`;
    consoleErrors.length = 0;
    await page.goto(base + query({ model: 'big', text: long }));
    const { status, error } = await waitReady();
    assert.equal(status, 'error');
    assert.match(error, /tick "cut long inputs"/);
    await rerender(() => page.click('input[name="truncate"]'));
    assert.equal(new URL(page.url()).searchParams.get('truncate'), '1');
    assert.match(await page.$eval('p.cut', (p) => p.textContent), /cut to fit the model \(at most 512 tokens\)/);
    assert.equal(await page.$$eval('g.heatmap text.row-label', (ts) => ts.length), 512);

    // A document longer than the cross-encoder reads is greyed where it was cut, and said.
    const documentText = Array(30).fill('To insert a new table into the document, choose Table - Insert Table.').join(' ');
    await open({ model: 'default', view: 'documents', query: 'insert a table', doc: documentText });
    const answer = await api('CrossAttention', { model: 'default', query: 'insert a table', documents: [documentText], layers: [0], heads: [0] });
    const read = answer.documents[0].documentPositions.length;
    assert.match(await page.$eval('section.document p.cut', (p) => p.textContent), new RegExp(`first ${read} tokens`));
    assert.ok((await page.$eval('section.document .unread', (s) => s.textContent.length)) > 100);
    assert.equal(await page.$('section.document p.query-cut'), null);

    // A query longer than the model reads beside a short document is cut too, and said.
    await open({ model: 'default', view: 'documents', query: documentText, doc: 'insert a table' });
    const cutQuery = await api('CrossAttention', { model: 'default', query: documentText, documents: ['insert a table'], layers: [0], heads: [0] });
    assert.equal(cutQuery.documents[0].queryTruncated, true);
    const queryRead = cutQuery.documents[0].queryPositions.length;
    assert.match(await page.$eval('section.document p.query-cut', (p) => p.textContent), new RegExp(`query's first ${queryRead} tokens`));
    assert.equal(await page.$eval('section.document', (s) => s.dataset.queryCut), String(queryRead));
  });
});
