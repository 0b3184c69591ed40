// Opens one page of a running dashboard in Debian's Chromium and checks that it shows the given
// texts, with no console error:   node page.mjs URL NAME TEXT... (SCREENSHOT_DIR in $SHOTS)
import { chromium } from 'playwright-core';

const [url, name, ...texts] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 700 } });
const problems = [];
page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
page.on('pageerror', (e) => problems.push(`page error: ${e}`));
try {
  const response = await page.goto(url);
  if (!response.ok()) throw new Error(`${url}: HTTP ${response.status()}`);
  const body = await page.innerText('body');
  for (const t of texts) if (!body.includes(t)) problems.push(`${url} does not show "${t}"`);
  if (process.env.SHOTS) await page.screenshot({ path: `${process.env.SHOTS}/${name}.png`, fullPage: true });
} catch (e) {
  problems.push(String(e));
}
await browser.close();
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(`${name} ok`);
