// Environments in Debian's Chromium: the header's selector switches a page to `dev` and keeps it
// there (the cookie), and the promotion asks for its box to be ticked before it posts.
//   node environments.mjs BASE_URL REF   (REF built in dev only; screenshots into $SHOTS)
import { open, check } from './browser.mjs';

const [base, ref] = process.argv.slice(2);
const shots = process.env.SHOTS;
const session = await open(800);
const { page } = session;
const listed = async () => (await page.innerText('main')).includes(ref);
await check(session, 'environments', async () => {
  await page.goto(`${base}/partitions`);
  if (await listed()) throw new Error(`prod lists ${ref}, built in dev only`);
  await Promise.all([page.waitForURL(/env=dev/), page.selectOption('header form.env select', 'dev')]);
  if (!(await listed())) throw new Error(`dev's page does not list ${ref}`);
  // A link the page makes, followed: still dev.
  await page.click('header a[href="/partitions"]');
  if (!(await listed())) throw new Error(`the choice of dev is not remembered`);
  await page.goto(`${base}/environments/dev`);
  if (!(await page.innerText('main')).includes(ref)) throw new Error('the diff does not list the partition');
  if (shots) await page.screenshot({ path: `${shots}/environment-diff.png`, fullPage: true });
  // Unticked, the browser keeps the form; ticked, it posts and prod has the partition.
  const promote = page.locator('form[action="/ui/environments/dev/promote"]');
  await promote.locator('button').click();
  if (!page.url().endsWith('/environments/dev')) throw new Error(`posted without the box ticked: ${page.url()}`);
  await promote.locator('input[name="confirm"]').check();
  await Promise.all([page.waitForURL(/other=prod/), promote.locator('button').click()]);
  if (!(await page.innerText('main')).includes('has nothing prod does not have')) {
    throw new Error('after the promotion, dev still differs from prod');
  }
});
