"""The interactive HTML report: one self-contained file (no network) whose numbers follow its controls.

Every number on the page is an expression of :func:`~costmodel.sections.quantities.quantities` — the one
derivation behind ``estimate`` — written as JavaScript (:mod:`costmodel.formulas.javascript`) and evaluated in the
browser with exact BigInt arithmetic (``assets/exact.js``), so the page and ``costmodel estimate --json``
give the same numbers for the same B, T, devices and symbols. The page is also rendered here, at the
config's values, so it reads without JavaScript and the tests can compare it with the JSON without a
browser. Formulas are MathML (sympy's presentation printer; browsers render it natively); the charts are
SVG, drawn by ``assets/charts.js``.

The devices N become a symbol (``N_dev``) when the layout is one device that ``--devices`` spreads the time
over and the time is a formula in N (a given rate, ``--time-model roofline``, or inference); with a parallel layout
(dp·tp·pp·sp devices) the memory depends on the layout, and with the calibrated step each collective's network
tier depends on N: there N is fixed.
"""

from __future__ import annotations

import html
import inspect
import json
from collections.abc import Mapping, Sequence
from importlib import resources

import sympy
from sympy.printing.mathml import MathMLPresentationPrinter

from ..errors import CostModelError, closest
from ..families import graph_symbols
from ..formulas import javascript as jscode
from ..formulas.python import free_symbols
from ..formulas.quantities import Quantities
from ..formulas.shaped import shape
from ..graph.analysis import op_nodes
from ..options import Options
from ..sections.quantities import SECTIONS, quantities
from ..symbols import SYMBOLS, L, L_dec, L_dense, T, describe
from . import names, summary
from .mathml import mathml_lines as shaped_lines
from .mathml import mathml_safe

#: The devices a page's time is spread over, when they are a control.
N_DEV = sympy.Symbol("N_dev", positive=True, integer=True)
ASSETS = ("exact.js", "units.js", "charts.js", "page.js")
_MATHML = MathMLPresentationPrinter({"mul_symbol": "dot", "order": "lex"})


def asset(name: str) -> str:
    """The text of one of ``render/assets`` (shipped as package data)."""
    return resources.files("costmodel.render").joinpath("assets", name).read_text(encoding="utf-8")


def page_quantities(model, options: Options, devices: sympy.Expr | None) -> Quantities:
    """:func:`~costmodel.sections.quantities.quantities`, with the devices N as ``devices`` where a section
    takes them (the time section: the page's devices control)."""
    q = Quantities()
    for section in SECTIONS:
        takes = devices is not None and "devices" in inspect.signature(section).parameters
        q.update(section(model, options, q, devices=devices) if takes else section(model, options, q))
    return q


def mathml_lines(expr: sympy.Expr, per_line: int = 4) -> list[str]:
    """MathML of a sum broken into lines of ``per_line`` terms (a line after the first starts with its sign)."""
    expr = sympy.expand(expr)
    parts = expr.as_ordered_terms(order="lex") if isinstance(expr, sympy.Add) else [expr]
    lines = []
    for i in range(0, len(parts), per_line):
        chunk = parts[i : i + per_line]
        body = _MATHML.doprint(mathml_safe(sympy.Add(*chunk, evaluate=False)))
        sign = "<mo>+</mo>" if i and not chunk[0].could_extract_minus_sign() else ""
        lines.append(sign + body)
    return lines


