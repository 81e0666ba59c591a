// Heatmaps (query tokens down, key tokens across) and colour bars, drawn with d3 into figures.
import * as d3 from 'd3';
import { textWidth } from './figure.js';
import { formatFloat32 } from './numbers.js';
import { hideTooltip, showTooltip } from './tooltip.js';

// Above this many cells in one figure, cells are painted into one image instead of one <rect>
// each: 16 K rects (a 128-token heatmap) draw in a fraction of a second, a 512-token head's 262 K
// took seconds and made the page unresponsive.
export const CELL_ELEMENT_LIMIT = 16384;

// 0 (white-ish) to `max` (dark brown): matplotlib's and the tutorials' YlOrBr.
export function sequentialScale(max) {
  return d3.scaleSequential(d3.interpolateYlOrBr).domain([0, max > 0 ? max : 1]);
}

// Pixels per cell for a rows x cols matrix in about `span` pixels.
export function cellSize(rows, cols, span = 560, max = 28) {
  return Math.max(1, Math.min(max, Math.floor(span / Math.max(rows, cols))));
}

// Pixels a row of a heatmap whose cells are `cell` wide: a few rows over many columns (a
// translation's rows over a long source) get rows tall enough for every label, up to `span`
// pixels in all.
export function rowHeightFor(rows, cell, span = 600) {
  return Math.max(cell, Math.min(MIN_LABEL_SIZE + 3, Math.floor(span / rows)));
}

// Labels are set at least this large; when cells are smaller, only every few labels is shown
// (each one still shows when its row or column is hovered).
export const MIN_LABEL_SIZE = 9;

// How many cells apart the shown labels are, at `cell` pixels a cell.
export function labelStep(cell, fontSize = Math.max(MIN_LABEL_SIZE, Math.min(12, cell - 2))) {
  return Math.max(1, Math.ceil((fontSize + 1) / cell));
}

// Colour of cells a mask hides (keys after the query, keys outside a sliding window): not the
// colour of 0, which the scale gives to attention the model could have paid and did not.
export const MASKED_FILL = '#d9d9d9';

// Cells at least this many pixels wide carry their value as text.
const VALUE_CELL = 30;

// The colours of a scale at 256 steps, as bytes, for painting images.
export function colorTable(color) {
  const domain = color.domain();
  const lo = domain[0];
  const hi = domain[domain.length - 1];
  const table = new Uint8ClampedArray(256 * 3);
  for (let i = 0; i < 256; ++i) {
    const { r, g, b } = d3.rgb(color(lo + ((hi - lo) * i) / 255));
    table.set([r, g, b], i * 3);
  }
  return { table, lo, hi };
}

// The cells as a PNG data URL, one pixel per `factor` x `factor` block of cells; a block shows
// its value of largest magnitude, so that a single strong cell stays visible when shrunk.
function paintCells(values, rows, cols, color, factor, masked) {
  const width = Math.ceil(cols / factor);
  const height = Math.ceil(rows / factor);
  const canvas = document.createElement('canvas');
  canvas.width = width;
  canvas.height = height;
  const context = canvas.getContext('2d');
  const image = context.createImageData(width, height);
  const { table, lo, hi } = colorTable(color);
  const span = hi - lo || 1;
  for (let py = 0; py < height; ++py) {
    for (let px = 0; px < width; ++px) {
      let value = 0;
      let hidden = true;
      for (let r = py * factor; r < Math.min(rows, (py + 1) * factor); ++r) {
        for (let c = px * factor; c < Math.min(cols, (px + 1) * factor); ++c) {
          if (masked?.(r, c)) continue;
          hidden = false;
          const v = values[r * cols + c];
          if (Math.abs(v) > Math.abs(value)) value = v;
        }
      }
      const at = (py * width + px) * 4;
      image.data[at + 3] = 255;
      if (hidden) {
        image.data.set([0xd9, 0xd9, 0xd9], at);
        continue;
      }
      const index = Math.round(Math.max(0, Math.min(1, (value - lo) / span)) * 255) * 3;
      image.data[at] = table[index];
      image.data[at + 1] = table[index + 1];
      image.data[at + 2] = table[index + 2];
    }
  }
  context.putImageData(image, 0, 0);
  return canvas.toDataURL('image/png');
}

