// The storm's report (and the bench's, when one was made) opens by itself and shows every chart.
'use strict';

const fs = require('node:fs');
const { test, expect } = require('@playwright/test');
const { shot } = require('./support');

const STORM_CHARTS = [
  'duplicates-by-source',
  'faults-by-kind',
  'layers-over-time',
  'latency-percentiles',
  'attacks',
  'invariants',
];
const BENCH_CHARTS = ['throughput', 'ratios', 'goals'];

async function expectCharts(page, charts) {
  for (const chart of charts) {
    const figures = page.locator(`[data-chart="${chart}"]`);
    const count = await figures.count();
    expect(count, `${chart} is on the page`).toBeGreaterThan(0);
    for (let index = 0; index < count; index += 1) {
      const figure = figures.nth(index);
      await expect(figure, chart).toBeVisible();
      const marks = await figure.locator('svg rect, svg polyline, svg path, table tr').count();
      expect(marks, `${chart} draws data`).toBeGreaterThan(0);
    }
  }
}

test('the storm report shows each chart, from a file, with nothing fetched', async ({ page }) => {
  const report = process.env.MIDENG_STORM_REPORT;
  expect(report, 'MIDENG_STORM_REPORT names the report scripts/browser made').toBeTruthy();
  expect(fs.existsSync(report), report).toBe(true);
  const fetched = [];
  page.on('request', (request) => {
    if (!request.url().startsWith('file:') && !request.url().startsWith('data:')) fetched.push(request.url());
  });
  await page.goto(`file://${report}`);
  await expectCharts(page, STORM_CHARTS);
  await expect(page.locator('body')).toContainText(/invariant/i);
  expect(fetched, 'self-contained').toEqual([]);
  await page.screenshot({ path: shot('storm-report.png'), fullPage: true });
  await page.locator('[data-chart="layers-over-time"]').screenshot({ path: shot('storm-layers.png') });
});

test('the bench report shows each chart', async ({ page }) => {
  const report = process.env.MIDENG_BENCH_REPORT;
  expect(report, 'MIDENG_BENCH_REPORT names the report scripts/browser made').toBeTruthy();
  expect(fs.existsSync(report), report).toBe(true);
  await page.goto(`file://${report}`);
  await expectCharts(page, BENCH_CHARTS);
  await page.screenshot({ path: shot('bench-report.png'), fullPage: true });
});
