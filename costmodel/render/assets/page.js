// The live page: reads its controls, evaluates FORMULAS (every number of the estimate, from
// costmodel/formulas/javascript.py) with the exact runtime R, and writes every number, the summary, the ops table and
// the charts. The summary and the ops table are costmodel/render/summary.py and sections.py's ops_section,
// function by function; the formatting is Units (units.js) with the units of costmodel/render/names.py.
"use strict";
const Page = (() => {
  const DATA = JSON.parse(document.getElementById("costmodel-data").textContent);
  const L = DATA.layout;
  const isInt = (x) => typeof x === "bigint";
  const BINDING = { "compute-bound ops": "compute", "memory-bound ops": "memory bandwidth",
                    "communication": "communication", "pipeline bubble": "pipeline bubble", compute: "compute",
                    "exposed communication": "communication", bubble: "pipeline bubble",
                    optimizer: "the optimizer step" };
  const BASIS = { calibrated: "on the calibrated step (each kernel at its attained rate, overlap and schedule)",
                  roofline: "at the roofline bound", mfu: "at the MFU given", achieved: "at the FLOP/s given",
                  measured: "at the measured throughput" };

  // names.shown
  function show(kind, v) {
    if (v === null || v === undefined) return "-";
    if (typeof v === "boolean") return v ? "True" : "False";
    if (!isInt(v) && typeof v !== "number") return String(v);
    const U = Units;
    switch (kind) {
      case "flops": return U.sci(v);
      case "bytes": return U.nbytes(v);
      case "seconds": return U.duration(v);
      case "share": return U.percent(v);
      case "rate": return U.rate(v);
      case "days": return U.amount(Number(v)) + " days";
      case "hours": return U.amount(Number(v)) + " h";
      case "usd": return "$" + U.amount(Number(v));
      default: return isInt(v) ? U.grouped(v) : U.sig(v, 4);
    }
  }

  const valueText = (v) => (v === null || v === undefined ? "" : typeof v === "boolean" ? String(v)
    : isInt(v) ? v.toString() : typeof v === "number" ? String(v) : String(v));

  function largest(values, labels, byLabel) {
    let best = 0;
    for (let j = 1; j < values.length; j++) {
      const c = R.cmp(values[j], values[best]);
      if (c > 0 || (c === 0 && byLabel && labels[j] > labels[best])) best = j;
    }
    return best;
  }

  // every number at the controls' values: {v: flat keys, ops: [...], extra: {...}} or {error}
  function evaluate(fn, state) {
    let out;
    try {
      out = fn(R, ...DATA.symbols.map((s) => state[s.name]));
    } catch (e) {
      return { error: "cannot evaluate: " + e.message };
    }
    const v = {};
    for (const [k, x] of Object.entries(DATA.static)) v[k] = x;
    for (const [k, x] of Object.entries(DATA.static_ints)) v[k] = BigInt(x); // exact: JSON numbers are doubles
    let i = 0;
    for (const k of L.keys) {
      const x = out[i++];
      if (k.show === "float") v[k.key] = R.toFloat(x);
      else if (k.show === "number") v[k.key] = R.isWhole(x) ? x : R.toFloat(x);
      else if (typeof x === "boolean") v[k.key] = x; // a relation (memory.fits): true or false
      else if (R.isWhole(x)) v[k.key] = x;
      else return { error: `${k.key} is not a whole number: ${R.text(x)}` };
    }
    for (const c of L.choices) {
      const got = out.slice(i, i + c.labels.length);
      i += c.labels.length;
      v[c.key] = c.labels[largest(got, c.labels, c.by_label)];
    }
    for (const message of L.checks) {
      if (!out[i++]) return { error: message };
    }
    const ops = L.ops.map((o) => {
      const row = { name: o.name, kind: o.kind, count: out[i], flops: out[i + 1], bytes: out[i + 2] };
      if (L.op_outputs === 6) Object.assign(row, { compute_s: out[i + 3], memory_s: out[i + 4], time_s: out[i + 5] });
      i += L.op_outputs;
      return row;
    });
    const extra = {};
    for (const k of L.extra) extra[k] = out[i++];
    for (const s of DATA.symbols) {
      if (s.name === "N_dev") v["time.devices"] = state[s.name];
      else v["config." + s.name] = state[s.name];
    }
    return { v, ops, extra };
  }

  // summary.py ------------------------------------------------------------------------------------
  const need = (v) => (v["memory_bytes.peak"] !== undefined && v["memory_bytes.peak"] !== null
    ? [v["memory_bytes.peak"], "peak"] : [v["memory_bytes.total"], "total"]);
  const capacity = (v, f) => (v["memory.capacity_bytes"] ? BigInt(v["memory.capacity_bytes"])
    : f.capacity === null ? null : BigInt(f.capacity));

  function fits(v, f) {
    if (v["memory.fits"] !== undefined && v["memory.fits"] !== null) return Boolean(v["memory.fits"]);
    const cap = capacity(v, f);
    return cap === null ? null : need(v)[0] <= cap;
  }

  function config(v, f) {
    const U = Units;
    const sizes = ["B", "T"].filter((s) => v["config." + s] !== undefined)
      .map((s) => `${s} = ${U.grouped(v["config." + s])}`).join(", ");
    const run = f.inference ? "inference" : `${f.precision}, ${f.optimizer}`;
    return `${f.model} (${f.family}), ${U.sci(v["params.total"])} parameters`
      + (v["params.active"] !== v["params.total"] ? ` (${U.sci(v["params.active"])} active)` : "")
      + `; ${U.plural(v["tokens.per_step"], "token")} per step (${sizes}); ${run}` + (f.layout ? `; ${f.layout}` : "");
  }

  function flops(v, f) {
    const U = Units;
    if (f.inference) return ["Prefill FLOPs", `${U.sci(v["flops.forward"])} for ${U.plural(v["tokens.per_step"], "token")}`];
    const share = `6ND = ${U.sci(v["flops.six_nd"])} is ${U.percent(v["flops.six_nd_share"])} of it`;
    if (v["flops.training_total"] !== undefined) {
      return ["Training FLOPs", `${U.sci(v["flops.training_total"])} for D = ${U.sci(v["tokens.total"])} tokens; ${share}`];
    }
    return ["Training FLOPs", `${U.sci(v["flops.training"])} per step; ${share}`];
  }

  function time(v, f) {
    const U = Units;
    if (f.hardware === null) return "no device chosen (give --hardware NAME, and --devices N)";
    const where = `${U.devices(v["time.devices"])} × ${f.hardware}`;
    if (f.inference) {
      return `first token in ${U.duration(v["time.ttft_s"])}, then ${U.duration(v["time.decode_step_s"])} `
        + `per decode step (${U.rate(v["time.decode_tokens_per_s"])} tokens/s) on ${where}`;
    }
    const rest = `${U.rate(v["time.tokens_per_s"])} tokens/s, MFU ${U.percent(v.mfu)}, ${BASIS[f.basis] ?? f.basis}`;
    if (v["time.training_s"] !== undefined) {
      return `${U.duration(v["time.training_s"])} on ${where}; step ${U.duration(v["time.step_s"])}, ${rest}`;
    }
    return `step ${U.duration(v["time.step_s"])} on ${where}; ${rest}`;
  }

  function memory(v, f) {
    const U = Units;
    const [n, which] = need(v);
    const cap = capacity(v, f);
    if (cap === null) return `${U.gb(n)} (${which}); no device to compare with`;
    const ratio = R.toFloat(R.div(BigInt(n), cap));
    return `${U.gb(n)} (${which}) of ${U.gb(cap)}: `
      + (fits(v, f) ? `fits, ${U.percent(ratio)} used` : `does not fit (${U.amount(ratio)}× the capacity)`);
  }

  function binding(v, f, parts) {
    if (f.hardware === null) return "needs a device (--hardware NAME)";
    if (fits(v, f) === false) return `memory capacity: the step does not fit in one ${f.hardware}'s memory`;
    if (f.inference) {
      const bound = v["time.decode_bound"];
      return (bound === "memory" ? "memory bandwidth" : "compute") + ` (a decode step is ${bound}-bound)`;
    }
    if (!parts || !Object.keys(parts).length) return "-";
    const names = Object.keys(parts);
    const total = names.reduce((a, k) => a + parts[k], 0);
    let top = names[0];
    for (const k of names) if (parts[k] > parts[top]) top = k;
    const share = total ? parts[top] / total : 0;
    return `${BINDING[top] ?? top} (${Units.percent(share)} of the time: ${top})`;
  }

  function summary(v, f, parts) {
    return [["Model", config(v, f)], flops(v, f), ["Time", time(v, f)], ["Memory per device", memory(v, f)],
            ["Binding resource", binding(v, f, parts)]];
  }

  // summary.parts_from
  function parts(v, ops, extra, f) {
    // the parts of the step: hidden (overlapped) communication takes no time of its own
    const given = Object.keys(v).filter((k) => k.startsWith("time.breakdown.") && !k.endsWith("hidden_communication_s")
      && (typeof v[k] === "number" || isInt(v[k])));
    if (given.length) {
      const out = {};
      for (const k of given) out[k.slice("time.breakdown.".length).replace(/_s$/, "").replaceAll("_", " ")] = Number(v[k]);
      return out;
    }
    if (f.hardware === null || f.inference || !ops.length || ops[0].time_s === undefined) return null;
    const n = BigInt(v["time.devices"]);
    let compute = 0n, mem = 0n;
    for (const o of ops) {
      if (R.cmp(o.compute_s, o.memory_s) >= 0) compute = R.add(compute, o.time_s);
      else mem = R.add(mem, o.time_s);
    }
    const out = { "compute-bound ops": R.toFloat(R.div(compute, n)), "memory-bound ops": R.toFloat(R.div(mem, n)) };
    for (const [k, x] of Object.entries(extra)) if (R.cmp(x, 0n) !== 0) out[k] = R.toFloat(x);
    return out;
  }

  // summary.top_ops
  function topOps(ops, k = 10) {
    const by = ops.length && ops[0].time_s !== undefined ? "time_s" : "flops";
    const ranked = ops.slice().sort((a, b) => R.cmp(b[by], a[by]));
    const total = ops.reduce((a, o) => R.add(a, o[by]), 0n);
    const out = ranked.slice(0, k).map((o) => Object.assign({}, o));
    const rest = ranked.slice(k);
    if (rest.length) {
      const summed = { name: `${rest.length} other ops`, kind: "", count: null };
      for (const fld of ["flops", "bytes", "compute_s", "memory_s", "time_s"]) {
        if (rest[0][fld] !== undefined) summed[fld] = rest.reduce((a, o) => R.add(a, o[fld]), 0n);
      }
      out.push(summed);
    }
    for (const o of out) {
      o.share = R.cmp(total, 0n) ? R.toFloat(R.div(o[by], total)) : 0;
      o.intensity = R.cmp(o.bytes, 0n) ? R.toFloat(R.div(o.flops, o.bytes)) : null;
      o.bound = o.compute_s !== undefined && o.count !== null ? (R.cmp(o.compute_s, o.memory_s) >= 0 ? "compute" : "memory") : "";
    }
    return out;
  }

  // the page ---------------------------------------------------------------------------------------
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));

  function opsTable(ops, v) {
    const U = Units;
    const top = topOps(ops);
    const timed = ops.length && ops[0].time_s !== undefined;
    const n = BigInt(v["time.devices"] ?? 1);
    const head = ["op", "kind", "runs", "FLOPs", "bytes", "FLOP/B", ...(timed ? ["bound", "time"] : []), "share"];
    const rows = top.map((o) => {
      const cells = [`<code>${esc(o.name)}</code>`, esc(String(o.kind).replaceAll("_", " ")),
        o.count === null ? "" : U.grouped(o.count), U.sci(R.toFloat(o.flops)), U.sci(R.toFloat(o.bytes)),
        o.intensity === null ? "-" : U.sig(o.intensity, 3),
        ...(timed ? [o.bound, U.duration(R.toFloat(R.div(o.time_s, n)))] : []), U.percent(o.share)];
      return "<tr>" + cells.map((c, j) => `<td${j >= 2 ? ' class="num"' : ""}>${c}</td>`).join("") + "</tr>";
    });
    document.getElementById("ops-table").innerHTML = "<thead><tr>" + head.map((h) => `<th>${h}</th>`).join("")
      + "</tr></thead><tbody>" + rows.join("") + "</tbody>";
    const what = timed ? "time (the roofline bound of each op, forward and backward kernels)" : "training FLOPs";
    document.getElementById("ops-note").textContent = `The ${Math.min(10, ops.length)} ops with the largest share `
      + `of the ${what} of a step, all their runs together, then the rest summed.`;
    return top;
  }

  function write(result) {
    const { v, ops, extra } = result;
    for (const td of document.querySelectorAll("td[data-key]")) {
      const key = td.dataset.key;
      if (!(key in v)) continue;
      const kind = key.startsWith("config.") ? "count" : (L.keys.find((k) => k.key === key) || {}).unit || "plain";
      td.textContent = show(kind, v[key]);
      td.dataset.value = valueText(v[key]);
    }
    for (const td of document.querySelectorAll("td[data-exact]")) {
      if (td.dataset.exact in v) td.textContent = valueText(v[td.dataset.exact]);
    }
    const p = parts(v, ops, extra, DATA.facts);
    for (const [what, text] of summary(v, DATA.facts, p)) {
      const td = document.querySelector(`td[data-summary="${what}"]`);
      if (td) td.textContent = text;
    }
    const top = ops.length ? opsTable(ops, v) : [];
    if (typeof Charts !== "undefined") Charts.draw(DATA, v, ops, top, p);
  }

  function start(fn) {
    const state = {};
    for (const s of DATA.symbols) state[s.name] = BigInt(s.value);
    const status = document.getElementById("status");
    const update = () => {
      const result = evaluate(fn, state);
      document.body.classList.toggle("invalid", Boolean(result.error));
      status.textContent = result.error ? result.error + " (the numbers shown are of the last valid values)" : "";
      if (!result.error) write(result);
      document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
    };
    for (const input of document.querySelectorAll("input[data-symbol]")) {
      const name = input.dataset.symbol;
      const slider = document.querySelector(`input[data-slider="${name}"]`);
      const sync = () => { if (slider) slider.value = String(Math.round(Math.log2(Number(state[name])))); };
      sync();
      input.addEventListener("change", () => {
        const text = input.value.trim();
        if (!/^[0-9]+$/.test(text) || BigInt(text) < 1n) {
          status.textContent = `${name}: expected a positive whole number, received ${JSON.stringify(text)}`;
          return;
        }
        state[name] = BigInt(text);
        sync();
        update();
      });
      if (slider) {
        slider.addEventListener("input", () => {
          state[name] = 2n ** BigInt(slider.value);
          input.value = state[name].toString();
          update();
        });
      }
    }
    update();
  }

  return { start, evaluate, summary, show, topOps, data: DATA };
})();
