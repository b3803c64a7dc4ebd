// What every browser test shares: the service's addresses, its demo key, the API as a client
// (not through the page) to check what the page did, and where screenshots go.
'use strict';

const path = require('node:path');
const { expect } = require('@playwright/test');

const base = process.env.MIDENG_BASE;
const key = process.env.MIDENG_KEY;
// The operator console's own key: no tenant's key opens it.
const consoleKey = process.env.MIDENG_CONSOLE_KEY;
const artifacts = process.env.MIDENG_ARTIFACTS || path.join(__dirname, '..', 'artifacts');

if (!base || !key || !consoleKey) {
  throw new Error('MIDENG_BASE, MIDENG_KEY and MIDENG_CONSOLE_KEY must be set (scripts/browser sets them)');
}

const auth = { Authorization: `Bearer ${key}` };

async function getJson(request, url, headers) {
  const response = await request.get(`${base}${url}`, { headers: { ...auth, ...(headers || {}) } });
  expect(response.status(), `GET ${url}`).toBeLessThan(300);
  return response.json();
}

async function order(request, orderId) {
  return getJson(request, `/v1/orders/${encodeURIComponent(orderId)}`);
}

async function consoleView(request) {
  return getJson(request, '/console/overview', { Authorization: `Bearer ${consoleKey}` });
}

function total(view, layer, outcome) {
  return ((view.journal.totals[layer] || {})[outcome]) || 0;
}

// The page's order id, once it has one in its URL.
async function orderIdOf(page) {
  await expect(page).toHaveURL(/\?order=/);
  return new URL(page.url()).searchParams.get('order');
}

// Opens the checkout and waits until its token is there (the button is enabled then).
async function openCheckout(page, url) {
  await page.goto(url || '/');
  await expect(page.locator('#pay')).toBeEnabled();
  return orderIdOf(page);
}

function shot(name) {
  return path.join(artifacts, name);
}

module.exports = { base, key, consoleKey, auth, getJson, order, consoleView, total, orderIdOf, openCheckout, shot };
