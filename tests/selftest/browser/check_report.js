// Open the reports in headless Chromium and check what a person would see, and that nothing calls out.
//
// Used by tests/selftest/test_report_html.py and by CI (through serve_and_check.py): a real browser runs
// the report's JavaScript (the Allure page is an empty shell until it does), so this proves the pages
// render, not just that files exist. Debian's /usr/bin/chromium is driven by playwright-core (pinned in
// package.json; it downloads no browser of its own).
//
// Allure report (--url, served on 127.0.0.1):
//   1. the gpuaccept bar is the first thing on the page, at the top, and names the cluster --verdict;
//      its button opens the acceptance summary over the report;
//   2. the Overview's summary widget shows --total test cases (and with --trend N, the trend N runs);
//   3. (with --failed) the Categories tab, under --category, lists the test --failed, whose page shows
//      its status and the --attachment attachment (the "checks" table).
// Summary page (--summary, a file:// URL: opened as a customer opens an attachment):
//   4. the verdict header is at the top of the first screen and says --verdict; every node of --nodes
//      is named with a verdict.
// Every page: no request leaves 127.0.0.1 / file: / data: / blob: (each is blocked, listed and fails).
// Usage: node check_report.js [--url URL --total N] [--failed NAME --category CAT --attachment checks|""]
//          [--trend N] [--verdict "NOT ACCEPTED"] [--summary file:///.../summary.html --nodes a,b]
//          [--screenshots DIR] [--chromium PATH]
// Prints one JSON line with what it saw; exit 0 when every check held, 1 when one did not, 2 when the
// browser could not be driven at all.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

