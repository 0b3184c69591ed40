// Checks the Sources page in Debian's Chromium: every day of the raw data and of each table
// version is drawn, expired raw days and carried-forward days are told apart, and the promoted
// version is marked.   node sources.mjs BASE_URL SOURCE   (screenshots into $SHOTS)
import { chromium } from 'playwright-core';

const [base, source] = process.argv.slice(2);
const shots = process.env.SHOTS;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 700 } });
const problems = [];
page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
page.on('pageerror', (e) => problems.push(`page error: ${e}`));
try {
  const response = await page.goto(`${base}/sources`);
  if (!response.ok()) throw new Error(`/sources: HTTP ${response.status()}`);
  const section = page.locator(`section.source[data-source="${source}"]`);
  const count = async (row, status) =>
    section.locator(`tr${row} rect[data-status="${status}"]`).count();
  const rawExpired = await count(':nth-of-type(2)', 'expired');
  const carried = await count(`[data-version="${source}.v2"]`, 'carried');
  const promoted = await section.locator('tr[data-version] .badge', { hasText: 'promoted' }).count();
  if (rawExpired < 1) throw new Error('no expired raw day is drawn');
  if (carried < 1) throw new Error('no carried-forward day of v2 is drawn');
  if (promoted !== 1) throw new Error(`${promoted} versions are marked promoted`);
  if (shots) await page.screenshot({ path: `${shots}/sources.png`, fullPage: true });
} catch (e) {
  problems.push(String(e));
}
await browser.close();
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log('sources page ok');
