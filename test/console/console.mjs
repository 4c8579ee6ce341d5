// Drives Shellgate's web console in headless Chromium (Debian's package,
// through playwright-core) as a user would, for test/e2e's TestConsole,
// which starts the server, makes the gateway request and checks what this
// prints: one JSON line per case, {"case","ok","detail"}.
//
// Environment: SHELLGATE_BASE, SHELLGATE_KEY, CHROMIUM (the browser
// binary), SCREENSHOTS (a directory), EXPECT_STDOUT (text the request's
// command printed), EXPECT_TECHNIQUE (a guardrail detection's technique), EXPECT_FILE (a file the command wrote, relative to the
// home), EXPECT_FILE_CONTENT, CONTAINER_ID.
import { chromium } from 'playwright-core';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

const env = (k) => {
  const v = process.env[k];
  if (v === undefined) throw new Error(`${k} is not set`);
  return v;
};
const base = env('SHELLGATE_BASE');
const key = env('SHELLGATE_KEY');
const shots = env('SCREENSHOTS');
const expectStdout = env('EXPECT_STDOUT');
const expectFile = env('EXPECT_FILE');
const expectContent = env('EXPECT_FILE_CONTENT');
const containerID = env('CONTAINER_ID');
const expectTechnique = env('EXPECT_TECHNIQUE');

const report = (c, ok, detail) => console.log(JSON.stringify({ case: c, ok, detail }));

const browser = await chromium.launch({
  executablePath: env('CHROMIUM'),
  headless: true,
  // As root Chromium needs --no-sandbox; the page is the test's own.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(20000);

// Anything a hostile name or output could make the page do shows here:
// a dialog (alert) means markup from the API ran; a console error or page
// error means the page broke a CSP or Trusted Types rule or threw.
const dialogs = [];
const problems = [];
page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
page.on('pageerror', (e) => problems.push('pageerror: ' + e.message));
page.on('response', (r) => {
  if (r.status() >= 400) problems.push(`HTTP ${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
});
page.on('console', (m) => {
  if (m.type() === 'error') problems.push('console: ' + m.text());
});
// expected drops the problems a step caused on purpose (a refused key, a
// refused form), which Chromium also logs as failed resources.
const expected = (re) => problems.splice(0, problems.length, ...problems.filter((p) => !re.test(p)));

const shot = async (name) => page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });

async function step(name, fn) {
  try {
    const detail = await fn();
    report(name, true, detail ?? null);
    return true;
  } catch (e) {
    await shot('failed-' + name).catch(() => {});
    report(name, false, String(e && e.stack || e));
    return false;
  }
}

const text = (sel) => page.locator(sel).first().textContent();

const all = [];
all.push(await step('wrong key shows an error', async () => {
  await page.goto(base + '/console/');
  await page.fill('#api-key', 'sk-sg-not-a-real-key');
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#login-status .error');
  const msg = await text('#login-status .error');
  await shot('01-wrong-key');
  if (!/refused/.test(msg) || !/401/.test(msg)) throw new Error('error text: ' + msg);
  if (await page.evaluate(() => sessionStorage.length) !== 0) throw new Error('a refused key was kept');
  expected(/status of 401|^HTTP 401 GET \/api\/v1\/containers$/);
  return msg;
}));

all.push(await step('log in', async () => {
  await page.fill('#api-key', key);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#requests');
  await page.waitForSelector('#logging-status #logging-off');
  await shot('02-requests');
  const stored = await page.evaluate(() => Object.values(sessionStorage));
  if (stored.length !== 1 || stored[0] !== key) throw new Error('sessionStorage holds ' + JSON.stringify(stored.length));
  return (await page.locator('#requests tbody tr').count()) + ' request(s) listed';
}));

all.push(await step('filter requests', async () => {
  await page.selectOption('select[name=status]', 'failed');
  await page.waitForSelector('#no-requests');
  if (!page.url().includes('status=failed')) throw new Error('url ' + page.url());
  await page.selectOption('select[name=status]', '');
  await page.waitForSelector('#requests');
  await page.check('#has-detections');
  await page.waitForURL(/has_detections=true/);
  await page.waitForSelector('#requests');
  return await page.locator('#requests tbody tr').count() + ' with detections';
}));

all.push(await step('open a request and see its command output', async () => {
  const row = page.locator('#requests tbody tr').first();
  const container = await row.locator('td').last().textContent();
  if (container !== containerID) throw new Error(`the request's container is ${container}, want ${containerID}`);
  await row.locator('a').first().click();
  await page.waitForSelector('.item.command pre.stdout');
  const stdout = await text('.item.command pre.stdout');
  const command = await text('.item.command pre.command');
  await shot('03-request');
  if (!stdout.includes(expectStdout)) throw new Error('stdout shown: ' + JSON.stringify(stdout));
  const techniques = await page.locator('#detections tbody tr td:nth-child(2)').allTextContents();
  if (!techniques.includes(expectTechnique)) throw new Error('detections shown: ' + JSON.stringify(techniques));
  // The output is markup; it must be shown as text, not parsed.
  if (await page.locator('.item.command pre.stdout *').count() !== 0) throw new Error('the output became elements');
  return { command, stdout };
}));

let fileRow;
all.push(await step('open the container', async () => {
  await page.click('#nav a[data-page=containers]');
  await page.waitForSelector('#containers');
  await shot('04-containers');
  await page.click(`#containers tr[data-id="${containerID}"] a`);
  await page.waitForSelector('#files');
  const fileID = await page.evaluate((want) => {
    for (const tr of document.querySelectorAll('#files tbody tr')) {
      if (tr.querySelector('td.path').textContent === want) return tr.dataset.fileId;
    }
    return null;
  }, expectFile);
  if (!fileID) throw new Error(`no row for ${expectFile}: ${await page.locator('#files').textContent()}`);
  fileRow = `#files tr[data-file-id="${fileID}"]`;
  if (await page.locator(fileRow + ' td.path *:not(code)').count() !== 0) throw new Error('the file name became elements');
  await shot('05-container');
  return fileID;
}));

all.push(await step('download a file', async () => {
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click(fileRow + ' button.download')]);
  const got = await readFile(await dl.path(), 'utf8');
  if (got !== expectContent) throw new Error('downloaded ' + JSON.stringify(got));
  return dl.suggestedFilename();
}));