def script_json(data: object) -> str:
    """JSON to sit inside ``<script>``: ``<``, ``>`` and ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026``, so no
    text (``</script>``, ``<!--<script>``) can end or swallow the script it is in."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _symbol_mathml(s: sympy.Symbol) -> str:
    return f"<math>{_MATHML.doprint(mathml_safe(s))}</math>"


def _formulas(shown: Mapping[str, sympy.Expr]) -> str:
    """Each formula shaped as papers write them (collected by the layer count, FLOPs in the Megatron form)."""
    out = []
    for key, expr in shown.items():
        counts = [c for c in (L, L_dec, L_dense) if expr.has(c)]
        lines = shaped_lines(shape(expr, counts=counts, leading=key.startswith("flops.")))
        rows = "".join(f'<div class="line"><math display="block">{line}</math></div>' for line in lines)
        out.append(
            f'<div class="formula"><div class="fname">{html.escape(names.label(key))} '
            f"<code>{html.escape(key)}</code> =</div>{rows}</div>"
        )
    return "".join(out)


def _axis_checks(G) -> tuple[list[tuple[sympy.Expr, sympy.Expr]], list[sympy.Basic]]:
    """What ``analysis.check_values`` checks, as vectorisable expressions.

    (numerator, denominator) of axis sizes that are fractions of symbols (d/h must
    divide), and relations that must hold: every size and block count positive
    (``L - L_dense``), routes within the experts, the graph's declared constraints.
    """
    fractions, relations, seen = [], [], set()
    for _, data in op_nodes(G):
        op = data["op"]
        for _, size in op.sizes:
            num, den = sympy.fraction(sympy.together(size))
            if den != 1 and (num, den) not in seen:
                seen.add((num, den))
                fractions.append((num, den))
            if size.free_symbols and size.is_positive is not True:
                relations.append(size > 0)
        if op.attr("experts") and op.attr("route"):
            relations.append(op.size[str(op.attr("route"))] <= op.size[str(op.attr("experts"))])
    for count in G.graph.get("blocks", {}).values():
        if count.free_symbols and count.is_positive is not True:
            relations.append(count > 0)
    relations += [condition for condition, _ in G.graph.get("constraints", ())]
    return fractions, [r for r in relations if r not in (sympy.true, True)]


class _Page:
    """What one page needs: the outputs of its one JavaScript function, in order, and their meaning."""

    def __init__(self, model, options: Options, controls: Sequence[str], estimate) -> None:
        from ..sections.run import resolve  # deferred: the run's module imports this one's neighbours

        self.model, self.options = model, options
        self.values = resolve(model, options)
        # N is a control where the time is a formula in it: a given rate or the roofline bound; the calibrated
        # step places each collective on a network tier by N, so it is worked out at the N given
        rate = any(getattr(options, k) is not None for k in ("achieved_flops", "mfu", "tokens_per_s"))
        symbolic = (
            options.hardware is not None
            and options.layout.devices == 1
            and (rate or options.time_model == "roofline" or options.inference)
        )
        # without the devices control, the estimate's own quantities (derived once, shown=False: a liveness peak
        # over its maximal points, the same value and label in a shorter formula)
        self.q = page_quantities(model, options, N_DEV) if symbolic else quantities(model, options, shown=False)
        self.estimate = estimate
        self.flat = self.estimate.flat
        self.rows = summary.op_rows(model, options)
        self.extra = summary.part_exprs(self.q, self.rows) if options.hardware is not None else {}
        used = {str(s): s for s in graph_symbols(model.graph)} | {str(s): s for s in self.values}
        chosen = ["B", *(["T"] if T in graph_symbols(model.graph) else [])]
        for name in controls:
            if name not in used:
                raise CostModelError(
                    f"--control {name}: not a symbol of model {model.name!r}{closest(name, used)}; "
                    f"expected one of {', '.join(sorted(used))}"
                )
            chosen.append(name)
        self.controls = list(dict.fromkeys(chosen)) + (["N_dev"] if symbolic else [])
        self.base = dict(self.values)
        if symbolic:
            self.base[N_DEV] = options.devices

    def outputs(self) -> tuple[list[sympy.Basic], dict[str, object]]:
        """Every expression the page evaluates, and the layout that says what each output is."""
        q = self.q
        exprs: list[sympy.Basic] = list(q.exprs.values())
        layout: dict[str, object] = {
            "keys": [
                {
                    "key": k,
                    "show": "float" if k in q.floats else "number" if k in q.numbers else "int",
                    "unit": names.unit(k),
                }
                for k in q.exprs
            ]
        }
        layout["choices"] = []
        for key, (cands, labels) in q.choices.items():
            exprs += list(cands)
            layout["choices"].append({"key": key, "labels": list(labels), "by_label": key in q.label_ties})
        fractions, relations = _axis_checks(self.model.graph)
        checks = [
            (sympy.Eq(sympy.Mod(n, d), 0, evaluate=False), f"an axis size {n}/{d} is not a whole number")
            for n, d in fractions
        ]
        checks += [(r, f"the model's sizes must satisfy {r}") for r in relations]
        checks += [(r, m if isinstance(m, str) else f"this configuration fails the check {r}") for r, m in q.checks]
        exprs += [r for r, _ in checks]
        layout["checks"] = [m for _, m in checks]
        timed = self.rows and self.rows[0].time_s is not None
        per = 6 if timed else 3
        for r in self.rows:
            exprs += [r.count, r.flops, r.bytes] + ([r.compute_s, r.memory_s, r.time_s] if timed else [])
        layout["ops"] = [{"name": r.name, "kind": r.kind, "count": str(r.count)} for r in self.rows]
        layout["op_outputs"] = per
        exprs += list(self.extra.values())
        layout["extra"] = list(self.extra)
        return [sympy.sympify(e) for e in exprs], layout

    def data(self, exprs: list[sympy.Basic], layout: dict[str, object]) -> tuple[dict[str, object], str]:
        free = free_symbols(exprs) | {s for s in self.base if str(s) in self.controls}
        symbols = tuple(sorted(free, key=str))
        missing = [str(s) for s in symbols if s not in self.base]
        if missing:
            raise CostModelError(f"html report: no value for {', '.join(missing)}")
        fn = jscode.source(exprs, symbols)
        symbol_rows = [
            {
                "name": str(s),
                "js": jscode.name(s),
                "value": str(self.base[s]),
                "control": str(s) in self.controls,
                "label": "devices the step's time is spread over"
                if s == N_DEV
                else describe(str(s))
                if str(s) in SYMBOLS
                else "a symbol of this model",
            }
            for s in symbols
        ]
        f = summary.facts(self.flat, self.options)
        live = set(self.q.exprs) | set(self.q.choices)
        static = {k: v for k, v in self.flat.items() if k not in live and v is not None}
        ints = {k: str(v) for k, v in static.items() if isinstance(v, int) and not isinstance(v, bool)}
        dev = None
        if self.options.hardware is not None:
            from ..devices.table import device  # the table is read when a page has a device

            d = device(self.options.hardware)
            dtype = self.flat.get("time.dtype", "bf16")
            dev = {
                "name": d.name,
                "peak": float(d.peak(dtype)),
                "bandwidth": float(d.memory_bandwidth),
                "capacity": str(int(d.memory_bytes)),
                "dtype": dtype,
            }
        data = {
            "title": f"costmodel report: {self.flat['model']}",
            "symbols": symbol_rows,
            "layout": layout,
            "facts": f,
            "static": {k: v for k, v in static.items() if k not in ints},
            "static_ints": ints,
            "device": dev,
            "memory_parts": [k for k in MEMORY_PARTS if k in self.q.exprs],
            "labels": {k: names.label(k) for k in [*self.q.exprs, *self.q.choices, *self.flat]},
        }
        return data, fn


MEMORY_PARTS = (
    "memory_bytes.params",
    "memory_bytes.grads",
    "memory_bytes.optimizer",
    "memory_bytes.kv_cache",
    "memory_bytes.state_cache",
    "memory_bytes.activations",
)


def _value_text(v: object) -> str:
    """The ``data-value`` of a number: exact digits of an int, the shortest round-trip text of a float."""
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v).lower()
    return repr(v) if isinstance(v, float) else str(v)


def _cell(key: str, v: object, unit: str | None = None) -> str:
    shown = names.shown(unit or names.unit(key), v)
    return (
        f'<td class="num" data-key="{html.escape(key)}" data-value="{html.escape(_value_text(v))}">'
        f"{html.escape(shown)}</td>"
    )


def render(model, options: Options, estimate, controls: Sequence[str] = ()) -> str:
    """The whole page (see the module notes) of ``estimate``, the :class:`~costmodel.render.results.Estimate` of
    ``model`` under ``options`` (the report verb makes it; nothing here calls a verb)."""
    from .sections import printable  # the document sections import this module's neighbours

    p = _Page(model, options, controls, estimate)
    exprs, layout = p.outputs()
    data, fn = p.data(exprs, layout)
    flat = p.flat
    parts = summary.time_parts(model, options, p.values, p.q, flat)
    rows = summary.summary(flat, data["facts"], parts)
    box = "".join(
        f'<tr><th>{html.escape(k)}</th><td data-summary="{html.escape(k)}">{html.escape(v)}</td></tr>' for k, v in rows
    )
    ctrl = "".join(
        f'<label class="control"><span>{html.escape(s["name"] if s["name"] != "N_dev" else "devices")}</span>'
        f'<input type="number" min="1" step="1" id="control-{html.escape(s["name"])}" data-symbol="{html.escape(s["name"])}" '
        f'value="{s["value"]}"><input type="range" min="0" max="24" step="1" '
        f'data-slider="{html.escape(s["name"])}" aria-label="{html.escape(s["name"])} (powers of two)">'
        f"<small>{html.escape(s['label'])}</small></label>"
        for s in sorted((s for s in data["symbols"] if s["control"]), key=lambda s: p.controls.index(s["name"]))
    )
    numbers = []
    for key in [*p.q.exprs, *p.q.choices]:
        v = flat.get(key)
        numbers.append(
            f"<tr><th>{html.escape(names.label(key))}</th><td><code>{html.escape(key)}</code></td>"
            + _cell(key, v)
            + f'<td class="exact" data-exact="{html.escape(key)}">'
            f"{html.escape(_value_text(v))}</td></tr>"
        )
    syms = "".join(
        f"<tr><td>{_symbol_mathml(sympy.Symbol(s['name']))}</td><td>{html.escape(s['label'])}</td>"
        + _cell("config." + s["name"], int(s["value"]), "count")
        + "</tr>"
        for s in data["symbols"]
        if s["name"] != "N_dev"
    )
    shown, left = printable(p.q.exprs)
    conv = "".join(
        f"<li><b>{html.escape(k.rpartition('.')[2])}</b>: {html.escape(str(v))}</li>"
        for k, v in flat.items()
        if k.startswith(("conventions.", "memory.conventions."))
    )
    source = f" Source: {html.escape(str(flat['source']))}." if "source" in flat else ""
    payload = script_json(data)
    scripts = "\n".join(asset(a) for a in ASSETS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(data["title"])}</title>
<style>{asset("page.css")}</style></head>
<body><main>
<h1>{html.escape(data["title"])}</h1>
<section id="controls" aria-label="controls"><h2>Change the configuration</h2>
<div class="controls">{ctrl}</div><p id="status" role="status"></p></section>
<section id="summary"><h2>Summary</h2><table class="summary"><tbody>{box}</tbody></table></section>
<section id="charts"><h2>Charts</h2><div class="charts">
<figure><svg id="chart-memory" role="img" aria-label="memory per device"></svg><figcaption>Memory per device
</figcaption></figure><figure><svg id="chart-time" role="img" aria-label="time breakdown"></svg><figcaption>Time
</figcaption></figure><figure class="wide"><svg id="chart-roofline" role="img" aria-label="roofline"></svg>
<figcaption>Roofline of a step</figcaption></figure></div></section>
<section id="derivation"><h2>Derivation</h2><p>Symbols of the formulas, and their values now:</p>
<div class="scroll"><table><thead><tr><th>symbol</th><th>meaning</th><th>value</th></tr></thead>
<tbody>{syms}</tbody></table></div>
<p>The formulas of one step (B sequences of T tokens), derived from the op graph; every number on this page
is computed from them{
        " (derived as a maximum, a choice or a rounding, in the JSON: " + ", ".join(left) + ")" if left else ""
    }.</p>
<div class="formulas">{_formulas(shown)}</div></section>
<section id="ops"><h2>Ops</h2><p id="ops-note"></p><div class="scroll"><table id="ops-table"></table></div>
</section>
<section id="numbers"><h2>Every number</h2><div class="scroll"><table><thead><tr><th>quantity</th><th>key</th>
<th>value</th><th>exact</th></tr></thead><tbody>{"".join(numbers)}</tbody></table></div></section>
<section id="conventions"><h2>Conventions</h2><ul>{conv}</ul><p>{html.escape(flat["model"])}
({html.escape(flat["family"])} family).{source} Integers are exact (BigInt in the page); times, rates and
shares are rounded once, as in <code>costmodel estimate --json</code>.</p></section>
</main>
<script type="application/json" id="costmodel-data">{payload}</script>
<script>
{scripts}
const FORMULAS = {fn};
Page.start(FORMULAS);
</script>
</body></html>
"""


def write(model, options: Options, path: str, controls: Sequence[str] = ()) -> None:
    """Write the page to ``path`` atomically."""
    from ..files import write_atomic  # the base layer's atomic writer

    write_atomic(path, render(model, options, controls), "the html report")


__all__ = ["render", "write", "page_quantities", "mathml_lines", "N_DEV"]
