// Opens one page of a running dashboard in Debian's Chromium and checks that it shows the given
// texts, with no console error:   node page.mjs URL NAME TEXT... (SCREENSHOT_DIR in $SHOTS)
import { open, check, cutLabels } from './browser.mjs';

const [url, name, ...texts] = process.argv.slice(2);
const session = await open(700);
const { page, problems } = session;
await check(session, name, async () => {
  const response = await page.goto(url);
  if (!response.ok()) throw new Error(`${url}: HTTP ${response.status()}`);
  const body = await page.innerText('body');
  for (const t of texts) if (!body.includes(t)) problems.push(`${url} does not show "${t}"`);
  for (const cut of await cutLabels(page)) problems.push(`${page.url()}: ${cut}`);
  if (process.env.SHOTS) await page.screenshot({ path: `${process.env.SHOTS}/${name}.png`, fullPage: true });
});
