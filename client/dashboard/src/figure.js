// Figures are SVG documents that stand alone: fonts and colours are attributes, not stylesheet
// rules, so that the export (export.js) looks like the page.
import * as d3 from 'd3';

const FONT_FAMILY = "'Noto Sans', 'Noto Sans CJK KR', 'DejaVu Sans', sans-serif";

// A new <svg class="figure"> at the end of `container`; `fit` sizes it once drawn.
export function newFigure(container, name) {
  return d3
    .select(container)
    .append('svg')
    .attr('class', 'figure')
    .attr('data-name', name)
    .attr('xmlns', 'http://www.w3.org/2000/svg')
    .attr('font-family', FONT_FAMILY)
    .attr('font-size', 12);
}

export function fit(svg, width, height) {
  const w = Math.ceil(width);
  const h = Math.ceil(height);
  svg.attr('width', w).attr('height', h).attr('viewBox', `0 0 ${w} ${h}`);
}

const measureContext = document.createElement('canvas').getContext('2d');

// Width in pixels of `text` at `size` (and `weight`), before it is placed: labels' widths decide
// the layout.
export function textWidth(text, size, weight = 'normal') {
  measureContext.font = `${weight} ${size}px ${FONT_FAMILY}`;
  return measureContext.measureText(text).width;
}

// Checkbox and selector helpers for the views' own toolbars.
export function labelled(parent, text, control) {
  const label = document.createElement('label');
  label.append(text, control);
  parent.append(label);
  return control;
}

export function numberInput(value, { min = 0, placeholder = '' } = {}) {
  const input = document.createElement('input');
  input.type = 'number';
  input.min = String(min);
  input.value = value ?? '';
  input.placeholder = placeholder;
  return input;
}

// A line of explanation above or below a figure.
export function note(parent, text) {
  const p = document.createElement('p');
  p.className = 'note';
  p.textContent = text;
  parent.append(p);
  return p;
}

// A scrolling box for a figure that may be wider or taller than the window.
export function scrollBox(parent) {
  const box = document.createElement('div');
  box.className = 'figure-scroll';
  parent.append(box);
  return box;
}

// Lets the browser paint what a view drew before it does more: a stream whose data has already
// arrived would otherwise be read to its end, and drawn, in one go, the first picture last. A
// timer alone fires before the next frame, and the view drew on (a 400-token across-layers view's
// first layer was shown 0.9 s after it was drawn, with the next ones); the timer set in a frame
// callback fires once that frame is painted. A hidden tab has no frames: there the view goes on
// after FRAME_WAIT_MS.
const FRAME_WAIT_MS = 100;

export function nextPaint() {
  return new Promise((resolve) => {
    const fallback = setTimeout(resolve, FRAME_WAIT_MS);
    requestAnimationFrame(() => {
      clearTimeout(fallback);
      setTimeout(resolve);
    });
  });
}

// nextPaint the first time, then at most every `ms` milliseconds: each paint lays out every
// figure drawn so far again, which for many long-input panels costs more than the drawing.
export function paintEvery(ms) {
  let last = -Infinity;
  return () => {
    if (performance.now() - last < ms) return null;
    last = performance.now();
    return nextPaint();
  };
}
