// The operator console shows what the test's own requests made each layer decide.
'use strict';

const { test, expect } = require('@playwright/test');
const { base, key, consoleKey, auth, consoleView, total, shot } = require('./support');

async function tileCount(page, layer, outcome) {
  const line = page.locator(`.tile[data-layer="${layer}"] [data-outcome="${outcome}"]`);
  if ((await line.count()) === 0) return 0;
  return Number(await line.getAttribute('data-count'));
}

test('the console counts the replays, tokens and constraint decisions the test caused', async ({ page, request }) => {
  const before = await consoleView(request);

  // An order, a token, a payment, then the same request twice more (two replays), and a
  // second payment request under another key and token (the one-pending constraint).
  const stamp = `${Date.now()}-${Math.random().toString(16).slice(2, 8)}`;
  const orderId = `console-${stamp}`;
  const created = await request.post(`${base}/v1/orders`, {
    headers: auth,
    data: { order_id: orderId, user_id: 'console-buyer', amount: 500, currency: 'CNY' },
  });
  expect(created.status()).toBe(201);
  const token = async () => (await (await request.post(`${base}/v1/tokens`, { headers: auth })).json()).token;
  const pay = async (idempotencyKey, submitToken) =>
    request.post(`${base}/v1/orders/${orderId}/payments`, {
      headers: { ...auth, 'Idempotency-Key': idempotencyKey, 'Idempotency-Token': submitToken },
      data: { channel: 'alipay' },
    });
  const firstToken = await token();
  expect((await pay(`console-key-1-${stamp}`, firstToken)).status()).toBe(201);
  for (let replay = 0; replay < 2; replay += 1) {
    const answer = await pay(`console-key-1-${stamp}`, firstToken);
    expect(answer.headers()['idempotent-replayed']).toBe('true');
  }
  expect((await pay(`console-key-2-${stamp}`, await token())).status()).toBe(200);

  const expected = {
    replay: total(before, 'key', 'replay') + 2,
    token_consumed: total(before, 'token', 'token_consumed') + 2,
    existing_pending: total(before, 'constraint', 'existing_pending') + 1,
  };

  // A wrong key is refused.
  await page.goto('/console#key=not-the-console-key');
  await expect(page.locator('#login-error')).toContainText('does not open');

  // The demo tenant's secret key does not open it; the console's own key does.
  await page.goto(`/console#key=${encodeURIComponent(key)}`);
  await expect(page.locator('#login-error')).toContainText('does not open');
  await page.goto(`/console#key=${encodeURIComponent(consoleKey)}`);
  await expect(page, 'the key leaves the address bar').not.toHaveURL(/key=/);
  await expect.poll(() => tileCount(page, 'key', 'replay')).toBe(expected.replay);
  await expect.poll(() => tileCount(page, 'token', 'token_consumed')).toBe(expected.token_consumed);
  await expect.poll(() => tileCount(page, 'constraint', 'existing_pending')).toBe(expected.existing_pending);
  await expect(page.locator('#recent tbody tr').first()).toBeVisible();
  await expect(page.locator('#caught-over-time polyline[data-layer="key"]')).toHaveCount(1);
  await expect(page.locator('#payments rect[data-label="PENDING"]')).toHaveCount(1);
  await page.screenshot({ path: shot('console.png'), fullPage: true });
});
