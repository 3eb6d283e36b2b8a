r"""The sections of a report, answer first: the summary, the derivation (symbols explained, formulas, the
training FLOPs term by term), memory, time, the ops that take the time, every number, the conventions.

Each builder sees a :class:`Context` and returns a :class:`~costmodel.verbs.report.Section` (or None when
it has nothing to say: no time without a device, no communication when nothing is sent). Rows carry human
names (:mod:`costmodel.render.names`) beside the keys, and numbers in the units every door uses
(:mod:`costmodel.units`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import sympy

from .. import units
from ..formulas.python import contains
from ..graph.analysis import breakdown
from ..options import Options
from ..symbols import SYMBOLS, describe
from . import latex as tex
from . import names, summary
from .blocks import Box, Cell, Math, Section, Table, Text


@dataclass(frozen=True)
class Context:
    """What a document section sees: the model, its values, the estimate, the formulas and the quantities."""

    model: object  # costmodel.models.Model
    values: Mapping[sympy.Symbol, int]
    estimate: Mapping[str, object]
    derived: Mapping[str, object]
    options: Options
    quantities: object = None  # costmodel.formulas.quantities.Quantities

    @property
    def flat(self) -> dict[str, object]:
        return self.estimate.flat

    def ops(self) -> tuple[list[dict[str, object]], dict]:
        """Each op's exact numbers and the time breakdown's extra parts (computed once)."""
        if "_ops" not in self.__dict__:
            rows = summary.op_rows(self.model, self.options)
            extra = summary.part_exprs(self.quantities, rows) if self.options.hardware is not None else {}
            object.__setattr__(self, "_ops", summary.evaluate_ops(rows, extra, self.values))
        return self.__dict__["_ops"]

    def parts(self) -> dict[str, float] | None:
        if self.options.hardware is None or self.options.inference or summary.given_parts(self.flat):
            return summary.parts_from(self.flat, None, {}, 1)  # the estimate's own parts: no op evaluated
        ops, extra = self.ops()
        return summary.parts_from(
            self.flat,
            [(o["compute_s"], o["memory_s"], o["time_s"]) for o in ops],
            extra,
            int(self.flat["time.devices"]),
        )


def summary_section(ctx: Context) -> Section:
    """The answer first: the summary box."""
    rows = summary.summary(ctx.flat, summary.facts(ctx.flat, ctx.options), ctx.parts())
    return Section("Summary", (Box(tuple(rows)),))


#: The quantities a document prints as formulas (by key prefix; shares excepted): the rest are numbers of a device.
PRINTED = ("params.", "flops.", "bytes.", "memory_bytes.")


def printable(exprs: Mapping[str, sympy.Expr]) -> tuple[dict[str, sympy.Expr], list[str]]:
    """The expressions a page can show (sums of terms), and the keys left out: maxima over many points
    (a liveness peak), piecewise choices and roundings, which the JSON carries in full."""
    shown, left = {}, []
    for k, v in exprs.items():
        if not k.startswith(PRINTED) or k.endswith("_share"):
            continue  # time and rates: numbers of a device, in the tables below
        if contains(v, (sympy.Function, sympy.Min, sympy.Max)):  # one walk of the distinct subtrees
            left.append(k)
        else:
            shown[k] = v
    return shown, left


def _shaped_equations(derived, shown: Mapping[str, sympy.Expr]) -> str:
    """The formulas as papers write them (:mod:`costmodel.render.paper`) where the derivation can shape them;
    else the expanded sums broken over lines."""
    if not hasattr(derived, "shaped"):
        return tex.broken_equations(shown)
    from .paper import display  # the shaping's printer, loaded when a document is drawn

    shaped = derived.shaped()
    return display({k: shaped[k] for k in shown})


def derivation_section(ctx: Context) -> Section:
    """The symbols, what each is, and its value in this run."""
    rows = tuple(
        (
            Cell(tex.latex(s), True),
            Cell(describe(str(s)) if str(s) in SYMBOLS else "a symbol of this model"),
            Cell(tex.number(v), True),
        )
        for s, v in sorted(ctx.values.items(), key=lambda kv: str(kv[0]))
    )
    shown, left = printable(ctx.derived["expressions"])
    blocks = [
        Text("The symbols of the formulas, and their values here:"),
        Table(("symbol", "meaning", "value"), rows, "lp{9cm}r"),
        Text(
            "The quantities of one step (B sequences of T tokens), derived from the op graph; every number "
            "of this report is one of them at the values above."
        ),
        Math(_shaped_equations(ctx.derived, shown)),
    ]
    peak = _peak_blocks(ctx)
    if peak:
        left = [k for k in left if k != "memory_bytes.peak"]
        blocks += peak
    if left:
        blocks.append(
            Text("Derived as a maximum, a choice or a rounding (exact in the JSON report): " + ", ".join(left) + ".")
        )
    return Section("Derivation", tuple(blocks))


def _peak_blocks(ctx: Context) -> list:
    """The liveness peak as ``derive`` prints it: the states plus the largest of its named points, each point's
    names and bytes at the values above, and the one that wins (none when the peak is not a max of points)."""
    from ..formulas.shaped import Peak, shape_peak  # the shaping, loaded when a document is drawn
    from ..memory.peak import maximal  # deferred: as the shaping
    from .paper import peak_rows, point_labels  # deferred: as the shaping

    expr = ctx.derived["expressions"].get("memory_bytes.peak")
    choice = ctx.quantities.choices.get("memory.peak_at") if ctx.quantities is not None else None
    if expr is None or choice is None:
        return []
    counts = {  # the block counts terms collect by (L, and a part of it such as ⌊L/4⌋)
        a
        for _, c in ctx.model.graph.nodes(data="count")
        if c is not None
        for a in sympy.sympify(c).atoms(sympy.Symbol, sympy.floor, sympy.ceiling)
    }
    counts = sorted(counts, key=sympy.default_sort_key)
    p = shape_peak(expr, choice[1], counts=counts, at=ctx.values, maximal=maximal)
    if not isinstance(p, Peak):
        return []
    values = {s: sympy.Integer(v) for s, v in ctx.values.items()}
    won, names, live = p.winner(values)
    states = int(p.states.value().xreplace(values))
    rows = tuple(
        (
            Cell(f"A_{{{i}}}", True),
            Cell(point_labels(labels)),
            Cell(tex.number(int(point.value().xreplace(values))), True),
        )
        for i, (labels, point) in enumerate(p.points, 1)
    )
    lhs = tex.key_latex("memory_bytes.peak")
    return [
        Text(
            "The peak (memory_bytes.peak) is the model states S plus the largest of the points of the step "
            "where the live bytes can peak, each named by the places it holds for:"
        ),
        Math(" \\\\\n".join(peak_rows(lhs, p, labels=False))),
        Table(("point", "live at", "bytes live here"), rows, "lp{10cm}r"),
        Text(
            f"At the values above, the peak is point {won + 1} ({point_labels(names)}): {live:,} bytes live over "
            f"{states:,} bytes of states, {live + states:,} bytes in all."
        ),
    ]


def term_section(ctx: Context) -> Section:
    """Training FLOPs per block, per iteration, with their shares."""
    rows = []
    for name, c in breakdown(ctx.model.graph, ctx.options.counting).items():
        count = ctx.model.graph.nodes[name]["count"]
        rows.append((name, count, sympy.expand(c.training.flops / count)))
    total = ctx.derived["expressions"]["flops.training"]
    return Section(
        "Training FLOPs, term by term",
        (
            Text(
                "What each op contributes to the training FLOPs of one step (forward + backward, "
                "times the number of runs per step)."
            ),
            Math(tex.derivation(rows, r"\mathrm{flops}_{\mathrm{training}}", total)),
        ),
    )


def _row(key: str, v: object, *extra: Cell) -> tuple[Cell, ...]:
    exact = Cell(tex.number(v), True) if isinstance(v, int) and not isinstance(v, bool) else Cell(_plain(v))
    return (Cell(names.label(key)), Cell(key, code=True), exact, Cell(names.show(key, v)), *extra)


def _plain(v: object) -> str:
    # a float (a time, a rate) is not exact anyway: 6 significant digits, not a 17-digit repr that wraps its cell
    return f"{v:.6g}" if isinstance(v, float) else "-" if v is None else str(v)


def memory_section(ctx: Context) -> Section:
    """Memory per device by part, with shares of the total."""
    flat = ctx.flat
    mem = {k: v for k, v in flat.items() if k.startswith("memory_bytes.") and isinstance(v, int)}
    total = flat.get("memory_bytes.total") or 0
    rows = tuple(
        _row(k, v, Cell(units.percent(v / total) if total and k != "memory_bytes.peak" else "")) for k, v in mem.items()
    )
    conv = [f"{k.rpartition('.')[2]}: {v}" for k, v in flat.items() if k.startswith("memory.conventions.")]
    blocks = [
        Text(
            f"Bytes per device of one step, micro-batch {flat.get('memory.layout.micro_batch', 1)} "
            "(sequences a device runs at once); GB = 1e9 bytes, GiB = 2^30 bytes; share of the total."
        ),
        Table(("component", "key", "bytes", "GB (GiB)", "share"), rows, "p{4.2cm}p{4.6cm}rrr"),
    ]
    if flat.get("memory.peak_at"):
        blocks.append(Text(f"The peak is reached at {flat['memory.peak_at']}."))
    blocks.append(Text("How each line is counted. " + "; ".join(conv) + "."))
    comm = {k: v for k, v in flat.items() if k.startswith("communication_bytes.") and isinstance(v, int)}
    if any(comm.values()):
        blocks.append(
            Table(
                ("communication", "key", "bytes", "GB (GiB)"),
                tuple(_row(k, v) for k, v in comm.items()),
                "p{4.2cm}p{4.6cm}rr",
            )
        )
    return Section("Memory per device", tuple(blocks))


TIME_KEYS = (
    "time.step_s",
    "time.tokens_per_s",
    "mfu",
    "hfu",
    "time.roofline_step_s",
    "time.compute_s",
    "time.comm_s",
    "time.pipeline_bubble",
    "time.training_s",
    "time.gpu_hours",
    "time.six_nd_training_s",
    "time.cost_usd",
    "time.ttft_s",
    "time.decode_step_s",
    "time.decode_tokens_per_s",
    "time.peak_flops",
    "time.model_flops_per_s",
    "time.achieved_flops",
)


def time_section(ctx: Context) -> Section | None:
    """The step's time and its breakdown (None without a device)."""
    flat = ctx.flat
    if "time.hardware" not in flat:
        return None
    keys = [k for k in TIME_KEYS if k in flat and not (k == "time.comm_s" and not flat[k])]
    keys += [k for k in flat if k.startswith("time.breakdown.") and isinstance(flat[k], (int, float))]
    where = f"{units.devices(flat['time.devices'])} × {flat['time.hardware']} ({flat['time.dtype']})"
    blocks = [
        Text(f"On {where}, {summary.BASIS.get(flat.get('time.basis'), 'at the roofline bound')}."),
        Table(("quantity", "key", "exact", "shown"), tuple(_row(k, flat[k]) for k in keys), "p{5cm}p{4.6cm}rr"),
    ]
    parts = ctx.parts()
    if parts:
        total = sum(parts.values())
        blocks.append(
            Table(
                ("part of the time", "seconds", "share"),
                tuple(
                    (Cell(k), Cell(units.duration(v)), Cell(units.percent(v / total if total else 0)))
                    for k, v in parts.items()
                ),
                "lrr",
            )
        )
    return Section("Time", tuple(blocks))


