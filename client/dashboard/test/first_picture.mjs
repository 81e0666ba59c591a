// Time to first picture of each dashboard view on a long input: from the start of the page's load
// to the browser's first paint of a figure's cells, lines or image, and to the view's "ready".
// Run by bench/dashboard_bench.cc (which starts the server with a random 12-layer, 12-head BERT);
// by hand against any server that has such a model:
//
//   node first_picture.mjs --url http://127.0.0.1:PORT/ --model big --text TEXT [--runs 3]
import { parseArgs } from 'node:util';
import puppeteer from 'puppeteer-core';
import { pictureProbe } from './picture_probe.mjs';

const { values: args } = parseArgs({
  options: {
    url: { type: 'string' },
    model: { type: 'string', default: 'big' },
    text: { type: 'string' },
    runs: { type: 'string', default: '3' },
    chromium: { type: 'string', default: '/usr/bin/chromium' },
  },
});
const base = args.url.replace(/\/$/, '');
const runs = Number(args.runs);
const NO_OMNIBOX_POPUP = 'WebUIOmniboxPopup,WebUIOmniboxFullPopup,WebUIOmniboxAimPopup,PreloadTopChromeWebUI';

// Each view as the browser test opens it at 400 tokens.
const VIEWS = [
  ['heatmap', { layer: 11, head: 7 }],
  ['heads', { layer: 5 }],
  ['model', {}],
  ['layers', {}],
  ['temperature', { layer: 3, head: 2 }],
  ['compare', { layer: 11, head: 7, 'b.layer': 0, 'b.head': 'mean' }],
];

const browser = await puppeteer.launch({
  executablePath: args.chromium,
  // The omnibox popup's page (a WebUI renderer that headless Chromium loads and reloads as pages
  // are opened) would take one of the two cores for a second at every page load.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync', `--disable-features=${NO_OMNIBOX_POPUP}`],
});
const page = await browser.newPage();
await page.setViewport({ width: 1200, height: 800 });
await page.evaluateOnNewDocument(pictureProbe);

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};

try {
  for (const [view, params] of VIEWS) {
    const first = [];
    const ready = [];
    for (let run = 0; run < runs; ++run) {
      await page.goto(`${base}/?${new URLSearchParams({ model: args.model, text: args.text, view, ...params })}`);
      await page.waitForFunction(() => document.body.dataset.status === 'error' || (window.viewReady && window.picturePainted), { timeout: 120000, polling: 100 });
      const [painted, viewReady, error] = await page.evaluate(() => [window.picturePainted, window.viewReady, document.getElementById('error').textContent]);
      if (!viewReady) throw new Error(`${view}: ${error}`);
      first.push(painted);
      ready.push(viewReady);
    }
    console.log(`${view.padEnd(12)} first picture ${(median(first) / 1000).toFixed(2)} s (slowest ${(Math.max(...first) / 1000).toFixed(2)} s), ready ${(median(ready) / 1000).toFixed(2)} s`);
  }
} finally {
  await browser.close();
}
