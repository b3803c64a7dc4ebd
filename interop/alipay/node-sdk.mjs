// Drives the channel simulator with the official Alipay Node.js SDK (`alipay-sdk`), using the
// SDK's own code for everything it offers: request signing, response verification
// (`validateSign: true`) and notify verification (`checkNotifySignV2`, `checkNotifySign`), over
// `gateway.do` (`exec`) and over OpenAPI v3 (`curl`, which always verifies its answers' headers),
// and the day's bill (`alipay.data.dataservice.bill.downloadurl.query` and its zip).
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
import { inflateRawSync } from 'node:zlib';
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
  endpoint: simUrl,
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
  endpoint: simUrl,
});
await assert.rejects(
  stranger.exec('alipay.trade.query', { bizContent: { out_trade_no: paid } }, { validateSign: true }),
  'an answer signed by another key is refused');

// OpenAPI v3 through the SDK's curl(): it signs the authorization header and verifies every
// 2xx answer over its alipay-timestamp, alipay-nonce and alipay-signature headers (always on
// for curl()); a 4xx or 5xx becomes an AlipayRequestError with the answer's code.
const v3 = (path, body) => sdk.curl('POST', path, { body });
const v3Refusal = (status, code) => (error) => {
  assert.equal(error.name, 'AlipayRequestError', String(error));
  assert.equal(error.responseHttpStatus, status, String(error));
  assert.equal(error.code, code, String(error));
  return true;
};
const v3Paid = `NODE-V3-PAID-${suffix}`;
const v3Closed = `NODE-V3-CLOSED-${suffix}`;
const v3Created = await v3('/v3/alipay/trade/precreate',
  { out_trade_no: v3Paid, total_amount: '12.34', subject: '美式 americano', notify_url: notifyUrl });
assert.equal(v3Created.responseHttpStatus, 200);
assert.ok(v3Created.data.qr_code, 'a QR code over v3');
assert.ok(v3Created.traceId, 'a trace id');
await assert.rejects(v3('/v3/alipay/trade/query', { out_trade_no: v3Paid }),
  v3Refusal(400, 'ACQ.TRADE_NOT_EXIST'));
await control(`/sim/trades/${v3Paid}/pay`);
const v3Notify = await nextNotify(3);
assert.equal(v3Notify.out_trade_no, v3Paid);
assert.equal(sdk.checkNotifySignV2(v3Notify), true, 'the notify of a v3 trade verifies');
const v3Query = await v3('/v3/alipay/trade/query', { out_trade_no: v3Paid });
assert.equal(v3Query.data.trade_status, 'TRADE_SUCCESS', JSON.stringify(v3Query.data));
assert.equal(v3Query.data.total_amount, '12.34');
assert.equal(v3Query.data.trade_no, v3Notify.trade_no);
await assert.rejects(v3('/v3/alipay/trade/close', { out_trade_no: v3Paid }),
  v3Refusal(400, 'ACQ.TRADE_STATUS_ERROR'));
await v3('/v3/alipay/trade/precreate',
  { out_trade_no: v3Closed, total_amount: '1.00', subject: 'close me', notify_url: notifyUrl });
await control(`/sim/trades/${v3Closed}/scan`);
const v3Close = await v3('/v3/alipay/trade/close', { out_trade_no: v3Closed });
assert.equal(v3Close.responseHttpStatus, 200);
assert.equal(v3Close.data.out_trade_no, v3Closed);
const v3AfterClose = await v3('/v3/alipay/trade/query', { out_trade_no: v3Closed });
assert.equal(v3AfterClose.data.trade_status, 'TRADE_CLOSED');
assert.equal((await nextNotify(4)).trade_status, 'TRADE_CLOSED');
// The SDK refuses a v3 answer signed by another key, and the simulator a request signed by
// another key.
await assert.rejects(stranger.curl('POST', '/v3/alipay/trade/query', { body: { out_trade_no: v3Paid } }),
  v3Refusal(200, 'response-signature-verify-error'));
const impostor = new AlipaySdk({
  appId: identity.alipay_app_id,
  privateKey: read(process.env.CHANNEL_PRIVATE_KEY),
  keyType: 'PKCS8',
  alipayPublicKey: read(`${simDir}/alipay-gateway-public.pem`),
  endpoint: simUrl,
});
await assert.rejects(impostor.curl('POST', '/v3/alipay/trade/query', { body: { out_trade_no: v3Paid } }),
  v3Refusal(401, 'invalid-signature'));

// The day's bill: its download URL through exec (the answer's signature verified), then the zip
// it names, read with Node's own inflate and GBK decoder: the detail lists the paid trade and
// its totals.
function unzip(archive) {
  const end = archive.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
  assert.ok(end >= 0, 'the bill is a zip');
  let entry = archive.readUInt32LE(end + 16);
  const files = [];
  for (let index = 0; index < archive.readUInt16LE(end + 10); index += 1) {
    assert.equal(archive.readUInt32LE(entry), 0x02014b50, 'a central directory entry');
    const method = archive.readUInt16LE(entry + 10);
    const size = archive.readUInt32LE(entry + 20);
    const local = archive.readUInt32LE(entry + 42);
    const start = local + 30 + archive.readUInt16LE(local + 26) + archive.readUInt16LE(local + 28);
    const data = archive.subarray(start, start + size);
    files.push(method === 8 ? inflateRawSync(data) : data);
    entry += 46 + archive.readUInt16LE(entry + 28) + archive.readUInt16LE(entry + 30)
      + archive.readUInt16LE(entry + 32);
  }
  return files;
}
const day = new Date(Date.now() + 8 * 3600_000).toISOString().slice(0, 10);
const bill = await exec('alipay.data.dataservice.bill.downloadurl.query',
  { bill_type: 'trade', bill_date: day });
assert.equal(bill.code, '10000', JSON.stringify(bill));
const download = await fetch(bill.bill_download_url);
assert.equal(download.status, 200, 'the download URL serves the file');
const texts = unzip(Buffer.from(await download.arrayBuffer()))
  .map((file) => new TextDecoder('gbk').decode(file));
const detail = texts.find((text) => text.includes('业务明细列表结束'));
assert.ok(detail, 'the zip holds the detail');
assert.ok(texts.some((text) => text.includes('业务汇总列表')), 'and its summary');
assert.ok(detail.includes(paid) && detail.includes('88.80'), 'the detail lists the paid trade');
assert.match(detail, /#交易合计：\d+笔，商家实收共[\d.]+元/, 'with its totals');
const tomorrow = new Date(Date.now() + 32 * 3600_000).toISOString().slice(0, 10);
const future = await exec('alipay.data.dataservice.bill.downloadurl.query',
  { bill_type: 'trade', bill_date: tomorrow });
assert.equal(future.sub_code, 'isp.bill_not_exist', JSON.stringify(future));

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
console.log(`alipay-sdk (Node): precreate, query, close (gateway.do and v3 curl), the day's bill and notifies verified; wrote ${process.env.NOTIFY_OUT}`);
