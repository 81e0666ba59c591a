// When a page first shows a figure, for puppeteer's page.evaluateOnNewDocument: the browser's
// Element Timing says when an element was first painted (an image once decoded); it sees images
// and text, not shapes, so for cells drawn as rects and for the head view's lines the figure's
// first text, drawn in the same task, stands for them. The attribute is set in a mutation
// callback, which runs before the page's next frame. The page keeps, in its own clock (ms since
// its navigation started), window.picturePainted and window.viewReady (the view's "ready").
export function pictureProbe() {
  const selector = 'main svg.figure g.cells > image, main svg.figure rect.cell, main svg.figure line.link';
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (entry.identifier === 'picture') window.picturePainted ??= entry.renderTime;
  }).observe({ type: 'element', buffered: true });
  new MutationObserver(() => {
    if (window.viewReady === undefined && document.body?.dataset.status === 'ready') window.viewReady = performance.now();
    const picture = window.pictureSeen ? null : document.querySelector(selector);
    if (!picture) return;
    window.pictureSeen = true;
    (picture.tagName === 'image' ? picture : picture.closest('svg').querySelector('text')).setAttribute('elementtiming', 'picture');
  }).observe(document, { subtree: true, childList: true, attributes: true });
}
