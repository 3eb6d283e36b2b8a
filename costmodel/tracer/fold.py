"""Fold repeated layers: structurally identical layers become one block with a count.

A layer is the set of traced ops whose module path has the same outermost numbered component
(``model.layers.3``, ``transformer.h.0``: container and index, read off ``nn_module_stack``). Each layer
gets a signature: its ops with local references renamed (ops inside by position, parameters by their path
inside the layer, tensors from outside by order of first use, axis ids by order of appearance), so two
layers with the same code and the same sizes compare equal whatever their node names. A container's
layers are then cut into runs of a repeated period (``AAAA``: one layer × 4; ``ABAB``: two layers × 2;
``AAAB``: three, then one).

A tensor from outside a run that every repetition reads (RoPE's cos and sin, the attention mask) is
*shared*; one that repetition i reads from repetition i−1 (the residual stream) is *carried*. Memory
analyses keep a shared tensor once, a carried one once per repetition (node attribute ``shared``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import AXIS_ATTRS, TInput


@dataclass
class Run:
    """Layers ``start .. start + period·reps`` of ``container``: ``period`` layers repeated ``reps`` times."""

    container: str
    block: str
    period: int
    reps: int
    layers: list[list]  # the items of the first period's layers (the representatives)
    prefixes: list[str]  # module path prefix of each representative layer


@dataclass
class Plan:
    """The order of emission: items outside layers, and runs; plus what folding implies."""

    segments: list  # TOp | TInput | Run
    rep_of: dict[str, str] = field(default_factory=dict)  # fx node of a folded layer → its representative's
    shared: set[str] = field(default_factory=set)  # fx nodes read, the same, by every repetition of a run


def layer_key(module: str) -> tuple[str, int, str] | None:
    """``("model.layers", 3, "self_attn.q_proj")`` for ``model.layers.3.self_attn.q_proj``; None outside."""
    parts = module.split(".") if module else []
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i]), int(part), ".".join(parts[i + 1 :])
    return None


def _signature(items: list, prefix: str, resolve) -> tuple[tuple, list[str]]:
    """A layer's structure with its names replaced, and its outside reads in order (ext0, ext1...)."""
    local = {it.node: i for i, it in enumerate(items)}
    ext: list[str] = []
    dims: dict[str, str] = {}

    def dim(d: str) -> str:
        return dims.setdefault(d, f"%{len(dims)}")

    def ref(source: str, weight: bool) -> str:
        if weight:
            return "param:" + (source[len(prefix) :] if source.startswith(prefix) else "/" + source)
        source = resolve(source)
        if source in local:
            return f"@{local[source]}"
        if source not in ext:
            ext.append(source)
        return f"ext{ext.index(source)}"

    rows = []
    for it in items:
        if isinstance(it, TInput):
            rows.append(("input", tuple(dim(d) for d in it.dims), tuple(it.sizes[d] for d in it.dims), it.dtype))
            continue
        operands = tuple((ref(o.source, o.weight), tuple(dim(d) for d in o.dims)) for o in it.operands)
        out = tuple(dim(d) for d in it.output)
        sizes = tuple((dim(d), s) for d, s in it.sizes.items())
        attrs = tuple(
            sorted(
                (k, tuple(dim(d) for d in v) if k in AXIS_ATTRS and isinstance(v, tuple) else v)
                for k, v in it.attrs.items()
            )
        )
        extra = tuple(p[len(prefix) :] if p.startswith(prefix) else "/" + p for p in it.extra_params)
        rows.append((it.kind, it.dtype, it.hint, operands, out, sizes, attrs, extra))
    return tuple(rows), ext


def _runs(sigs: list[tuple]) -> list[tuple[int, int, int]]:
    """Cut a sequence of signatures into (start, period, reps), preferring the largest coverage."""
    out, i, n = [], 0, len(sigs)
    while i < n:
        best = (1, 1)
        for p in range(1, (n - i) // 2 + 1):
            r = 1
            while i + (r + 1) * p <= n and sigs[i + r * p : i + (r + 1) * p] == sigs[i : i + p]:
                r += 1
            if r >= 2 and r * p > best[0] * best[1]:
                best = (p, r)
        out.append((i, *best))
        i += best[0] * best[1]
    return out


def _with_glue(items: list, where: dict, container: str, by_index: dict[int, list]) -> bool:
    """Give each layer the ops of the parent module that run between it and the next (a residual add written
    in the loop over the layers), the last layer as many as the others; False if the layers interleave
    with anything else."""
    indices = sorted(by_index)
    first = {i: items.index(by_index[i][0]) for i in indices}
    last = {i: max(items.index(it) for it in by_index[i]) for i in indices}
    if any(where.get(k) != (container, i) for i in indices for k in range(first[i], last[i] + 1)):
        return False  # a layer's ops are interleaved with others'
    glue = []
    for a, b in zip(indices, indices[1:]):
        between = range(last[a] + 1, first[b])
        if any(k in where for k in between):
            return False
        glue.append([items[k] for k in between])
    if len({len(g) for g in glue}) > 1:
        return False
    tail = range(last[indices[-1]] + 1, min(last[indices[-1]] + 1 + len(glue[0]), len(items)))
    if any(k in where for k in tail):
        return False
    glue.append([items[k] for k in tail])
    for i, g in zip(indices, glue):
        for it in g:
            where[items.index(it)] = (container, i)
        by_index[i].extend(g)
    return True


def plan(items: list, resolve, fold: bool = True) -> Plan:
    """The emission plan of ``items`` (in graph order): layers folded where ``fold`` and it is safe."""
    layers: dict[str, dict[int, list]] = {}
    where: dict[int, tuple[str, int]] = {}
    for k, it in enumerate(items):
        key = layer_key(it.module)
        if key is not None:
            layers.setdefault(key[0], {}).setdefault(key[1], []).append(it)
            where[k] = key[:2]
    result = Plan([])
    runs_at: dict[int, Run] = {}  # index of the first item of a run → the run
    skipped: set[int] = set()
    for container, by_index in layers.items():
        indices = sorted(by_index)
        if not fold or len(indices) < 2 or not _with_glue(items, where, container, by_index):
            continue  # emitted op by op, as traced
        sigs, exts = [], []
        for i in indices:
            s, e = _signature(by_index[i], f"{container}.{i}.", resolve)
            sigs.append(s)
            exts.append(e)
        block = container.split(".")[-1] or "layers"
        for n_run, (start, period, reps) in enumerate(_runs(sigs)):
            name = block if n_run == 0 else f"{block}_{n_run + 1}"
            reps_layers = [by_index[indices[start + j]] for j in range(period)]
            prefixes = [f"{container}.{indices[start + j]}." for j in range(period)]
            run = Run(container, name, period, reps, reps_layers, prefixes)
            first = next(k for k, it in enumerate(items) if it is reps_layers[0][0])
            runs_at[first] = run
            for r in range(reps):
                for j in range(period):
                    layer = by_index[indices[start + r * period + j]]
                    for it in layer:
                        skipped.add(id(it))
                    if r:
                        for it, rep in zip(layer, reps_layers[j]):
                            result.rep_of[it.node] = rep.node
            for j in range(period):
                reads = [exts[start + r * period + j] for r in range(reps)]
                for slot, source in enumerate(reads[0]):
                    if all(len(e) > slot and resolve(e[slot]) == resolve(source) for e in reads):
                        result.shared.add(resolve(source))
    for k, it in enumerate(items):
        if k in runs_at:
            result.segments.append(runs_at[k])
        if id(it) not in skipped:
            result.segments.append(it)
    return result
