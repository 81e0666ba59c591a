// Export of the current view's figures as one SVG or PNG file: the view's <svg class="figure">
// elements stacked top to bottom on a white background.

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
    const copy = figure.cloneNode(true);
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
