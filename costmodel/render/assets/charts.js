// The page's SVG charts: memory per device against capacity, the time breakdown, and the roofline of a step
// (ops grouped by kind, colour and legend; only the ops with the largest time shares labelled, and a label
// that would overlap one already placed is left out). Charts scale with the page (viewBox, width 100%).
"use strict";
const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                  "#9c755f", "#bab0ac"];

  function el(parent, name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }

  function reset(id, w, h) {
    const svg = document.getElementById(id);
    if (!svg) return null;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
    return svg;
  }

  const hide = (id, hidden) => { const f = document.getElementById(id)?.closest("figure"); if (f) f.hidden = hidden; };

  const overlaps = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;

  // rows of (label, value text, number) as horizontal bars, with a legend line under each bar
  function bars(id, rows, mark) {
    const w = 360, rowH = 32, h = rows.length * rowH + 28;
    const svg = reset(id, w, h);
    if (!svg) return;
    const max = Math.max(...rows.map((r) => r[2]), mark ? mark.value : 0) || 1;
    const x0 = 4, span = w - 8;
    rows.forEach(([label, shown, value], i) => {
      const y = 4 + i * rowH;
      el(svg, "rect", { x: x0, y: y + 15, width: Math.max(1, (span * value) / max), height: 12,
                        fill: COLORS[i % COLORS.length], class: "bar" });
      el(svg, "text", { x: x0, y: y + 11, class: "label" }, `${label}: ${shown}`);
    });
    if (mark) {
      const x = x0 + (span * mark.value) / max;
      el(svg, "line", { x1: x, x2: x, y1: 2, y2: h - 16, class: "mark" });
      // the label ends at the mark on the right half, starts there on the left (a capacity far below the
      // bars, as deepseek-v3's 80 GB beside 11,104 GB, would otherwise run off the chart's left edge)
      const right = x > w / 2;
      el(svg, "text", { x: right ? Math.min(x, w - 4) - 3 : x + 3, y: h - 4, class: "label mark-label",
                        "text-anchor": right ? "end" : "start" }, mark.label);
    }
  }

  function memory(data, v) {
    const rows = data.memory_parts.filter((k) => v[k] !== undefined && Number(v[k]) > 0)
      .map((k) => [data.labels[k] || k, Units.gb(v[k]), Number(v[k])]);
    const peak = v["memory_bytes.peak"] ?? v["memory_bytes.total"];
    if (peak !== undefined) rows.push([v["memory_bytes.peak"] !== undefined ? "peak" : "total", Units.gb(peak), Number(peak)]);
    const cap = data.device ? Number(data.device.capacity) : null;
    bars("chart-memory", rows, cap ? { value: cap, label: `capacity ${Units.gb(cap)}` } : null);
  }

  function time(parts) {
    hide("chart-time", !parts);
    if (!parts) return;
    const rows = Object.entries(parts).map(([k, s]) => [k, Units.duration(s), s]);
    bars("chart-time", rows, null);
  }

  function roofline(data, v, ops, top) {
    const timed = data.device && ops.length && ops[0].time_s !== undefined;
    hide("chart-roofline", !timed);
    if (!timed) return;
    const w = 640, h = 380, m = { l: 64, r: 150, t: 12, b: 44 };
    const svg = reset("chart-roofline", w, h);
    const pts = ops.filter((o) => R.cmp(o.bytes, 0n) > 0 && R.cmp(o.flops, 0n) > 0 && R.cmp(o.time_s, 0n) > 0)
      .map((o) => ({ name: o.name, kind: o.kind, x: R.toFloat(R.div(o.flops, o.bytes)),
                     y: R.toFloat(R.div(o.flops, o.time_s)), t: R.toFloat(o.time_s) }));
    const peak = data.device.peak, bw = data.device.bandwidth, ridge = peak / bw;
    const xs = pts.map((p) => p.x).concat([ridge]);
    const lo = Math.floor(Math.log10(Math.min(...xs))) - 0.2, hi = Math.ceil(Math.log10(Math.max(...xs))) + 0.2;
    const ylo = Math.floor(Math.log10(Math.min(...pts.map((p) => p.y), bw * 10 ** lo))), yhi = Math.log10(peak) + 0.3;
    const X = (x) => m.l + ((Math.log10(x) - lo) / (hi - lo)) * (w - m.l - m.r);
    const Y = (y) => h - m.b - ((Math.log10(y) - ylo) / (yhi - ylo)) * (h - m.t - m.b);
    el(svg, "rect", { x: m.l, y: m.t, width: w - m.l - m.r, height: h - m.t - m.b, class: "frame" });
    for (let e = Math.ceil(lo); e <= Math.floor(hi); e++) {
      el(svg, "text", { x: X(10 ** e), y: h - m.b + 14, "text-anchor": "middle", class: "tick" }, `1e${e}`);
    }
    for (let e = Math.ceil(ylo); e <= Math.floor(yhi); e += Math.max(1, Math.round((yhi - ylo) / 6))) {
      el(svg, "text", { x: m.l - 4, y: Y(10 ** e) + 4, "text-anchor": "end", class: "tick" }, `1e${e}`);
    }
    el(svg, "text", { x: (m.l + w - m.r) / 2, y: h - 8, "text-anchor": "middle", class: "label" }, "FLOPs per byte");
    el(svg, "text", { x: 12, y: (m.t + h - m.b) / 2, transform: `rotate(-90 12 ${(m.t + h - m.b) / 2})`,
                      "text-anchor": "middle", class: "label" }, "FLOP/s");
    const a = 10 ** lo, b = 10 ** hi;
    el(svg, "polyline", { points: `${X(a)},${Y(bw * a)} ${X(ridge)},${Y(peak)} ${X(b)},${Y(peak)}`, class: "roof" });
    const kinds = [...new Set(pts.map((p) => p.kind))];
    const color = (k) => COLORS[kinds.indexOf(k) % COLORS.length];
    for (const p of pts) {
      el(svg, "circle", { cx: X(p.x), cy: Y(p.y), r: 4, fill: color(p.kind), class: "op" })
        .appendChild(document.createElementNS(NS, "title")).textContent = `${p.name} (${p.kind})`;
    }
    kinds.forEach((k, i) => {
      const y = m.t + 10 + i * 16;
      el(svg, "circle", { cx: w - m.r + 14, cy: y - 4, r: 4, fill: color(k) });
      el(svg, "text", { x: w - m.r + 22, y, class: "legend" }, k.replaceAll("_", " "));
    });
    // label the ops with the largest time shares, at most 6, none overlapping another
    const placed = [];
    const named = new Set(top.filter((o) => o.count !== null).slice(0, pts.length > 12 ? 6 : pts.length).map((o) => o.name));
    for (const p of pts.filter((q) => named.has(q.name)).sort((q, r) => r.t - q.t)) {
      const t = el(svg, "text", { x: X(p.x) + 6, y: Y(p.y) - 6, class: "oplabel" }, p.name.split(".").pop());
      const box = t.getBBox();
      if (box.x + box.width > w - m.r || placed.some((q) => overlaps(q, box))) t.remove();
      else placed.push(box);
    }
  }

  function draw(data, v, ops, top, parts) {
    memory(data, v);
    time(parts);
    roofline(data, v, ops, top);
  }

  return { draw };
})();
