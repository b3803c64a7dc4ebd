// Drives the channel simulator with the official Alipay Node.js SDK (`alipay-sdk`), using the
// SDK's own code for everything it offers: request signing, response verification
// (`validateSign: true`) and notify verification (`checkNotifySignV2`, `checkNotifySign`).
// Then builds a notify the way the channel would (the SDK's notify sign-content rule: every
// field but `sign` and `sign_type`, sorted, empty values kept), checks the SDK accepts it, and
// writes it for the service's adapter to verify.
//
// Environment: SIM_URL, SIM_DIR (the simulator's data directory), CHANNEL_PRIVATE_KEY and
// CHANNEL_PUBLIC_KEY (PEM files the SDK-built notify is signed and checked with), NOTIFY_OUT.
// Exits non-zero on the first failure.

import { createRequire } from 'node:module';
import { createServer } from 'node:http';
import { createSign } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import assert from 'node:assert/strict';

const require = createRequire(process.env.SDK_NODE_MODULES + '/');
const { AlipaySdk } = require('alipay-sdk');

const simUrl = process.env.SIM_URL;
const simDir = process.env.SIM_DIR;
const identity = JSON.parse(readFileSync(`${simDir}/sim.json`, 'utf8'));
const read = (path) => readFileSync(path, 'utf8');

const sdk = new AlipaySdk({
  appId: identity.alipay_app_id,
  privateKey: read(`${simDir}/alipay-merchant-private.pem`),
  keyType: 'PKCS8',
  alipayPublicKey: read(`${simDir}/alipay-gateway-public.pem`),
  gateway: `${simUrl}/gateway.do`,
  camelcase: false,
});

// The merchant's notify receiver: keeps every form it is sent and answers `success`.
const received = [];
const receiver = createServer((request, response) => {
  let body = '';
  request.setEncoding('utf8');
  request.on('data', (chunk) => { body += chunk; });
  request.on('end', () => {
    received.push(body);
    response.end('success');
  });
});
await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const notifyUrl = `http://127.0.0.1:${receiver.address().port}/notify`;

async function control(path) {
  const response = await fetch(`${simUrl}${path}`, { method: 'POST' });
  assert.equal(response.status, 200, `${path}: ${await response.text()}`);
}

async function nextNotify(count) {
  const deadline = Date.now() + 15000;
  while (received.length < count) {
    assert.ok(Date.now() < deadline, 'a notify arrives within 15 s');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return Object.fromEntries(new URLSearchParams(received[count - 1]));
}

const exec = (method, bizContent, extra = {}) =>
  sdk.exec(method, { bizContent, ...extra }, { validateSign: true });

const suffix = Date.now().toString(36);
const paid = `NODE-PAID-${suffix}`;
const closed = `NODE-CLOSED-${suffix}`;

// precreate, query before the scan, pay, the notify, query, a refused close.
const created = await exec('alipay.trade.precreate',
  { out_trade_no: paid, total_amount: '88.80', subject: '拿铁 latte' }, { notify_url: notifyUrl });
assert.equal(created.code, '10000', JSON.stringify(created));
assert.ok(created.qr_code, 'a QR code');
const early = await exec('alipay.trade.query', { out_trade_no: paid });
assert.equal(early.sub_code, 'ACQ.TRADE_NOT_EXIST', JSON.stringify(early));
await control(`/sim/trades/${paid}/pay`);
const notify = await nextNotify(1);
assert.equal(sdk.checkNotifySignV2(notify), true, 'checkNotifySignV2 accepts the notify');
assert.equal(sdk.checkNotifySign(notify), true, 'checkNotifySign accepts the notify');
assert.equal(notify.trade_status, 'TRADE_SUCCESS');
assert.equal(notify.total_amount, '88.80');
assert.match(notify.seller_id ?? '', /^2088\d{12}$/, 'the notify names the seller');
assert.equal(notify.seller_id, identity.alipay_seller_id);
assert.equal(notify.auth_app_id, identity.alipay_app_id);
assert.ok(JSON.parse(notify.fund_bill_list).length > 0, 'fund_bill_list is a JSON list');
assert.equal(sdk.checkNotifySignV2({ ...notify, total_amount: '0.01' }), false,
  'a tampered notify fails');
const query = await exec('alipay.trade.query', { out_trade_no: paid });
assert.equal(query.trade_status, 'TRADE_SUCCESS', JSON.stringify(query));
assert.equal(query.trade_no, notify.trade_no);
const refused = await exec('alipay.trade.close', { out_trade_no: paid });
assert.equal(refused.sub_code, 'ACQ.TRADE_STATUS_ERROR', JSON.stringify(refused));

// precreate, scan, close, query, the TRADE_CLOSED notify.
await exec('alipay.trade.precreate',
  { out_trade_no: closed, total_amount: '1.00', subject: 'close me' }, { notify_url: notifyUrl });
await control(`/sim/trades/${closed}/scan`);
const close = await exec('alipay.trade.close', { out_trade_no: closed });
assert.equal(close.code, '10000', JSON.stringify(close));
const afterClose = await exec('alipay.trade.query', { out_trade_no: closed });
assert.equal(afterClose.trade_status, 'TRADE_CLOSED');
const closedNotify = await nextNotify(2);
assert.equal(closedNotify.trade_status, 'TRADE_CLOSED');
assert.equal(sdk.checkNotifySignV2(closedNotify), true, 'the close notify verifies');

// A wrongly signed answer is refused by the SDK: a verifier with another key.
const stranger = new AlipaySdk({
  appId: identity.alipay_app_id,
  privateKey: read(`${simDir}/alipay-merchant-private.pem`),
  keyType: 'PKCS8',
  alipayPublicKey: read(process.env.CHANNEL_PUBLIC_KEY),
  gateway: `${simUrl}/gateway.do`,
});
await assert.rejects(
  stranger.exec('alipay.trade.query', { bizContent: { out_trade_no: paid } }, { validateSign: true }),
  'an answer signed by another key is refused');

// A notify as the channel would sign it, with an empty and a non-ASCII field.
const built = {
  notify_time: '2026-11-29 12:05:01', notify_type: 'trade_status_sync',
  notify_id: `sdknode${suffix}`, app_id: '2021000000000001', charset: 'utf-8', version: '1.0',
  sign_type: 'RSA2', trade_no: '2026112922001400000000000002', out_trade_no: 'P20261129000002',
  trade_status: 'TRADE_SUCCESS', total_amount: '460.00', seller_id: '2088000000000001',
  subject: '订单 – 咖啡 ☕', passback_params: '', gmt_payment: '2026-11-29 12:05:00',
};
const content = Object.keys(built).filter((key) => key !== 'sign' && key !== 'sign_type').sort()
  .map((key) => `${key}=${built[key]}`).join('&');
built.sign = createSign('RSA-SHA256').update(content, 'utf8')
  .sign(read(process.env.CHANNEL_PRIVATE_KEY), 'base64');
const channelView = new AlipaySdk({
  appId: '2021000000000001',
  privateKey: read(process.env.CHANNEL_PRIVATE_KEY),
  keyType: 'PKCS8',
  alipayPublicKey: read(process.env.CHANNEL_PUBLIC_KEY),
});
assert.equal(channelView.checkNotifySignV2(built), true, 'the SDK accepts the built notify');
writeFileSync(process.env.NOTIFY_OUT, new URLSearchParams(built).toString());

receiver.close();
console.log(`alipay-sdk (Node): precreate, query, close and notifies verified; wrote ${process.env.NOTIFY_OUT}`);
