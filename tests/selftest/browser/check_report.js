// Open a generated Allure report in headless Chromium and check what a person would see.
//
// Used by tests/selftest/test_report_html.py: a real browser runs the report's JavaScript (the page
// is an empty shell until it does), so this proves the report renders, not just that files exist.
// Debian's /usr/bin/chromium is driven by playwright-core (pinned in package.json; it downloads no
// browser of its own). Checks:
//   1. the Overview's summary widget shows --total test cases;
//   2. (with --failed) the Categories tab, under --category, lists the failed test --failed, and
//      opening it shows the "Failed" status and the --attachment attachment (the metrics table).
// Usage: node check_report.js --url http://127.0.0.1:PORT/index.html --total 3 [--failed NAME]
//          [--category "Threshold miss"] [--attachment metrics] [--screenshots DIR] [--chromium PATH]
// Prints one JSON line with what it saw; exit 0 when every check held, 1 when one did not, 2 when
// the browser could not be driven at all.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const args = { category: 'Threshold miss', attachment: 'metrics', chromium: '/usr/bin/chromium' };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '');
    args[key] = argv[i + 1];
  }
  for (const required of ['url', 'total']) {
    if (!args[required]) {
      console.error(`check_report.js: --${required} is required`);
      process.exit(2);
    }
  }
  return args;
}

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

async function shot(page, args, name) {
  if (args.screenshots) {
    await page.screenshot({ path: path.join(args.screenshots, `${name}.png`), fullPage: true });
  }
}

async function check(page, args) {
  const seen = { total: null, failedListed: false, failedStatus: null, attachment: false, problems: [] };
  const base = args.url.replace(/#.*$/, '');

  await page.goto(base, { waitUntil: 'load' });
  const count = page.locator('.summary-widget__stats .splash__title').first();
  await count.waitFor({ timeout: 30000 });
  seen.total = Number((await count.innerText()).trim());
  await shot(page, args, 'overview');
  if (seen.total !== Number(args.total)) {
    seen.problems.push(`overview shows ${seen.total} test cases, expected ${args.total}`);
  }
  if (!args.failed) {
    return seen;
  }

  await page.goto(`${base}#categories`, { waitUntil: 'load' });
  const title = (text) => page.locator(':scope > .node__title', { hasText: text });
  const group = page.locator('div.node', { has: title(args.category) }).first();
  await group.waitFor({ timeout: 30000 });
  await group.locator(':scope > .node__title').click();
  const leaf = group.locator('a.node__leaf', { hasText: args.failed }).first();
  // A category nests one group per failure message: open this category's groups until the test shows.
  for (let round = 0; round < 5 && !(await leaf.isVisible()); round += 1) {
    const closed = group.locator('div.node:not(.node__expanded) > .node__title').first();
    if ((await closed.count()) === 0) break;
    await closed.click();
  }
  seen.failedListed = await leaf.isVisible();
  if (!seen.failedListed) {
    seen.problems.push(`"${args.failed}" is not listed under category "${args.category}"`);
    await shot(page, args, 'categories');
    return seen;
  }
  await leaf.click();
  const status = page.locator('.label_status_failed', { hasText: 'Failed' }).first();
  await status.waitFor({ timeout: 15000 }).catch(() => {});
  seen.failedStatus = (await status.count()) ? (await status.innerText()).trim() : null;
  if (seen.failedStatus !== 'Failed') {
    seen.problems.push(`the page of "${args.failed}" does not show the Failed status`);
  }
  const attachment = page.getByText(args.attachment, { exact: true }).first();
  await attachment.waitFor({ timeout: 15000 }).catch(() => {});
  seen.attachment = await attachment.isVisible();
  if (!seen.attachment) {
    seen.problems.push(`the page of "${args.failed}" has no "${args.attachment}" attachment`);
  }
  await shot(page, args, 'failed-test');
  return seen;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  let chromium;
  try {
    ({ chromium } = require('playwright-core'));
  } catch (err) {
    console.error(`check_report.js: playwright-core is not installed (npm ci at the repository root): ${err.message}`);
    process.exit(2);
  }
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'gpuaccept-chromium-'));
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: args.chromium,
      headless: true,
      args: FLAGS,
    });
  } catch (err) {
    console.error(`check_report.js: could not start ${args.chromium}: ${err.message}`);
    process.exit(2);
  }
  let seen;
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30000);
    seen = await check(page, args);
  } catch (err) {
    seen = { problems: [`browser check crashed: ${err.message}`] };
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  console.log(JSON.stringify(seen));
  process.exit(seen.problems.length ? 1 : 0);
}

main();
