// Runs against a `mideng serve` that scripts/browser started; every address comes from it.
'use strict';

const path = require('node:path');
const { defineConfig } = require('@playwright/test');

const artifacts = process.env.MIDENG_ARTIFACTS || path.join(__dirname, 'artifacts');

module.exports = defineConfig({
  testDir: './tests',
  // One service, counted by the console test: the tests run one after the other.
  workers: 1,
  fullyParallel: false,
  forbidOnly: true,
  retries: 0,
  timeout: 60_000,
  expect: { timeout: 15_000 },
  outputDir: path.join(artifacts, 'results'),
  reporter: [['list']],
  use: {
    baseURL: process.env.MIDENG_BASE,
    headless: true,
    viewport: { width: 1280, height: 900 },
    screenshot: 'only-on-failure',
    launchOptions: {
      // Debian's Chromium; Playwright never downloads a browser here.
      executablePath: process.env.MIDENG_CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage'],
    },
  },
});
