// Drives the simulator's WeChat Pay gateway with wechatpay-axios-plugin's own code, in
// public-key mode (`certs` maps the PUB_KEY_ID_ serial to the platform public key).
//
// Native create, query by out-trade-no and by transaction id, close, with the plugin's answer
// verification on (serial, timestamp window and signature; a client holding the wrong key must
// fail); then a delivered notify checked with the plugin's own primitives, as its README tells
// merchants to: Rsa.verify over Formatter.response(timestamp, nonce, body) with the key of the
// named serial, and AesGcm.decrypt with the API v3 key.
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const { Wechatpay, Rsa, Formatter, Aes } = require('wechatpay-axios-plugin');

const SIM_URL = process.env.SIM_URL.replace(/\/$/, '');
const SIM_DIR = process.env.SIM_DIR;
const read = (name) => fs.readFileSync(path.join(SIM_DIR, name), 'utf8');
const identity = JSON.parse(read('sim.json'));
const failures = [];

function check(condition, what) {
  console.log(`${condition ? '  ok    ' : '  FAIL  '}${what}`);
  if (!condition) failures.push(what);
}

function client(platformPublicKey) {
  return new Wechatpay({
    mchid: identity.wechat_mchid,
    serial: identity.wechat_merchant_serial,
    privateKey: read('wechat-merchant-private.pem'),
    certs: { [identity.wechat_platform_serial]: platformPublicKey },
    baseURL: `${SIM_URL}/`,
    timeout: 10000,
  });
}

