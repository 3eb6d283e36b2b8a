"""Properties run over drawn sizes, each to its shrunk counterexample, and the :func:`check` that runs them all.

A property is a function of one drawn sizes returning the terms that differ there. :func:`run_property` runs it
under hypothesis (``max_examples=examples``, the given seed, no example database: the same seed draws the
same sizes) and, when it fails, keeps the last failing sizes hypothesis tried: hypothesis replays its
smallest failing example last, so that is the shrunk counterexample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..errors import CostModelError
from ..options import Options
from .invariants import INVARIANTS
from .numeric import numeric_differences
from .pytorch import PRECISION_OF, TERMS, Factory, torch_counts
from .results import Difference, Property, Report
from .strategies import free_names, hypothesis_strategies, sizes
from .subject import Subject, subject


class _FailedError(Exception):
    """A property failed at some sizes (caught here; hypothesis shrinks on it)."""


def run_property(
    name: str,
    strategy,
    check: Callable[[dict], list[Difference]],
    *,
    examples: int = 20,
    seed: int = 0,
) -> Property:
    """Run ``check`` at up to ``examples`` sizes drawn from ``strategy``; a failure is shrunk to the smallest
    failing sizes hypothesis finds (``Property.counterexample``, with its differing terms)."""
    hypothesis_strategies()
    import hypothesis  # deferred: hypothesis is optional (the verify extra); checked just above

    result = Property(name)
    failing: list = []

    @hypothesis.settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        print_blob=False,
        suppress_health_check=list(hypothesis.HealthCheck),
        phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink],
    )
    @hypothesis.seed(seed)
    @hypothesis.given(strategy)
    def prop(values):
        result.tried.append(dict(values))
        found = check(values)
        if found:
            failing.append((dict(values), found))
            raise _FailedError(name)

    try:
        try:
            prop()
        except Exception as exc:  # an ExceptionGroup: hypothesis found several distinct failures; bad input first
            group = getattr(exc, "exceptions", None)
            if not isinstance(exc, _FailedError) and group is not None:
                bad = next((e for e in group if isinstance(e, CostModelError)), None)
                if bad is not None:
                    raise bad from None
                if any(isinstance(e, _FailedError) for e in group):
                    raise _FailedError(name) from None
            raise
    except _FailedError:
        result.counterexample, result.differences = failing[-1]
    except hypothesis.errors.Unsatisfiable:
        raise CostModelError(f"check {name}: no valid sizes could be drawn for this model") from None
    return result


def _strategy(s: Subject, extra: tuple[str, ...] = (), ranges: Mapping | None = None):
    return sizes(s.graph, fixed=s.fixed, ranges=ranges, extra=extra)


def numeric_property(s: Subject, *, examples: int = 20, seed: int = 0, ranges=None, options=None) -> Property:
    """Every derived term equals the graph counted op by op at the drawn sizes."""
    return run_property(
        "matches numeric evaluation (op by op)",
        _strategy(s, ranges=ranges),
        lambda v: numeric_differences(s, v, options),
        examples=examples,
        seed=seed,
    )


def invariant_properties(s: Subject, *, examples: int = 20, seed: int = 0, ranges=None) -> list[Property]:
    """Each invariant of :data:`~costmodel.testing.invariants.INVARIANTS`, its own property (skipped where it
    does not apply)."""
    out = []
    for name, (fn, applies) in INVARIANTS.items():
        why = applies(s)
        if why is not None:
            out.append(Property(name, skipped=why))
            continue
        extra = ("C",) if "KV" in name or "B" in name else ()
        out.append(
            run_property(name, _strategy(s, extra, ranges), lambda v, fn=fn: fn(s, v), examples=examples, seed=seed)
        )
    return out


def torch_differences(
    s: Subject, factory: Factory, values: Mapping[str, int], terms: tuple[str, ...] = TERMS, counts=None
) -> list[Difference]:
    """The terms of ``terms`` where the model at ``values`` and the module ``factory`` makes there differ."""
    counts = counts if counts is not None else torch_counts(factory, values, terms)
    precision, dtype = PRECISION_OF.get(counts["dtype"], (None, None))
    options = Options(precision=precision) if precision else Options()
    derived = s.estimate(values, options, dtype)
    out = []
    for term in terms:
        if term == "memory_bytes.activations" and precision is None:
            continue  # no precision policy keeps a module's own dtype (fp16): not comparable
        if derived[term] != counts[term]:
            by = {"params.total": "params.by_module", "flops.matmul.forward": "flops.by_module"}.get(term)
            detail = _by_block(s, values, term, counts.get(by, {})) if by else ""
            off = counts.get("off", {}).get(term)
            if off:
                detail = f"{off:,} taken off torch's count (the report's conventions)" + (
                    f"; {detail}" if detail else ""
                )
            if counts.get("device", "meta") != "meta":
                detail = f"counted on {counts['device']} (the module reads its data)" + (
                    f"; {detail}" if detail else ""
                )
            out.append(Difference(term, derived[term], counts[term], "torch", detail))
    return out


def _by_block(s: Subject, values: Mapping[str, int], term: str, by_module: Mapping[str, int]) -> str:
    """The deepest blocks whose ``term`` differs, where costmodel's dotted op names and the module's names
    agree (``layers.attn.proj`` and ``layers.0.attn.proj``, the layers' indices summed over)."""
    from .numeric import derived_per_op  # deferred: only a failing comparison needs the attribution

    ours: dict[str, object] = {}
    for op, v in derived_per_op(s, values, term).items():
        parts = op.split(".")
        for i in range(1, len(parts) + 1):
            ours[".".join(parts[:i])] = ours.get(".".join(parts[:i]), 0) + v
    theirs: dict[str, int] = {}
    for name, v in by_module.items():
        key = ".".join(p for p in name.split(".") if not p.isdigit())
        if key:
            theirs[key] = theirs.get(key, 0) + v
    differ = {k for k in ours if k in theirs and ours[k] != theirs[k]}
    leaves = sorted(k for k in differ if not any(o.startswith(k + ".") for o in differ))
    if not leaves:
        return ""
    return "by block (costmodel vs torch): " + ", ".join(f"{k} {ours[k]} vs {theirs[k]}" for k in leaves[:4])


def torch_properties(
    s: Subject,
    against: object,
    *,
    examples: int = 20,
    seed: int = 0,
    terms: tuple[str, ...] = TERMS,
    ranges=None,
) -> list[Property]:
    """One property per term of ``terms``: the model equals the PyTorch module ``against`` makes at each
    drawn sizes. The module is counted once per sizes (the same seed draws the same sizes for each term)."""
    factory = against if isinstance(against, Factory) else Factory(against)
    unknown = [t for t in terms if t not in TERMS]
    if unknown:
        raise CostModelError(f"check: unknown term {unknown[0]!r}; expected some of {', '.join(TERMS)}")
    factory.check_names(set(free_names(s.graph, {})) | set(s.fixed))
    memo: dict[tuple, dict] = {}

    def counts(values):
        key = tuple(sorted(values.items()))
        if key not in memo:
            memo[key] = torch_counts(factory, values, terms)
        return memo[key]

    label = {
        "params.total": "params = numel",
        "flops.matmul.forward": "matmul FLOPs = FlopCounterMode (forward)",
        "flops.matmul.training": "matmul FLOPs = FlopCounterMode (forward + backward)",
        "memory_bytes.activations": "activations = saved_tensors_hooks bytes",
    }
    return [
        run_property(
            label[term],
            _strategy(s, ranges=ranges),
            lambda v, term=term: torch_differences(s, factory, v, (term,), counts(v)),
            examples=examples,
            seed=seed,
        )
        for term in terms
    ]


def check(
    model: object,
    *,
    against: object = None,
    examples: int = 20,
    seed: int = 0,
    settings: Mapping[str, object] | None = None,
    terms: tuple[str, ...] = TERMS,
    ranges: Mapping[str, tuple[int, int]] | None = None,
    via: str | None = None,
) -> Report:
    """Check ``model`` (anything the verbs take) at drawn sizes: its formulas against the graph counted op by
    op, its invariants, and with ``against`` (a factory function or ``file.py:factory``) against a PyTorch
    module built at the same sizes. ``via``: how a ``config.json`` is read (:data:`costmodel.options.VIA`). Returns a :class:`~costmodel.testing.results.Report` (``passed``,
    ``text()``, ``to_json()``); bad input (a missing file, a factory that raises) raises ``CostModelError``.
    """
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        raise CostModelError(f"check: examples must be a positive whole number, received {examples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise CostModelError(f"check: seed must be a whole number >= 0, received {seed!r}")
    unknown = [t for t in terms if t not in TERMS]
    if unknown or not terms:
        raise CostModelError(
            f"check: unknown term {unknown[0] if unknown else ''!r}; expected some of {', '.join(TERMS)}"
        )
    named = against
    if against == "transformers":  # a family against the transformers module of the same config (testing/hf.py)
        from .hf import TERMS as HF_TERMS  # deferred: only this comparison needs it
        from .hf import against as transformers_factory  # deferred: as above
        from .hf import config_path  # deferred: as above

        if not isinstance(model, str):
            raise CostModelError("check --against transformers: expected a config.json or a family name")
        model = config_path(model)
        s = subject(model, settings, via)
        _, against, pinned, even = transformers_factory(model, {str(x) for x in s.graph_symbols})
        s.fixed = {**pinned, **s.fixed}
        if even is not None:
            s.require(even, "a head's width is even (rotary embeddings rotate pairs)")
        terms = HF_TERMS if terms == TERMS else terms
    else:
        s = subject(model, settings, via)
    factory = against if isinstance(against, Factory) or against is None else Factory(against)  # bad: before draws
    if factory is not None:
        factory.check_names(set(free_names(s.graph, {})) | set(s.fixed))
    name = model if isinstance(model, str) else s.name
    report = Report(name, named if isinstance(named, str) or named is None else factory.name, examples, seed)
    report.conventions = list(factory.conventions) if factory is not None else []
    report.module = factory.name if factory is not None else None
    report.properties.append(numeric_property(s, examples=examples, seed=seed, ranges=ranges))
    report.properties += invariant_properties(s, examples=examples, seed=seed, ranges=ranges)
    if factory is not None:
        report.properties += torch_properties(s, factory, examples=examples, seed=seed, terms=terms, ranges=ranges)
    return report