// Draws a heatmap into `parent` (a d3 selection inside a figure) at its origin.
// Options: values (rows * cols, row-major), rows, cols, color, cell (pixels), rowLabels and
// colLabels (one DOM <text> per token, so that they can be selected, searched and read aloud),
// rowHeight (pixels a row, default `cell`: a few rows over many columns get taller rows), title, asImage (paint the cells instead of one <rect class="cell"> each with data-row, data-col
// and data-value), describe(row, col, value) -> tooltip lines (none: no hover), masked(row, col)
// -> why a mask hid the cell (masks.js' keyMask: a tooltip line) or null (hidden cells are drawn
// grey, data-masked), dividers {row, col}: the index
// where a pair's second text starts on each axis (a line before it).
// Returns {g, width, cellsRight, height, top, left, update(values, color)}.
export function drawHeatmap(parent, options) {
  const { rows, cols, cell, rowLabels, colLabels, title, asImage, describe, masked, dividers } = options;
  const rowHeight = options.rowHeight ?? cell;
  let { values, color } = options;
  const fontSize = Math.max(MIN_LABEL_SIZE, Math.min(12, cell - 2));
  // Thinned labels stay in the figure (searchable, shown on hover), hidden.
  const thinnedEvery = (step) => (_, i) => (i % step ? 'hidden' : null);
  const left = rowLabels ? d3.max(rowLabels, (label) => textWidth(label, fontSize)) + 8 : 0;
  const titleHeight = title ? 20 : 0;
  const top = titleHeight + (colLabels ? d3.max(colLabels, (label) => textWidth(label, fontSize)) + 8 : 0);
  const g = parent.append('g').attr('class', 'heatmap');
  if (title) {
    g.append('text').attr('class', 'title').attr('x', left).attr('y', 14).attr('font-size', 13).attr('font-weight', 'bold').text(title);
  }
  if (rowLabels) {
    g.append('g')
      .attr('class', 'row-labels')
      .selectAll('text')
      .data(rowLabels)
      .join('text')
      .attr('class', 'label row-label')
      .attr('data-index', (_, i) => i)
      .attr('x', left - 4)
      .attr('y', (_, i) => top + (i + 0.5) * rowHeight)
      .attr('dy', '0.35em')
      .attr('text-anchor', 'end')
      .attr('font-size', fontSize)
      .attr('visibility', thinnedEvery(labelStep(rowHeight, fontSize)))
      .text((label) => label);
  }
  if (colLabels) {
    g.append('g')
      .attr('class', 'col-labels')
      .selectAll('text')
      .data(colLabels)
      .join('text')
      .attr('class', 'label col-label')
      .attr('data-index', (_, i) => i)
      .attr('transform', (_, i) => `translate(${left + (i + 0.5) * cell},${top - 4}) rotate(-90)`)
      .attr('dy', '0.35em')
      .attr('font-size', fontSize)
      .attr('visibility', thinnedEvery(labelStep(cell, fontSize)))
      .text((label) => label);
  }
  const cells = g.append('g').attr('class', 'cells').attr('transform', `translate(${left},${top})`);
  let paint;
  if (asImage) {
    const image = cells
      .append('image')
      .attr('width', cols * cell)
      .attr('height', rows * rowHeight)
      .attr('preserveAspectRatio', 'none')
      .style('image-rendering', 'pixelated');
    const factor = Math.max(1, Math.ceil(1 / cell));
    paint = () => image.attr('href', paintCells(values, rows, cols, color, factor, masked));
  } else {
    const rects = cells
      .selectAll('rect')
      .data(d3.range(rows * cols))
      .join('rect')
      .attr('class', 'cell')
      .attr('data-row', (i) => Math.floor(i / cols))
      .attr('data-col', (i) => i % cols)
      .attr('x', (i) => (i % cols) * cell)
      .attr('y', (i) => Math.floor(i / cols) * rowHeight)
      .attr('width', cell)
      .attr('height', rowHeight);
    const hidden = (i) => masked?.(Math.floor(i / cols), i % cols);
    rects.attr('data-masked', (i) => (hidden(i) ? 1 : null));
    // Values written in the cells when they fit, as the tutorials' annotated heatmaps do.
    const texts =
      cell >= VALUE_CELL
        ? cells
            .selectAll('text')
            .data(d3.range(rows * cols).filter((i) => !hidden(i)))
            .join('text')
            .attr('class', 'cell-value')
            .attr('x', (i) => ((i % cols) + 0.5) * cell)
            .attr('y', (i) => (Math.floor(i / cols) + 0.5) * rowHeight)
            .attr('dy', '0.35em')
            .attr('text-anchor', 'middle')
            .attr('font-size', Math.min(11, cell / 3))
            .attr('pointer-events', 'none')
        : null;
    paint = () => {
      rects.attr('fill', (i) => (hidden(i) ? MASKED_FILL : color(values[i]))).attr('data-value', (i) => formatFloat32(values[i]));
      // Dark text on light cells, light on dark: by the cell colour's lightness.
      texts?.text((i) => values[i].toFixed(2)).attr('fill', (i) => (d3.hsl(color(values[i])).l > 0.55 ? '#222' : '#fff'));
    };
  }
  paint();
  // The line between a pair's two texts.
  if (dividers?.row > 0 && dividers.row < rows) {
    cells.append('line').attr('class', 'divider').attr('x2', cols * cell).attr('y1', dividers.row * rowHeight).attr('y2', dividers.row * rowHeight);
  }
  if (dividers?.col > 0 && dividers.col < cols) {
    cells.append('line').attr('class', 'divider').attr('y2', rows * rowHeight).attr('x1', dividers.col * cell).attr('x2', dividers.col * cell);
  }
  cells.selectAll('line.divider').attr('stroke', '#1f4e79').attr('stroke-width', 1.5);
  if (describe) {
    const labels = g.selectAll('text.label');
    cells
      .append('rect')
      .attr('class', 'hover-area')
      .attr('width', cols * cell)
      .attr('height', rows * rowHeight)
      .attr('fill', 'transparent')
      .on('pointermove', (event) => {
        const [x, y] = d3.pointer(event, cells.node());
        const row = Math.min(rows - 1, Math.max(0, Math.floor(y / rowHeight)));
        const col = Math.min(cols - 1, Math.max(0, Math.floor(x / cell)));
        labels.classed('hot', function () {
          const index = Number(this.dataset.index);
          return this.classList.contains('row-label') ? index === row : index === col;
        });
        const lines = describe(row, col, values[row * cols + col]);
        const hidden = masked?.(row, col);
        showTooltip(event, hidden ? [...lines.slice(0, -1), hidden] : lines);
      })
      .on('pointerleave', () => {
        labels.classed('hot', false);
        hideTooltip();
      });
  }
  return {
    g,
    left,
    top,
    // A narrow heatmap's title is wider than its cells: what comes to its right (the colour bar,
    // the figure's edge) makes room for it.
    width: left + Math.max(cols * cell, title ? textWidth(title, 13, 'bold') : 0),
    // Where the cells end: a colour bar beside a narrow heatmap goes there, below a wider title.
    cellsRight: left + cols * cell,
    height: top + rows * rowHeight,
    // New values, and a new colour scale when given (a streamed view's final one).
    update(next, nextColor = color) {
      values = next;
      color = nextColor;
      paint();
    },
  };
}

