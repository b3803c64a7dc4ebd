// The demo checkout: the seeds' first layer, in the page.
//
// - the server prices, the page pays: the page names a product of the demo merchant's catalog
//   (POST /demo/checkout), the service as the merchant's server makes the order at its price
//   and answers the order's client secret, which every later call sends beside the
//   publishable key (kept in localStorage per order, so another tab of the same order pays
//   the same order);
// - a one-time token is taken when the page opens (one per tab);
// - the pay button is disabled the moment it is clicked, and clicks closer together than
//   DEBOUNCE_MS are dropped before any request;
// - each checkout attempt has one Idempotency-Key, kept in sessionStorage for the order: a
//   request that fails at the network (or answers 5xx, 202 "not confirmed yet" or 409
//   "in progress") is sent again with the same key and token: the token is bound to the key
//   that spent it, and the service answers what it stored or runs the attempt again;
// - the pay URL is drawn as a QR code by the service; the order is followed until PAID and
//   its entitlement is shown.
'use strict';

(function () {
  const DEBOUNCE_MS = 800;
  const NETWORK_RETRIES = 4;
  const POLL_MS = 1000;
  const POLL_MAX = 600;
  const SKU = 'membership-annual';

  const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
  // The tenant's publishable key: it opens only what this page does.
  const apiKey = meta('mideng-publishable-key');
  const simulator = meta('mideng-simulator') === 'on';
  const $ = (id) => document.getElementById(id);

  const payButton = $('pay');
  const statusLine = $('status');
  let orderId = null;
  let userId = null;
  // The order's client secret: with the publishable key, it opens this order and nothing else.
  let clientSecret = null;
  let token = null;
  let busy = false;
  let lastClick = -Infinity;
  let following = false;

  function randomHex(bytes) {
    const buffer = new Uint8Array(bytes);
    crypto.getRandomValues(buffer);
    return Array.from(buffer, (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function redact(text) {
    return text.length > 8 ? `${text.slice(0, 4)}…${text.slice(-4)}` : '…';
  }

  function note(text, kind) {
    const item = document.createElement('li');
    const time = document.createElement('time');
    time.textContent = new Date().toLocaleTimeString();
    item.append(time, ' ', text);
    if (kind) item.className = kind;
    $('events').prepend(item);
  }

  function say(text) {
    statusLine.textContent = text;
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // One API call. Throws only when no answer arrived (the network failed).
  async function api(method, path, body, extra) {
    const headers = { Authorization: `Bearer ${apiKey}`, ...(extra || {}) };
    if (clientSecret) headers['Mideng-Client-Secret'] = clientSecret;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    return { status: response.status, headers: response.headers, data };
  }

  // The checkout attempt of this order in this tab: its key survives a reload.
  function attemptKey(create) {
    const name = `mideng-attempt-${orderId}`;
    let key = sessionStorage.getItem(name);
    if (!key && create) {
      key = `chk_${randomHex(16)}`;
      sessionStorage.setItem(name, key);
    }
    return key;
  }

  function forgetAttempt() {
    sessionStorage.removeItem(`mideng-attempt-${orderId}`);
  }

  async function newToken() {
    token = null;
    payButton.disabled = true;
    for (let attempt = 0; attempt < NETWORK_RETRIES; attempt += 1) {
      try {
        const answer = await api('POST', '/v1/tokens');
        if (answer.status === 201 && answer.data && answer.data.token) {
          token = answer.data.token;
          note(`token layer: submit token ${redact(token)} issued for this page`);
          return true;
        }
        say(`Could not get a submit token (${answer.status}).`);
        return false;
      } catch (_) {
        await sleep(300 * (attempt + 1));
      }
    }
    say('The service is unreachable.');
    return false;
  }

  async function ensureOrder() {
    const params = new URLSearchParams(location.search);
    orderId = params.get('order');
    userId = localStorage.getItem('mideng-demo-user');
    if (!userId) {
      userId = `buyer-${randomHex(6)}`;
      localStorage.setItem('mideng-demo-user', userId);
    }
    if (orderId) {
      clientSecret = localStorage.getItem(`mideng-client-secret-${orderId}`);
      if (!clientSecret) {
        say(`Order ${orderId} was not opened in this browser; start a new checkout.`);
        return false;
      }
      const answer = await api('GET', `/v1/orders/${encodeURIComponent(orderId)}`);
      if (answer.status !== 200) {
        say(`Order ${orderId} was not found.`);
        return false;
      }
      userId = answer.data.user_id;
      showOrder();
      if (answer.data.status === 'PAID') {
        follow();
      }
      return true;
    }
    // The merchant's server prices the product; the page only names it.
    const answer = await api('POST', '/demo/checkout', { sku: SKU, user_id: userId });
    if (answer.status !== 201 || !answer.data || !answer.data.client_secret) {
      say(`Could not start the checkout (${answer.status}).`);
      return false;
    }
    orderId = answer.data.order_id;
    clientSecret = answer.data.client_secret;
    localStorage.setItem(`mideng-client-secret-${orderId}`, clientSecret);
    history.replaceState(null, '', `/?order=${encodeURIComponent(orderId)}`);
    note(`order ${orderId} priced by the merchant's server: ${answer.data.amount} fen`);
    showOrder();
    return true;
  }

  function showOrder() {
    $('order-id').textContent = orderId;
    $('same-order').href = `/?order=${encodeURIComponent(orderId)}`;
  }

  function channel() {
    return document.querySelector('input[name="channel"]:checked').value;
  }

  function setChannelsDisabled(disabled) {
    for (const input of document.querySelectorAll('input[name="channel"]')) {
      input.disabled = disabled;
    }
  }

  // The click: disabled at once, debounced, one request in flight at most.
  payButton.addEventListener('click', () => {
    const now = performance.now();
    if (busy || now - lastClick < DEBOUNCE_MS) {
      note('page: click dropped (debounced)', 'caught');
      return;
    }
    lastClick = now;
    busy = true;
    payButton.disabled = true;
    setChannelsDisabled(true);
    pay().finally(() => {
      busy = false;
    });
  });

  async function pay() {
    const key = attemptKey(true);
    const body = { channel: channel() };
    say('Creating the payment…');
    for (let attempt = 0; attempt <= NETWORK_RETRIES; attempt += 1) {
      let answer;
      try {
        answer = await api('POST', `/v1/orders/${encodeURIComponent(orderId)}/payments`, body, {
          'Idempotency-Key': key,
          'Idempotency-Token': token,
        });
      } catch (_) {
        note(`network: the request failed; retrying with the same key ${redact(key)}`, 'caught');
        await sleep(400 * (attempt + 1));
        continue;
      }
      if (answer.status >= 500) {
        note(`service: ${answer.status}; retrying with the same key ${redact(key)}`, 'caught');
        await sleep(400 * (attempt + 1));
        continue;
      }
      await answered(answer, key);
      return;
    }
    say('The network keeps failing. Click again to retry (same attempt, same key).');
    payButton.disabled = false;
  }

  async function answered(answer, key) {
    const replayed = answer.headers.get('Idempotent-Replayed') === 'true';
    if (replayed) {
      note(`key layer: stored answer replayed for ${redact(key)}`, 'caught');
    }
    const data = answer.data || {};
    if ((answer.status === 201 || answer.status === 200) && data.payment_no) {
      if (!replayed) note(`payment ${data.payment_no} (${data.status}) answered`);
      showPayment(data);
      follow();
      return;
    }
    if (answer.status === 202 && data.payment_no) {
      // Not stored under the key: the same key and token ask again and get the outcome.
      note(`payment ${data.payment_no} pending at the channel; the same key ${redact(key)} and token ask again`);
      say('The channel has not confirmed the trade yet. Click again to ask (same attempt, same key).');
      payButton.disabled = false;
      return;
    }
    const code = data.code || String(answer.status);
    if (code === 'in-progress') {
      // The key is in use, or another request holds the order: not stored under the key, so
      // the same key and token ask again and get the outcome.
      note(`in progress elsewhere; the same key ${redact(key)} and token ask again`, 'caught');
      say('Another request is working on this payment. Click again to ask (same attempt, same key).');
      payButton.disabled = false;
      return;
    }
    if (code === 'order-already-paid') {
      note('constraint layer: the order is already paid', 'caught');
      follow();
      return;
    }
    if (code === 'duplicate-submission' || code.startsWith('idempotency-token')) {
      note(`token layer: ${code}`, 'caught');
    } else {
      note(`refused: ${code}`, 'caught');
    }
    forgetAttempt();
    await retryable(data.detail || `Refused (${answer.status}).`);
  }

  async function retryable(message) {
    say(message);
    if (await newToken()) {
      payButton.disabled = false;
      setChannelsDisabled(false);
    }
  }

  function showPayment(payment) {
    $('qr-card').hidden = false;
    $('payment-no').textContent = payment.payment_no;
    $('payment-status').textContent = payment.status;
    if (payment.pay_url) {
      $('qr').src = `/demo/qr?text=${encodeURIComponent(payment.pay_url)}`;
      $('pay-url').href = payment.pay_url;
      $('pay-url').textContent = payment.pay_url;
    }
    const scan = $('scan');
    scan.hidden = !simulator || payment.status !== 'PENDING';
    scan.dataset.paymentNo = payment.payment_no;
    say('Scan the code with the app, then wait here.');
  }

  $('scan').addEventListener('click', async () => {
    const scan = $('scan');
    scan.disabled = true;
    try {
      const answer = await api(
        'POST',
        `/demo/payments/${encodeURIComponent(scan.dataset.paymentNo)}/pay`,
      );
      if (answer.status === 202) {
        note('simulator: the buyer paid; the channel will notify the service');
        say('Paid at the channel; waiting for its notification…');
      } else {
        note(`simulator: ${(answer.data && answer.data.code) || answer.status}`, 'caught');
        scan.disabled = false;
      }
    } catch (_) {
      scan.disabled = false;
    }
  });

  // Follows the order until PAID, then its entitlement until granted.
  async function follow() {
    if (following) return;
    following = true;
    for (let round = 0; round < POLL_MAX; round += 1) {
      let order = null;
      try {
        const answer = await api('GET', `/v1/orders/${encodeURIComponent(orderId)}`);
        order = answer.status === 200 ? answer.data : null;
      } catch (_) {
        order = null;
      }
      if (order) {
        const pending = (order.payments || []).find((p) => p.status === 'PENDING');
        if (pending) $('payment-status').textContent = pending.status;
        if (order.status === 'PAID') {
          paid(order);
          return;
        }
      }
      await sleep(POLL_MS);
    }
    say('Still not paid; reload the page to follow again.');
  }

  async function paid(order) {
    payButton.disabled = true;
    setChannelsDisabled(true);
    $('scan').hidden = true;
    $('paid-card').hidden = false;
    $('paid-order').textContent = order.order_id;
    $('order-status').textContent = order.status;
    const paidPayment = (order.payments || []).find((p) => p.status === 'PAID');
    if (paidPayment) $('payment-status').textContent = 'PAID';
    say('Paid. Thank you!');
    note(`order ${order.order_id} is PAID`);
    for (let round = 0; round < POLL_MAX; round += 1) {
      try {
        const answer = await api('GET', `/v1/entitlements?user_id=${encodeURIComponent(userId)}&order_id=${encodeURIComponent(order.order_id)}`);
        const grants = ((answer.data && answer.data.grants) || []).filter(
          (grant) => grant.order_id === order.order_id,
        );
        if (grants.length > 0) {
          const list = $('entitlements');
          list.replaceChildren();
          for (const grant of grants) {
            const item = document.createElement('li');
            item.className = 'entitlement';
            item.textContent = `${grant.sku} × ${grant.quantity} (grant ${grant.grant_no})`;
            list.append(item);
          }
          $('entitlement-wait').hidden = true;
          note(`entitlement granted once: ${grants.map((g) => g.grant_no).join(', ')}`);
          return;
        }
      } catch (_) {
        // asked again below
      }
      await sleep(POLL_MS);
    }
  }

  async function start() {
    if (!(await ensureOrder())) return;
    if (following) return;
    if (await newToken()) {
      payButton.disabled = false;
      say('Ready.');
    }
  }

  start();
})();
