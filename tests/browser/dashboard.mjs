// Drives Debian's Chromium (headless) through every page of a running dashboard:
//   node dashboard.mjs BASE_URL REF_TO_BUILD [TOKEN]   (screenshots into $SHOTS, if set)
// It starts a build from the home page and watches it finish without reloading, runs an SQL
// query, and fails on any console error or failed page. With TOKEN, the service guards reads:
// the dashboard must ask for a login first, then work as without one.
import { open, check, cutLabels } from './browser.mjs';

const [base, buildRef, token] = process.argv.slice(2);
const shots = token ? undefined : process.env.SHOTS;
const session = await open();
const { page, problems } = session;

// No label of any picture on the current page is cut.
async function whole() {
  for (const cut of await cutLabels(page)) problems.push(`${page.url()}: ${cut}`);
}

async function shot(name) {
  await whole();
  if (shots) await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

async function visit(path, name) {
  const response = await page.goto(base + path);
  if (!response.ok()) throw new Error(`${path}: HTTP ${response.status()}`);
  await shot(name);
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
  // The live progress: every planned run done, a bar per job.
  const progress = await page.textContent('#progress');
  const [done, planned] = (progress.match(/(\d+) of (\d+) runs done/) || []).slice(1);
  if (!done || done !== planned) throw new Error(`the build's progress says: ${progress}`);
  await page.waitForSelector('#job-progress progress');
  // A timeline of the runs by slot, with a time axis.
  await page.waitForSelector('svg.timeline rect');
  // A big build groups its runs by job and draws the graph of runs only when asked.
  const big = Number(planned) > 50;
  if (big) {
    await page.waitForSelector('#runs-by-job tr[data-job] progress');
    if (await page.locator('svg.graph').count()) throw new Error('a big build drew its run graph unasked');
    await shot('build');
    await Promise.all([page.waitForURL(/graph=runs/), page.click('#show-graph')]);
  } else {
    await shot('build-small');
  }
  await page.waitForSelector('svg.graph .node');
  await whole();
  // Short ids differ between runs; the full id is on hover.
  const shorts = await page.$$eval('a[href^="/runs/"] code', (cs) => cs.map((c) => c.textContent));
  if (new Set(shorts).size !== shorts.length) throw new Error(`runs' short ids repeat: ${shorts}`);
  const buildUrl = page.url();

  // Follow links from the build page: a run, then its job, then a partition.
  await page.click('svg.graph a');
  await page.waitForSelector('h1:has-text("Job run")');
  await shot('run');
  await page.goto(buildUrl);
  await visit('/partitions', 'partitions');
  await page.click('table a[href^="/partitions/"]');
  await page.waitForSelector('button:text-is("Build")');
  await shot('partition');
  await visit('/datasets', 'datasets');
  // The graph: datasets with their partitions by state; a click opens the dataset.
  await visit('/graph', 'graph');
  if ((await page.locator('svg.graph rect.bar').count()) < 1) throw new Error('no dataset of the graph has counts');
  await Promise.all([page.waitForURL(/\/datasets\/daily_summaries/),
    page.click('svg.graph a[href^="/datasets/daily_summaries"]')]);
  // Its health grid, category × date: live cells where the build made them.
  await page.waitForSelector('svg.matrix rect[data-status="live"]');
  await shot('dataset');
  // By month, then a month's cell zooms in to its weeks.
  await page.click('a:text-is("month")');
  await page.waitForSelector('svg.matrix a rect[data-status="partial"]');
  await whole();
  await Promise.all([page.waitForURL(/zoom=week/), page.click('svg.matrix a:has(rect[data-status="partial"])')]);
  await page.waitForSelector('svg.matrix rect[data-status="partial"], svg.matrix rect[data-status="live"]');
  await whole();
  // A state filter: nothing is stale, so no cell says stale.
  await page.selectOption('select[name=state]', 'stale');
  await Promise.all([page.waitForURL(/state=stale/), page.click('button:text-is("Show")')]);
  if (await page.locator('svg.matrix rect[data-status="live"], svg.matrix rect[data-status="partial"]').count()) throw new Error('the stale filter shows live cells');
  // A checked partition's page: its checks' results, and its lineage as a picture.
  await visit(`/partitions/${encodeURIComponent('daily_summaries/category=news/date=2020-01-03')}`, 'partition-checks');
  for (const check of ['summary_is_consistent', 'enough_reviews']) {
    if (!(await page.locator(`table.checks td:has-text("${check}")`).count())) throw new Error(`the partition page shows no result of the check ${check}`);
  }
  if ((await page.locator('table.checks .badge').count()) < 2) throw new Error('the checks have no result badges');
  if (!(await page.locator('h2:text-is("Lineage") ~ div.graph svg').count())) throw new Error('the partition page draws no lineage');
  // One date field: a calendar.
  await visit('/datasets/generate_raw_reviews', 'dataset-calendar');
  await page.waitForSelector('svg.matrix rect[data-status="live"]');
  // Builds: filtered by status, then a page of one at a time.
  await visit('/builds', 'builds');
  await page.selectOption('#build-filters select[name=status]', 'completed');
  await Promise.all([page.waitForURL(/status=completed/), page.click('#build-filters button')]);
  await page.waitForSelector('#builds tr[data-build]');
  await page.goto(base + '/builds?all=true');
  const listedBuilds = await page.locator('#builds tr[data-build]').count();
  await page.goto(base + '/builds?limit=1&all=true');
  if ((await page.locator('#next-page').count()) !== (listedBuilds > 1 ? 1 : 0)) throw new Error(`${listedBuilds} builds, pages of 1: the next-page link is wrong`);
  await whole();
  await visit('/jobs', 'jobs');
  await page.click('table a[href^="/jobs/"]');
  await page.waitForSelector('h1:has-text("Job ")');
  await shot('job');
  await visit(`/analyze?refs=${encodeURIComponent(buildRef)}`, 'analyze');

  // An SQL query through the form.
  await visit('/sql', 'sql-empty');
  await page.fill('textarea[name=q]', 'SELECT status, count(*) AS n FROM partition_status GROUP BY status');
  await Promise.all([page.waitForURL(/q=/), page.click('button:text-is("Run")')]);
  await page.waitForSelector('#results td');
  await shot('sql');
  await visit('/', 'home');
  // Honest error states.
  const missing = await page.goto(base + '/builds/no-such-build');
  if (missing.status() !== 404) throw new Error(`unknown build: HTTP ${missing.status()}`);
  problems.splice(0, problems.length, ...problems.filter((p) => !p.includes('404')));
});