// A merchant endpoint that keeps each notify's headers and raw body and answers 204.
function notifyReceiver() {
  const waiting = [];
  const received = [];
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      response.writeHead(204).end();
      const notify = { headers: request.headers, body: Buffer.concat(chunks).toString('utf8') };
      const next = waiting.shift();
      if (next) next(notify); else received.push(notify);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${server.address().port}/notify`,
    next: () => new Promise((done, fail) => {
      if (received.length) { done(received.shift()); return; }
      const timer = setTimeout(() => fail(new Error('no notify within 15 s')), 15000);
      waiting.push((notify) => { clearTimeout(timer); done(notify); });
    }),
    close: () => server.close(),
  })));
}

async function payAtSimulator(outTradeNo) {
  const answer = await fetch(`${SIM_URL}/sim/trades/${outTradeNo}/pay`, { method: 'POST' });
  return answer.status;
}

// An answer or the error the plugin throws for a non-2xx (it verifies 2xx answers only).
async function settle(promise) {
  try {
    const { status, data } = await promise;
    return { status, data };
  } catch (error) {
    if (error.response) return { status: error.response.status, data: error.response.data, error };
    return { status: 0, error };
  }
}

const unique = (prefix) => `${prefix}${process.hrtime.bigint()}`;

async function main() {
  const receiver = await notifyReceiver();
  const wxpay = client(read('wechat-platform-public.pem'));
  const { wechat_mchid: mchid, wechat_appid: appid } = identity;
  const order = (outTradeNo, total) => ({
    mchid, appid, out_trade_no: outTradeNo, description: 'mideng 互操作 · 二维码',
    notify_url: receiver.url, amount: { total, currency: 'CNY' },
  });

  console.log('wechatpay-axios-plugin: native create, query, pay, notify, query by id');
  const paidNo = unique('JS');
  let answer = await settle(wxpay.v3.pay.transactions.native.post(order(paidNo, 202)));
  check(answer.status === 200 && String(answer.data.code_url).startsWith('weixin://'),
    `create answers 200 with a verified signature (${answer.status} ${answer.error || ''})`);
  answer = await settle(wxpay.v3.pay.transactions.outTradeNo.$out_trade_no$
    .get({ params: { mchid }, out_trade_no: paidNo }));
  check(answer.status === 200 && answer.data.trade_state === 'NOTPAY',
    `query by out_trade_no: NOTPAY (${answer.status} ${answer.error || ''})`);

  check(await payAtSimulator(paidNo) === 200, 'the buyer pays at the simulator');
  const notify = await receiver.next();
  const headers = notify.headers;
  check(headers['wechatpay-signature-type'] === 'WECHATPAY2-SHA256-RSA2048',
    'the notify names its signature type');
  check(Boolean(headers['request-id']), 'the notify carries a Request-ID');
  const serial = headers['wechatpay-serial'];
  const key = { [identity.wechat_platform_serial]: Rsa.from(read('wechat-platform-public.pem'), Rsa.KEY_TYPE_PUBLIC) }[serial];
  check(Boolean(key), `the notify names the platform's public-key id (${serial})`);
  check(Math.abs(Formatter.timestamp() - Number(headers['wechatpay-timestamp'])) <= 300,
    'the notify is signed within five minutes');
  check(Boolean(key) && Rsa.verify(
    Formatter.response(headers['wechatpay-timestamp'], headers['wechatpay-nonce'], notify.body),
    headers['wechatpay-signature'], key,
  ), 'the plugin verifies the notify signature');
  const { resource } = JSON.parse(notify.body);
  const transaction = JSON.parse(Aes.AesGcm.decrypt(
    resource.ciphertext, identity.wechat_api_v3_key, resource.nonce, resource.associated_data,
  ));
  check(transaction.out_trade_no === paidNo && transaction.trade_state === 'SUCCESS'
    && transaction.amount.total === 202, 'the plugin decrypts the paid transaction');

  answer = await settle(wxpay.v3.pay.transactions.id._transaction_id_
    .get({ params: { mchid }, transaction_id: transaction.transaction_id }));
  check(answer.status === 200 && answer.data.out_trade_no === paidNo
    && answer.data.trade_state === 'SUCCESS',
  `query by transaction_id finds the paid trade (${answer.status} ${answer.error || ''})`);
  answer = await settle(wxpay.v3.pay.transactions.outTradeNo.$out_trade_no$.close
    .post({ mchid }, { out_trade_no: paidNo }));
  check(answer.status === 400 && answer.data.code === 'ORDERPAID',
    `closing a paid trade is refused with ORDERPAID (${answer.status})`);

  console.log('wechatpay-axios-plugin: native create and close');
  const closedNo = unique('JS');
  answer = await settle(wxpay.v3.pay.transactions.native.post(order(closedNo, 1)));
  check(answer.status === 200, `a second create (${answer.status})`);
  answer = await settle(wxpay.v3.pay.transactions.outTradeNo.$out_trade_no$.close
    .post({ mchid }, { out_trade_no: closedNo }));
  check(answer.status === 204, `close answers 204 (${answer.status} ${answer.error || ''})`);
  answer = await settle(wxpay.v3.pay.transactions.outTradeNo.$out_trade_no$
    .get({ params: { mchid }, out_trade_no: closedNo }));
  check(answer.status === 200 && answer.data.trade_state === 'CLOSED', 'the closed trade queries CLOSED');
  answer = await settle(wxpay.v3.pay.transactions.outTradeNo.$out_trade_no$
    .get({ params: { mchid }, out_trade_no: unique('NEVER') }));
  check(answer.status === 404 && answer.data.code === 'ORDER_NOT_EXIST',
    `an unknown trade is 404 ORDER_NOT_EXIST (${answer.status})`);

  console.log('wechatpay-axios-plugin: answer verification is really on');
  answer = await settle(client(read('wechat-merchant-public.pem')).v3.pay.transactions.outTradeNo
    .$out_trade_no$.get({ params: { mchid }, out_trade_no: paidNo }));
  check(Boolean(answer.error) && answer.error.code === 'EV3_RES_HEADER_SIGNATURE_DIGEST',
    `a client with the wrong platform key refuses the answer (${answer.error && answer.error.code})`);
  receiver.close();

  if (failures.length) {
    console.error(`wechatpay-axios-plugin: ${failures.length} expectation(s) failed`);
    process.exit(1);
  }
  console.log('wechatpay-axios-plugin: every flow passed');
}

main().catch((error) => { console.error(error); process.exit(1); });
