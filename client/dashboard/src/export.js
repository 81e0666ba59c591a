// Export of the current view's figures as one SVG or PNG file: the view's <svg class="figure">
// elements stacked top to bottom on a white background, each under its caption (data-caption:
// what the page shows around the figure in HTML, such as a document's rank, score and text, or the
// model view's token legend).

const CAPTION_SIZE = 12;
const CAPTION_LINE = 16;
// Characters per caption line: about 900 px of 12 px text.
const CAPTION_WIDTH = 140;

function captionLines(caption) {
  const lines = [];
  for (const paragraph of caption.split('\n')) {
    let line = '';
    for (const word of paragraph.split(' ')) {
      if (line && line.length + word.length + 1 > CAPTION_WIDTH) {
        lines.push(line);
        line = word;
      } else {
        line = line ? `${line} ${word}` : word;
      }
    }
    lines.push(line);
  }
  return lines;
}

function combinedSvg(root) {
  const figures = [...root.querySelectorAll('svg.figure')];
  if (!figures.length) return null;
  const gap = 16;
  let height = 0;
  let width = 0;
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('xmlns', 'http://www.w3.org/2000/svg');
  const background = document.createElementNS('http://www.w3.org/2000/svg', 'rect');
  background.setAttribute('fill', 'white');
  svg.append(background);
  for (const figure of figures) {
    for (const line of figure.dataset.caption ? captionLines(figure.dataset.caption) : []) {
      const text = document.createElementNS('http://www.w3.org/2000/svg', 'text');
      text.setAttribute('class', 'caption');
      text.setAttribute('x', '0');
      text.setAttribute('y', String(height + CAPTION_SIZE));
      text.setAttribute('font-size', String(CAPTION_SIZE));
      text.setAttribute('font-family', figure.getAttribute('font-family'));
      text.textContent = line;
      svg.append(text);
      width = Math.max(width, line.length * CAPTION_SIZE * 0.6);
      height += CAPTION_LINE;
    }
    const copy = figure.cloneNode(true);
    // A panned heatmap's labels follow its scroll box (heatmap.js stickLabels); the file shows the
    // whole figure, its labels where they belong.
    for (const labels of copy.querySelectorAll('g.row-labels, g.col-labels')) labels.removeAttribute('transform');
    for (const backdrop of copy.querySelectorAll('rect.label-backdrop')) backdrop.remove();
    copy.setAttribute('x', '0');
    copy.setAttribute('y', String(height));
    svg.append(copy);
    width = Math.max(width, Number(figure.getAttribute('width')));
    height += Number(figure.getAttribute('height')) + gap;
  }
  height -= gap;
  for (const element of [svg, background]) {
    element.setAttribute('width', String(width));
    element.setAttribute('height', String(height));
  }
  return { text: new XMLSerializer().serializeToString(svg), width, height };
}

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

export function exportSvg(root, name) {
  const svg = combinedSvg(root);
  if (svg) download(new Blob([svg.text], { type: 'image/svg+xml' }), `${name}.svg`);
}

// The SVG drawn onto a canvas at twice its size, for sharp text.
export async function exportPng(root, name) {
  const svg = combinedSvg(root);
  if (!svg) return;
  const url = URL.createObjectURL(new Blob([svg.text], { type: 'image/svg+xml' }));
  try {
    const image = new Image();
    image.src = url;
    await image.decode();
    const scale = 2;
    const canvas = document.createElement('canvas');
    canvas.width = svg.width * scale;
    canvas.height = svg.height * scale;
    const context = canvas.getContext('2d');
    context.scale(scale, scale);
    context.drawImage(image, 0, 0, svg.width, svg.height);
    const blob = await new Promise((resolve) => canvas.toBlob(resolve, 'image/png'));
    download(blob, `${name}.png`);
  } finally {
    URL.revokeObjectURL(url);
  }
}