def ops_section(ctx: Context, k: int = 10) -> Section | None:
    """The ``k`` costliest ops (None for a graph with no ops)."""
    ops, _ = ctx.ops()
    if not ops:
        return None
    top = summary.top_ops(ops, k)
    timed = "time_s" in ops[0]
    n = int(ctx.flat.get("time.devices", 1))
    rows = tuple(
        (
            Cell(o["name"], code=True),
            Cell(str(o["kind"]).replace("_", " ")),
            Cell("" if o["count"] is None else units.grouped(int(o["count"]))),
            Cell(units.sci(float(o["flops"]))),
            Cell(units.sci(float(o["bytes"]))),
            Cell("-" if o["intensity"] is None else units.sig(o["intensity"], 3)),
            *((Cell(o["bound"]), Cell(units.duration(float(o["time_s"] / n)))) if timed else ()),
            Cell(units.percent(o["share"])),
        )
        for o in top
    )
    what = "time (the roofline bound of each op, forward and backward kernels)" if timed else "training FLOPs"
    head = ("op", "kind", "runs", "FLOPs", "bytes", "FLOP/B", *(("bound", "time") if timed else ()), "share")
    return Section(
        "Ops",
        (
            Text(
                f"The {units.plural(min(k, len(ops)), 'op')} with the largest share of the {what} of a step, all "
                "their runs together, then the rest summed."
            ),
            Table(head, rows, "p{4.4cm}lrrrr" + ("lr" if timed else "") + "r"),
        ),
    )


