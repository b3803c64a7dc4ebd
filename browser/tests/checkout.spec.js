// The demo checkout in a real browser: the page's own layer (token at open, button greyed out
// at the click, one key per attempt reused on retry), then the service's.
'use strict';

const { test, expect } = require('@playwright/test');
const { base, auth, order, openCheckout, shot } = require('./support');

const PAYMENTS = /\/v1\/orders\/[^/]+\/payments$/;

function paymentPosts(page) {
  const seen = [];
  page.on('request', (request) => {
    if (request.method() === 'POST' && PAYMENTS.test(new URL(request.url()).pathname)) {
      seen.push(request.headers());
    }
  });
  return seen;
}

test('ten rapid clicks make one payment, spend one token and leave the button disabled', async ({ page, request }) => {
  const orderId = await openCheckout(page);
  const posts = paymentPosts(page);
  const button = page.locator('#pay');
  const box = await button.boundingBox();
  for (let click = 0; click < 10; click += 1) {
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
  }
  await expect(button).toBeDisabled();
  await expect(page.locator('#qr-card')).toBeVisible();
  await expect(page.locator('#payment-no')).not.toBeEmpty();

  expect(posts.length, 'one request left the page').toBe(1);
  const view = await order(request, orderId);
  expect(view.payments.length, 'one payment').toBe(1);

  // The page paid with the publishable key and its order's client secret, never a price.
  const token = posts[0]['idempotency-token'];
  const pageAuth = {
    Authorization: posts[0].authorization,
    'Mideng-Client-Secret': posts[0]['mideng-client-secret'],
  };
  expect(token).toBeTruthy();
  expect(pageAuth['Mideng-Client-Secret']).toMatch(/^mdcs_[0-9a-f]{64}$/);
  expect(pageAuth.Authorization).not.toBe(auth.Authorization);
  // The token the page sent is spent: the same token under another key is a duplicate.
  const again = await request.post(`${base}/v1/orders/${orderId}/payments`, {
    headers: { ...pageAuth, 'Idempotency-Key': `other-${Date.now()}`, 'Idempotency-Token': token },
    data: { channel: 'alipay' },
  });
  expect(again.status()).toBe(409);
  expect((await again.json()).code).toBe('duplicate-submission');
  // The page's key cannot price an order of its own.
  const priced = await request.post(`${base}/v1/orders`, {
    headers: pageAuth,
    data: { order_id: `cheap-${Date.now()}`, user_id: 'u', amount: 1, currency: 'CNY' },
  });
  expect(priced.status()).toBe(403);
  expect((await order(request, orderId)).payments.length).toBe(1);
  await expect(button).toBeDisabled();
});

test('a payment request lost at the network is retried with the same key and answered from the record', async ({ page, request }) => {
  const orderId = await openCheckout(page);
  const keys = [];
  const answers = [];
  let first = true;
  await page.route(PAYMENTS, async (route) => {
    keys.push(route.request().headers()['idempotency-key']);
    if (first) {
      first = false;
      // The service gets the request and answers; the answer never reaches the page.
      const response = await route.fetch();
      answers.push({ status: response.status(), replayed: response.headers()['idempotent-replayed'] });
      await route.abort('connectionreset');
      return;
    }
    const response = await route.fetch();
    answers.push({ status: response.status(), replayed: response.headers()['idempotent-replayed'] });
    await route.fulfill({ response });
  });
  await page.locator('#pay').click();
  await expect(page.locator('#qr-card')).toBeVisible();
  await expect(page.locator('#events')).toContainText('stored answer replayed');

  expect(keys.length).toBe(2);
  expect(keys[1], 'the retry carries the same key').toBe(keys[0]);
  expect(answers[0]).toEqual({ status: 201, replayed: undefined });
  expect(answers[1]).toEqual({ status: 201, replayed: 'true' });
  expect((await order(request, orderId)).payments.length, 'one payment').toBe(1);
});

test('two tabs on one order take two tokens and share one pending payment', async ({ context, request }) => {
  const tokens = [];
  context.on('response', async (response) => {
    if (response.url().endsWith('/v1/tokens') && response.status() === 201) {
      tokens.push((await response.json()).token);
    }
  });
  const first = await context.newPage();
  const orderId = await openCheckout(first);
  const second = await context.newPage();
  await openCheckout(second, `/?order=${encodeURIComponent(orderId)}`);
  expect(await second.locator('#order-id').textContent()).toBe(orderId);

  await first.locator('#pay').click();
  await expect(first.locator('#payment-no')).not.toBeEmpty();
  await second.locator('#pay').click();
  await expect(second.locator('#payment-no')).not.toBeEmpty();

  expect(new Set(tokens).size, 'a token per tab').toBe(2);
  expect(await second.locator('#payment-no').textContent()).toBe(
    await first.locator('#payment-no').textContent(),
  );
  const payments = (await order(request, orderId)).payments;
  expect(payments.filter((payment) => payment.status === 'PENDING').length).toBe(1);
  expect(payments.length).toBe(1);
});

test('a checkout goes to PAID and shows the entitlement, granted once', async ({ page, request }) => {
  const orderId = await openCheckout(page);
  await page.locator('input[value="wechat"]').check();
  await page.locator('#pay').click();
  await expect(page.locator('#qr-card')).toBeVisible();
  // The QR code is the service's own SVG, loaded.
  await expect
    .poll(() => page.locator('#qr').evaluate((image) => image.complete && image.naturalWidth > 0))
    .toBe(true);
  await page.screenshot({ path: shot('checkout-pending.png') });
  await page.locator('#scan').click();
  await expect(page.locator('#order-status')).toHaveText('PAID', { timeout: 30_000 });
  await expect(page.locator('.entitlement')).toContainText('membership-annual', { timeout: 30_000 });
  await page.screenshot({ path: shot('checkout.png'), fullPage: true });

  const view = await order(request, orderId);
  expect(view.status).toBe('PAID');
  expect(view.payments.filter((payment) => payment.status === 'PAID').length).toBe(1);
  const grants = await request.get(`${base}/v1/entitlements?user_id=${encodeURIComponent(view.user_id)}`, {
    headers: auth,
  });
  const mine = (await grants.json()).grants.filter((grant) => grant.order_id === orderId);
  expect(mine.length, 'one grant').toBe(1);
});
