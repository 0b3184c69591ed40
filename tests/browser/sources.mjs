// Checks the Sources page in Debian's Chromium: every day of the raw data and of each table
// version is drawn, expired raw days and carried-forward days are told apart, and the promoted
// version is marked.   node sources.mjs BASE_URL SOURCE   (screenshots into $SHOTS)
import { open, check, cutLabels } from './browser.mjs';

const [base, source] = process.argv.slice(2);
const shots = process.env.SHOTS;
const session = await open(700);
const { page, problems } = session;
await check(session, 'sources page', async () => {
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
  for (const cut of await cutLabels(page)) problems.push(`${page.url()}: ${cut}`);
  if (shots) await page.screenshot({ path: `${shots}/sources.png`, fullPage: true });
});