SECTION_KEYS = ("params", "flops", "bytes", "tokens", "memory_bytes", "memory", "communication_bytes", "mfu", "hfu")


def numbers_section(ctx: Context) -> Section:
    """Every number of the estimate, with its key."""
    flat = ctx.flat
    rows = []
    for k, v in flat.items():
        if k.split(".")[0] not in SECTION_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if k.startswith("communication_bytes.") and not flat.get("communication_bytes.total"):
            continue  # nothing is sent: no rows of zeros
        rows.append(_row(k, v))
    return Section(
        "Every number",
        (
            Text("Every number of the estimate (costmodel estimate --json), exact."),
            Table(("quantity", "key", "exact", "shown"), tuple(rows), "p{5cm}p{5cm}rr"),
        ),
    )


def _word(v: object) -> str:
    """A convention's value in words: yes / no / none, not Python's True / False / None."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "none" if v is None else str(v)


def conventions_section(ctx: Context) -> Section:
    """The model, its source, and the counting conventions the numbers follow."""
    flat = ctx.flat
    conv = "; ".join(
        f"{k.removeprefix('conventions.').replace('_', ' ')}: {_word(v)}"
        for k, v in flat.items()
        if k.startswith("conventions.")
    )
    text = f"{flat['model']} ({flat['family']} family)." + (f" Source: {flat['source']}." if "source" in flat else "")
    return Section("Conventions", (Text(text), Text(f"Counting: {conv}.")))


#: Builders of the document's sections, in order; each returns a Section, a list of them, or None.
DOCUMENT_SECTIONS: list[Callable[[Context], Section | list[Section] | None]] = [
    summary_section,
    derivation_section,
    memory_section,
    time_section,
    ops_section,
    term_section,
    numbers_section,
    conventions_section,
]
