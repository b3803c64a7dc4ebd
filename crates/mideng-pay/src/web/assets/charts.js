// Small SVG charts for the console, drawn with DOM calls only (no markup from data).
'use strict';

window.MidengCharts = (function () {
  const NS = 'http://www.w3.org/2000/svg';
  const PALETTE = {
    token: '#7c3aed',
    key: '#2563eb',
    lock: '#0891b2',
    constraint: '#16a34a',
    cas: '#ca8a04',
    dedup: '#ea580c',
    reconciliation: '#db2777',
    signature: '#dc2626',
  };
  const FALLBACK = ['#475569', '#0f766e', '#9333ea', '#b45309'];

  function color(name, index) {
    return PALETTE[name] || FALLBACK[index % FALLBACK.length];
  }

  function el(name, attributes, text) {
    const node = document.createElementNS(NS, name);
    for (const [key, value] of Object.entries(attributes || {})) {
      node.setAttribute(key, String(value));
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Horizontal bars: entries is [[label, value], …].
  function bars(figure, entries) {
    const width = 240;
    const row = 24;
    const labelWidth = 84;
    const height = Math.max(row * entries.length, row) + 6;
    const max = Math.max(1, ...entries.map(([, value]) => value));
    const svg = el('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', role: 'img' });
    if (entries.length === 0) {
      svg.append(el('text', { x: 4, y: 18, class: 'muted' }, 'none yet'));
    }
    entries.forEach(([label, value], index) => {
      const y = index * row + 4;
      const length = Math.round(((width - labelWidth - 36) * value) / max);
      svg.append(el('text', { x: 0, y: y + 15, class: 'label' }, label));
      svg.append(
        el('rect', {
          x: labelWidth,
          y,
          width: Math.max(length, 1),
          height: row - 8,
          rx: 3,
          fill: color(label.toLowerCase(), index),
          'data-label': label,
          'data-value': value,
        }),
      );
      svg.append(el('text', { x: labelWidth + length + 6, y: y + 15, class: 'value' }, String(value)));
    });
    figure.replaceChildren(svg);
  }

  // Lines over time: buckets is [{start_ms, caught: {layer: n}}], one line per layer.
  function lines(figure, buckets, bucketMs, nowMs) {
    const width = 720;
    const height = 220;
    const pad = { left: 36, right: 110, top: 10, bottom: 24 };
    const slots = 36;
    const end = nowMs - (nowMs % bucketMs);
    const starts = [];
    for (let index = slots - 1; index >= 0; index -= 1) starts.push(end - index * bucketMs);
    const byStart = new Map(buckets.map((bucket) => [bucket.start_ms, bucket.caught]));
    const layers = [...new Set(buckets.flatMap((bucket) => Object.keys(bucket.caught)))].sort();
    let max = 1;
    for (const start of starts) {
      for (const layer of layers) max = Math.max(max, (byStart.get(start) || {})[layer] || 0);
    }
    const x = (index) => pad.left + ((width - pad.left - pad.right) * index) / (slots - 1);
    const y = (value) => height - pad.bottom - ((height - pad.top - pad.bottom) * value) / max;
    const svg = el('svg', { viewBox: `0 0 ${width} ${height}`, width: '100%', role: 'img' });
    svg.append(el('line', { x1: pad.left, y1: y(0), x2: width - pad.right, y2: y(0), class: 'axis' }));
    svg.append(el('text', { x: 0, y: y(max) + 4, class: 'value' }, String(max)));
    svg.append(el('text', { x: 0, y: y(0), class: 'value' }, '0'));
    svg.append(el('text', { x: pad.left, y: height - 4, class: 'value' }, `${(slots * bucketMs) / 60000} min ago`));
    svg.append(el('text', { x: width - pad.right - 24, y: height - 4, class: 'value' }, 'now'));
    layers.forEach((layer, index) => {
      const points = starts
        .map((start, slot) => `${x(slot).toFixed(1)},${y((byStart.get(start) || {})[layer] || 0).toFixed(1)}`)
        .join(' ');
      svg.append(
        el('polyline', { points, fill: 'none', stroke: color(layer, index), 'stroke-width': 2, 'data-layer': layer }),
      );
      svg.append(el('rect', { x: width - pad.right + 10, y: pad.top + index * 18, width: 10, height: 10, fill: color(layer, index) }));
      svg.append(el('text', { x: width - pad.right + 26, y: pad.top + index * 18 + 10, class: 'label' }, layer));
    });
    if (layers.length === 0) {
      svg.append(el('text', { x: pad.left + 10, y: pad.top + 20, class: 'muted' }, 'nothing caught yet'));
    }
    figure.replaceChildren(svg);
  }

  return { bars, lines, color };
})();