all.push(await step('promote a file and see it in workspace files', async () => {
  await page.click(fileRow + ' button.promote');
  await page.waitForSelector('#file-status .notice:has-text("Promoted")');
  const msg = await text('#file-status .notice');
  await shot('06-promoted');
  await page.click('#to-files');
  await page.waitForSelector('#workspace-files');
  const names = await page.locator('#workspace-files td.filename').allTextContents();
  await shot('07-workspace-files');
  const want = expectFile.split('/').pop();
  if (!names.includes(want)) throw new Error(`workspace files ${JSON.stringify(names)} lack ${want}`);
  return msg;
}));

all.push(await step('usage by day', async () => {
  await page.click('#nav a[data-page=usage]');
  await page.waitForSelector('#usage');
  const today = new Date().toISOString().slice(0, 10);
  const days = await page.locator('#usage tbody tr td:first-child').allTextContents();
  await shot('08-usage');
  if (!days.includes(today)) throw new Error(`usage days ${JSON.stringify(days)} lack ${today}`);
  return days;
}));

all.push(await step('guardrail form', async () => {
  await page.click('#nav a[data-page=guardrails]');
  await page.waitForSelector('#guardrail-form');
  await page.click('#add-guardrail');
  const row = page.locator('#guardrails .guardrail').last();
  await row.locator('input.name').fill('console-block');
  await row.locator('select.action').selectOption('block');
  await row.locator('input[value=fake_turn]').check();
  await page.click('#guardrail-form button[type=submit]');
  await page.waitForSelector('#guardrail-status .notice');
  // A bad name is the API's 400, shown.
  await page.click('#add-guardrail');
  await page.locator('#guardrails .guardrail').last().locator('input.name').fill('bad name!');
  await page.click('#guardrail-form button[type=submit]');
  await page.waitForSelector('#guardrail-status .error');
  const err = await text('#guardrail-status .error');
  await shot('09-guardrails');
  if (!/400/.test(err)) throw new Error('error shown: ' + err);
  expected(/status of 400|^HTTP 400 PUT \/api\/v1\/guardrails$/);
  return err;
}));

all.push(await step('log out', async () => {
  await page.click('#logout');
  await page.waitForSelector('#login');
  if (await page.evaluate(() => sessionStorage.length) !== 0) throw new Error('the key outlived log out');
}));

report('nothing ran from the data', dialogs.length === 0 && problems.length === 0, { dialogs, problems });
await browser.close();
process.exit(all.every(Boolean) ? 0 : 1);
