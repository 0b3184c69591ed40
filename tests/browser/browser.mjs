// What every browser check shares: Debian's Chromium (headless) with one page that records
// console errors, page errors and failed requests, and an end that fails on any of them.
import { chromium } from 'playwright-core';

export async function open(height = 900) {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height } });
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error on ${page.url()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error on ${page.url()}: ${e}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()}`));
  return { browser, page, problems };
}

// Runs the checks, then closes the browser and exits 1 listing the problems, if any.
export async function check({ browser, problems }, name, checks) {
  try {
    await checks();
  } catch (e) {
    problems.push(String(e));
  }
  await browser.close();
  if (problems.length) {
    console.error(problems.join('\n'));
    process.exit(1);
  }
  console.log(`${name} ok`);
}

// Every label of every SVG on the page is drawn whole: inside its picture, and inside the box
// it labels (a graph's node), over no other label. Returns the labels that are cut or covered.
export async function cutLabels(page) {
  return page.evaluate(() => {
    const cut = [];
    for (const svg of document.querySelectorAll('svg')) {
      const view = svg.viewBox && svg.viewBox.baseVal;
      const width = view && view.width ? view.width : svg.width.baseVal.value;
      const height = view && view.height ? view.height : svg.height.baseVal.value;
      const boxes = [];
      for (const text of svg.querySelectorAll('text')) {
        const b = text.getBBox();
        for (const [other, o] of boxes) {
          const w = Math.min(b.x + b.width, o.x + o.width) - Math.max(b.x, o.x);
          const h = Math.min(b.y + b.height, o.y + o.height) - Math.max(b.y, o.y);
          if (w > 1 && h > 1) cut.push(`${svg.getAttribute('class')}: "${text.textContent}" overlaps "${other}"`);
        }
        boxes.push([text.textContent, b]);
        const where = `${svg.getAttribute('class')}: "${text.textContent}"`;
        if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > width + 0.5 || b.y + b.height > height + 0.5) {
          cut.push(`${where} leaves its picture (${b.x.toFixed(1)}+${b.width.toFixed(1)} of ${width})`);
        }
        const box = text.closest('g.node') && text.closest('g.node').querySelector('rect');
        if (box) {
          const r = box.getBBox();
          if (b.x < r.x || b.x + b.width > r.x + r.width || b.y < r.y || b.y + b.height > r.y + r.height + 0.5) {
            cut.push(`${where} leaves its box (${(b.x + b.width).toFixed(1)} > ${(r.x + r.width).toFixed(1)})`);
          }
        }
      }
    }
    return cut;
  });
}