// Keeps a heatmap's labels in sight while `box` (a figure's scroll box) pans over it: the row
// labels stay at the box's left edge and the column labels at its top, each over a backdrop that
// shows only once the cells slide beneath them. `map` is drawHeatmap's answer, drawn at the
// figure's origin.
export function stickLabels(box, map) {
  const rows = map.g.select('g.row-labels');
  const cols = map.g.select('g.col-labels');
  const backdrop = (group, width, height) =>
    group.empty()
      ? null
      : group.insert('rect', ':first-child').attr('class', 'label-backdrop').attr('width', width).attr('height', height).attr('fill', 'white').attr('visibility', 'hidden');
  const rowBackdrop = backdrop(rows, map.left, map.height);
  const colBackdrop = backdrop(cols, map.width, map.top);
  // Above the cells, which are drawn after them.
  rows.raise();
  cols.raise();
  box.addEventListener(
    'scroll',
    () => {
      rows.attr('transform', `translate(${box.scrollLeft},0)`);
      rowBackdrop?.attr('visibility', box.scrollLeft > 0 ? 'visible' : 'hidden');
      cols.attr('transform', `translate(0,${box.scrollTop})`);
      colBackdrop?.attr('visibility', box.scrollTop > 0 ? 'visible' : 'hidden');
    },
    { passive: true },
  );
}

let colorBars = 0;

// A vertical colour bar with its axis at (x, y); data-domain="lo,hi" says the scale's ends.
// Returns its width.
export function drawColorBar(parent, color, { x, y, height, label }) {
  const domain = color.domain();
  const lo = domain[0];
  const hi = domain[domain.length - 1];
  const id = `colorbar-${++colorBars}`;
  const g = parent.append('g').attr('class', 'colorbar').attr('data-domain', `${lo},${hi}`).attr('transform', `translate(${x},${y})`);
  const gradient = g.append('defs').append('linearGradient').attr('id', id).attr('x1', 0).attr('y1', 1).attr('x2', 0).attr('y2', 0);
  for (let t = 0; t <= 20; ++t) {
    gradient.append('stop').attr('offset', t / 20).attr('stop-color', color(lo + ((hi - lo) * t) / 20));
  }
  g.append('rect').attr('width', 12).attr('height', height).attr('fill', `url(#${id})`);
  const axis = d3.axisRight(d3.scaleLinear().domain([lo, hi]).range([height, 0])).ticks(Math.max(2, Math.floor(height / 40)));
  g.append('g').attr('transform', 'translate(12,0)').call(axis);
  if (label) {
    g.append('text').attr('transform', `translate(56,${height / 2}) rotate(90)`).attr('text-anchor', 'middle').attr('font-size', 11).text(label);
  }
  return label ? 64 : 52;
}
