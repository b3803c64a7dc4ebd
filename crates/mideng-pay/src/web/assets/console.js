// The operator console: polls /console/overview with the console key and draws it.
'use strict';

(function () {
  const POLL_MS = 2000;
  const BUCKET_MS = 5000;
  const LAYERS = ['token', 'key', 'lock', 'constraint', 'cas', 'dedup', 'reconciliation', 'signature'];
  const $ = (id) => document.getElementById(id);
  const charts = window.MidengCharts;

  let timer = null;

  // The banner hands the key over in the fragment, which no server ever sees; it is moved to
  // the tab's sessionStorage and out of the address bar (and the history).
  function takeKeyFromFragment() {
    const fragment = new URLSearchParams(location.hash.slice(1));
    if (fragment.get('key')) {
      sessionStorage.setItem('mideng-console-key', fragment.get('key'));
      history.replaceState(null, '', location.pathname);
      return true;
    }
    return false;
  }
  takeKeyFromFragment();
  window.addEventListener('hashchange', () => {
    if (takeKeyFromFragment()) poll();
  });

  function key() {
    return sessionStorage.getItem('mideng-console-key');
  }

  function login(message) {
    $('board').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
  }

  $('login').addEventListener('submit', (event) => {
    event.preventDefault();
    sessionStorage.setItem('mideng-console-key', $('key').value.trim());
    $('key').value = '';
    poll();
  });

  async function poll() {
    clearTimeout(timer);
    if (!key()) {
      login();
      return;
    }
    try {
      const response = await fetch('/console/overview', {
        headers: { Authorization: `Bearer ${key()}` },
        cache: 'no-store',
      });
      if (response.status === 401) {
        sessionStorage.removeItem('mideng-console-key');
        login('That key does not open the console.');
        return;
      }
      if (response.ok) {
        draw(await response.json());
        $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
      } else {
        $('updated').textContent = `the service answered ${response.status}`;
      }
    } catch (_) {
      $('updated').textContent = 'the service is unreachable';
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function entries(map) {
    return Object.entries(map || {}).sort(([a], [b]) => a.localeCompare(b));
  }

  function time(ms) {
    return new Date(ms).toLocaleTimeString();
  }

  function cell(row, text) {
    const td = document.createElement('td');
    td.textContent = text;
    row.append(td);
    return td;
  }

  function draw(view) {
    $('login').hidden = true;
    $('board').hidden = false;
    const journal = view.journal;

    const tiles = $('layers');
    tiles.replaceChildren();
    const known = [...new Set([...LAYERS, ...Object.keys(journal.totals)])];
    known.forEach((layer, index) => {
      const tile = document.createElement('div');
      tile.className = 'tile';
      tile.dataset.layer = layer;
      tile.style.borderTopColor = charts.color(layer, index);
      const name = document.createElement('div');
      name.className = 'tile-name';
      name.textContent = layer;
      const count = document.createElement('div');
      count.className = 'tile-count';
      count.dataset.caught = String(journal.caught[layer] || 0);
      count.textContent = String(journal.caught[layer] || 0);
      const detail = document.createElement('div');
      detail.className = 'tile-detail';
      for (const [outcome, n] of entries(journal.totals[layer])) {
        const line = document.createElement('div');
        line.dataset.outcome = outcome;
        line.dataset.count = String(n);
        line.textContent = `${outcome}: ${n}`;
        detail.append(line);
      }
      tile.append(name, count, detail);
      tiles.append(tile);
    });

    charts.lines($('caught-over-time'), journal.series, BUCKET_MS, view.now_ms);
    charts.bars($('payments'), entries(view.store.payments));
    charts.bars($('refunds'), entries(view.store.refunds));
    charts.bars($('deliveries'), entries(view.store.webhook_deliveries));
    $('outbox-unsent').textContent = String(view.store.outbox_unsent);
    $('outbox-age').textContent =
      view.store.outbox_oldest_age_ms == null
        ? 'nothing waiting'
        : `oldest waiting ${(view.store.outbox_oldest_age_ms / 1000).toFixed(1)} s`;

    const rounds = $('rounds').tBodies[0];
    rounds.replaceChildren();
    for (const round of journal.rounds) {
      const row = document.createElement('tr');
      cell(row, time(round.at_ms));
      for (const name of ['examined', 'paid', 'closed', 'left', 'unknown', 'busy', 'refunds_settled', 'cases_refunded']) {
        cell(row, String(round.figures[name] || 0));
      }
      rounds.append(row);
    }

    const cases = $('cases').tBodies[0];
    cases.replaceChildren();
    for (const item of view.cases || []) {
      const row = document.createElement('tr');
      row.dataset.caseId = item.case_id;
      cell(row, item.bill_date);
      cell(row, item.channel);
      cell(row, item.kind);
      cell(row, item.reference);
      cell(row, item.ours == null ? '-' : String(item.ours));
      cell(row, item.billed == null ? '-' : String(item.billed));
      cell(row, item.detail);
      const action = cell(row, '');
      const button = document.createElement('button');
      button.type = 'button';
      button.textContent = 'resolve';
      button.addEventListener('click', () => resolveCase(item.case_id));
      action.append(button);
      cases.append(row);
    }

    const owed = $('refund-cases').tBodies[0];
    owed.replaceChildren();
    for (const item of view.refund_cases || []) {
      const row = document.createElement('tr');
      cell(row, item.created_at);
      cell(row, item.tenant_id);
      cell(row, item.payment_no);
      cell(row, item.kind);
      cell(row, String(item.amount));
      cell(row, item.status);
      cell(row, item.refund_no ? `${item.refund_no} ${item.refund_status || ''}` : '-');
      owed.append(row);
    }

    const parked = $('parked').tBodies[0];
    parked.replaceChildren();
    for (const item of view.parked_events || []) {
      const row = document.createElement('tr');
      row.dataset.messageId = item.message_id;
      cell(row, item.updated_at);
      cell(row, item.consumer);
      cell(row, item.message_id);
      cell(row, String(item.attempts));
      cell(row, item.last_error);
      const actions = cell(row, '');
      for (const action of ['replay', 'discard']) {
        const button = document.createElement('button');
        button.type = 'button';
        button.textContent = action;
        button.addEventListener('click', () => settleEvent(action, item.message_id));
        actions.append(button);
      }
      parked.append(row);
    }

    const recent = $('recent').tBodies[0];
    recent.replaceChildren();
    for (const decision of journal.recent) {
      const row = document.createElement('tr');
      if (decision.caught) row.className = 'caught';
      cell(row, time(decision.at_ms));
      cell(row, decision.layer);
      cell(row, decision.operation);
      cell(row, decision.outcome);
      cell(row, decision.subject);
      cell(row, decision.tenant);
      recent.append(row);
    }
  }

  async function resolveCase(caseId) {
    const reason = window.prompt(`Why is ${caseId} resolved? (kept on the case)`);
    if (!reason) return;
    const response = await fetch('/console/cases/resolve', {
      method: 'POST',
      headers: { Authorization: `Bearer ${key()}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ case_id: caseId, reason }),
    });
    $('case-error').textContent = response.ok ? '' : `not resolved: the service answered ${response.status}`;
    poll();
  }

  async function settleEvent(action, messageId) {
    const reason = window.prompt(`Why ${action} ${messageId}? (kept with the event)`);
    if (!reason) return;
    const response = await fetch(`/console/events/${action}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key()}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ message_id: messageId, reason }),
    });
    $('parked-error').textContent = response.ok ? '' : `not done: the service answered ${response.status}`;
    poll();
  }

  poll();
})();