function parseArgs(argv) {
  const args = { attachment: 'checks', chromium: '/usr/bin/chromium' };
  for (let i = 0; i < argv.length; i += 2) {
    args[argv[i].replace(/^--/, '')] = argv[i + 1] ?? '';
  }
  if (!args.url && !args.summary) {
    console.error('check_report.js: give --url (an Allure report) and/or --summary (the summary page)');
    process.exit(2);
  }
  if (args.url && !args.total) {
    console.error('check_report.js: --total is required with --url');
    process.exit(2);
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
  '--disable-domain-reliability',
  '--disable-breakpad',
];

function local(url) {
  return /^(data:|blob:|about:|file:|chrome-error:)/.test(url) || /^https?:\/\/(127\.0\.0\.1|localhost)(:\d+)?\//.test(url);
}

async function shot(page, seen, args, name, fullPage = true) {
  if (args.screenshots) {
    const file = path.join(args.screenshots, `${name}.png`);
    await page.screenshot({ path: file, fullPage });
    seen.screenshots.push(file);
  }
}

async function checkAllure(page, args, seen) {
  const base = args.url.replace(/#.*$/, '');
  await page.goto(base, { waitUntil: 'load' });
  const count = page.locator('.summary-widget__stats .splash__title').first();
  await count.waitFor({ timeout: 30000 });
  seen.total = Number((await count.innerText()).trim());
  if (seen.total !== Number(args.total)) {
    seen.problems.push(`overview shows ${seen.total} test cases, expected ${args.total}`);
  }
  await page.waitForTimeout(500); // let the widgets draw before the picture is taken
  await shot(page, seen, args, 'allure-overview', false);

  const bar = page.locator('#gpuaccept-bar');
  if (!(await bar.count()) || !(await bar.isVisible())) {
    seen.problems.push('the Allure page has no visible gpuaccept verdict bar');
  } else {
    const box = await bar.boundingBox();
    seen.bar = { text: (await bar.innerText()).replace(/\s+/g, ' ').trim(), top: box.y };
    if (box.y > 5) seen.problems.push(`the verdict bar is not at the top of the page (y=${box.y})`);
    if (args.verdict && !seen.bar.text.startsWith(args.verdict)) {
      seen.problems.push(`the verdict bar says "${seen.bar.text}", expected it to start with "${args.verdict}"`);
    }
    await page.locator('#gpuaccept-summary-toggle').click();
    const frame = page.frameLocator('#gpuaccept-summary iframe');
    const header = frame.locator('#verdict .big');
    await header.waitFor({ timeout: 15000 }).catch(() => {});
    seen.summaryInAllure = (await header.count()) ? (await header.innerText()).trim() : null;
    if (!seen.summaryInAllure || (args.verdict && seen.summaryInAllure !== args.verdict)) {
      seen.problems.push(`the summary opened from the bar shows "${seen.summaryInAllure}"`);
    }
    await shot(page, seen, args, 'allure-summary-open', false);
    await page.locator('#gpuaccept-summary-toggle').click();
  }

  if (args.trend) {
    const lines = page.locator('.history-trend .report-line');
    await lines.first().waitFor({ timeout: 15000 }).catch(() => {});
    seen.trend = await lines.count();
    if (seen.trend !== Number(args.trend)) {
      seen.problems.push(`the trend shows ${seen.trend} run(s), expected ${args.trend}`);
    }
  }
  if (!args.failed) return;

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
    await shot(page, seen, args, 'allure-categories');
    return;
  }
  await leaf.click();
  const status = page.locator('.label_status_failed, .label_status_broken', { hasText: /^\s*(Failed|Broken)\s*$/ }).first();
  await status.waitFor({ timeout: 15000 }).catch(() => {});
  seen.failedStatus = (await status.count()) ? (await status.innerText()).trim() : null;
  if (!['Failed', 'Broken'].includes(seen.failedStatus)) {
    seen.problems.push(`the page of "${args.failed}" does not show a Failed or Broken status`);
  }
  if (args.attachment) {
    const attachment = page.getByText(args.attachment, { exact: true }).first();
    await attachment.waitFor({ timeout: 15000 }).catch(() => {});
    seen.attachment = await attachment.isVisible();
    if (!seen.attachment) {
      seen.problems.push(`the page of "${args.failed}" has no "${args.attachment}" attachment`);
    }
  }
  await shot(page, seen, args, 'allure-failed-test');
}

async function checkSummary(page, args, seen) {
  await page.setViewportSize({ width: 1366, height: 768 });
  await page.goto(args.summary, { waitUntil: 'load' });
  const header = page.locator('#verdict .big');
  await header.waitFor({ timeout: 15000 });
  const box = await header.boundingBox();
  seen.summary = { verdict: (await header.innerText()).trim(), top: box.y, nodes: {} };
  if (box.y > 200) seen.problems.push(`the verdict is not at the top of the summary (y=${box.y})`);
  if (args.verdict && seen.summary.verdict !== args.verdict) {
    seen.problems.push(`the summary says "${seen.summary.verdict}", expected "${args.verdict}"`);
  }
  for (const node of (args.nodes || '').split(',').filter(Boolean)) {
    const row = page.locator('table.matrix th.node', { hasText: node }).first();
    const verdict = row.locator('.chip').first();
    seen.summary.nodes[node] = (await verdict.count()) ? (await verdict.innerText()).trim() : null;
    if (!seen.summary.nodes[node]) seen.problems.push(`the summary names no verdict for node ${node}`);
  }
  await shot(page, seen, args, 'summary-first-screen', false);
  await shot(page, seen, args, 'summary-full', true);
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
      viewport: { width: 1280, height: 720 },
    });
  } catch (err) {
    console.error(`check_report.js: could not start ${args.chromium}: ${err.message}`);
    process.exit(2);
  }
  const seen = { external: [], requests: 0, problems: [], screenshots: [] };
  // Every request of every page and frame: the local ones go through, anything else is blocked and listed.
  await context.route('**/*', (route) => {
    const url = route.request().url();
    seen.requests += 1;
    if (local(url)) return route.continue();
    seen.external.push(url);
    return route.abort('blockedbyclient');
  });
  context.on('request', (request) => {
    const url = request.url();
    if (!local(url) && !seen.external.includes(url)) seen.external.push(url);
  });
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(30000);
    if (args.url) await checkAllure(page, args, seen);
    if (args.summary) await checkSummary(page, args, seen);
  } catch (err) {
    seen.problems.push(`browser check crashed: ${err.message}`);
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  if (seen.external.length) {
    seen.problems.push(`the page tried to load from outside: ${seen.external.slice(0, 5).join(', ')}`);
  }
  console.log(JSON.stringify(seen));
  process.exit(seen.problems.length ? 1 : 0);
}

main();
