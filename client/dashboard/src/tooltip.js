// One tooltip for every figure: plain text lines (token texts are the caller's input, so never
// HTML), next to the pointer.

const element = () => document.getElementById('tooltip');

export function showTooltip(event, lines) {
  const tooltip = element();
  tooltip.replaceChildren(
    ...lines.map((line) => {
      const div = document.createElement('div');
      div.textContent = line;
      return div;
    }),
  );
  tooltip.hidden = false;
  const { innerWidth, innerHeight } = window;
  const { width, height } = tooltip.getBoundingClientRect();
  tooltip.style.left = `${Math.min(event.clientX + 14, innerWidth - width - 4)}px`;
  tooltip.style.top = `${Math.min(event.clientY + 14, innerHeight - height - 4)}px`;
}

export function hideTooltip() {
  element().hidden = true;
}
