// Drives Debian's Chromium (headless) through every page of a running dashboard:
//   node dashboard.mjs BASE_URL REF_TO_BUILD [TOKEN]   (screenshots into $SHOTS, if set)
// It starts a build from the home page and watches it finish without reloading, runs an SQL
// query, and fails on any console error or failed page. With TOKEN, the service guards reads:
// the dashboard must ask for a login first, then work as without one.
import { open, check } from './browser.mjs';

const [base, buildRef, token] = process.argv.slice(2);
const shots = token ? undefined : process.env.SHOTS;
const session = await open();
const { page, problems } = session;

async function visit(path, name) {
  const response = await page.goto(base + path);
  if (!response.ok()) throw new Error(`${path}: HTTP ${response.status()}`);
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

await check(session, token ? 'dashboard (guarded)' : 'dashboard', async () => {
  if (token) {
    await page.goto(base + '/');
    if (!page.url().includes('/login')) throw new Error(`a guarded dashboard showed ${page.url()}`);
    await page.fill('input[name=token]', token);
    await Promise.all([page.waitForURL(base + '/'), page.click('button:text-is("Log in")')]);
  }
  await visit('/', 'home-empty');
  // Start a build from the page, then watch it finish in place.
  await page.fill('textarea[name=refs]', buildRef);
  await Promise.all([page.waitForURL(/\/builds\//), page.click('button[formaction="/ui/build"]')]);
  await page.evaluate(() => { window.__stayed = true; });
  await page.waitForSelector('#build-status .badge:text-is("completed")', { timeout: 60000 });
  if (!(await page.evaluate(() => window.__stayed === true))) throw new Error('the build page reloaded');
  await page.waitForSelector('svg.graph .node');
  // The live progress: every planned run done, a bar per job.
  const progress = await page.textContent('#progress');
  const [done, planned] = (progress.match(/(\d+) of (\d+) runs done/) || []).slice(1);
  if (!done || done !== planned) throw new Error(`the build's progress says: ${progress}`);
  await page.waitForSelector('#job-progress progress');
  if (shots) await page.screenshot({ path: `${shots}/build.png`, fullPage: true });
  const buildUrl = page.url();

  // Follow links from the build page: a run, then its job, then a partition.
  await page.click('svg.graph a');
  await page.waitForSelector('h1:has-text("Job run")');
  if (shots) await page.screenshot({ path: `${shots}/run.png`, fullPage: true });
  await page.goto(buildUrl);
  await visit('/partitions', 'partitions');
  await page.click('table a[href^="/partitions/"]');
  await page.waitForSelector('button:text-is("Build")');
  if (shots) await page.screenshot({ path: `${shots}/partition.png`, fullPage: true });
  await visit('/datasets', 'datasets');
  await visit('/jobs', 'jobs');
  await page.click('table a[href^="/jobs/"]');
  await page.waitForSelector('h1:has-text("Job ")');
  if (shots) await page.screenshot({ path: `${shots}/job.png`, fullPage: true });
  await visit(`/analyze?refs=${encodeURIComponent(buildRef)}`, 'analyze');

  // An SQL query through the form.
  await visit('/sql', 'sql-empty');
  await page.fill('textarea[name=q]', 'SELECT status, count(*) AS n FROM partition_status GROUP BY status');
  await Promise.all([page.waitForURL(/q=/), page.click('button:text-is("Run")')]);
  await page.waitForSelector('#results td');
  if (shots) await page.screenshot({ path: `${shots}/sql.png`, fullPage: true });
  await visit('/', 'home');
  // Honest error states.
  const missing = await page.goto(base + '/builds/no-such-build');
  if (missing.status() !== 404) throw new Error(`unknown build: HTTP ${missing.status()}`);
  problems.splice(0, problems.length, ...problems.filter((p) => !p.includes('404')));
});
