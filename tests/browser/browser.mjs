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
