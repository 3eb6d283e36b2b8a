"""Fit a device's efficiency curves from measured kernel times (``costmodel calibrate``).

The input is a small CSV, one measurement per row (header names; empty cells where a column does not apply)::

    kind,dtype,batch,m,n,k,bytes,group,tier,seconds
    gemm,bf16,1,4096,4096,4096,,,,1.75e-4        # C[m×n] = A[m×k]·B[k×n], batch of them
    memory,,,,,,1073741824,,,6.1e-4               # a copy or element-wise kernel moving this many bytes
    all_reduce,,,,,,268435456,8,scale_up,1.26e-3  # a collective over `bytes` per member, `group` members

and the fit is the device's table entry (``efficiency`` and ``network``, see
:mod:`costmodel.devices.efficiency`) on top of a built-in device's peaks and bandwidths, written as a hardware
file that ``--hardware`` takes. Least squares on the *relative* error (the log of predicted ÷ measured), so a
5 µs kernel weighs as much as a 5 ms one. Fitting uses numpy (floats); the curve is stored as decimals with
four significant digits and read back exactly.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence

from ..devices.network import FACTORS
from ..devices.table import device
from ..errors import CostModelError
from ..files import read_capped, write_atomic

KINDS = ("gemm", "memory", *FACTORS)
COLUMNS = ("kind", "dtype", "batch", "m", "n", "k", "bytes", "group", "tier", "seconds")
MAX_BYTES = 10 * 2**20


def read_rows(path: str) -> list[dict[str, object]]:
    """The measurements of a calibration CSV, validated (a bad row is an error naming its line)."""
    text = read_capped(path, MAX_BYTES, "calibration CSV").decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.DictReader(io.StringIO("\n".join(ln.split("#")[0] for ln in lines)))
    if reader.fieldnames is None or "kind" not in reader.fieldnames or "seconds" not in reader.fieldnames:
        raise CostModelError(
            f"calibration CSV {path!r}: expected a header with kind and seconds (columns: "
            f"{', '.join(COLUMNS)}), received {reader.fieldnames}"
        )
    unknown = [c for c in reader.fieldnames if c.strip() not in COLUMNS]
    if unknown:
        raise CostModelError(f"calibration CSV {path!r}: unknown column {unknown[0]!r}; expected {', '.join(COLUMNS)}")
    rows = []
    for i, raw in enumerate(reader, start=2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        where = f"calibration CSV {path!r}, row {i}"
        kind = row.get("kind", "")
        if kind not in KINDS:
            raise CostModelError(f"{where}: kind {kind!r}; expected one of {', '.join(KINDS)}")
        out: dict[str, object] = {"kind": kind, "dtype": row.get("dtype") or "bf16", "tier": row.get("tier") or ""}
        need = {"gemm": ("m", "n", "k"), "memory": ("bytes",)}.get(kind, ("bytes", "group"))
        for col in ("batch", "m", "n", "k", "bytes", "group", "seconds"):
            text_v = row.get(col, "")
            if not text_v:
                if col in need or col == "seconds":
                    raise CostModelError(f"{where}: {kind} needs {col}")
                continue
            try:
                if not text_v.isascii():  # float() reads Arabic-Indic and full-width digits
                    raise ValueError
                v = float(text_v)
            except ValueError:
                raise CostModelError(f"{where}: {col} = {text_v!r} is not a number") from None
            if not math.isfinite(v) or v <= 0:
                raise CostModelError(f"{where}: {col} = {text_v!r}; expected a positive number")
            low, high = MEASURED_RANGE["seconds" if col == "seconds" else "size"]
            if not low <= v <= high:
                raise CostModelError(f"{where}: {col} = {text_v!r} is out of range; expected {low:g} to {high:g}")
            out[col] = v
        out.setdefault("batch", 1.0)
        _check_rate(out, where)
        if kind not in ("gemm", "memory") and out["tier"] not in ("scale_up", "scale_out"):
            raise CostModelError(f"{where}: a collective needs tier scale_up or scale_out, received {out['tier']!r}")
        rows.append(out)
    if not rows:
        raise CostModelError(f"calibration CSV {path!r}: no measurements")
    return rows


#: What a measured kernel can be: sizes (elements, bytes, a group) and its time; a GEMM of 1e300³ or a kernel
#: of 1e-300 s fits the generic curve and labels it "fitted", or a file --hardware then refuses.
MEASURED_RANGE = {"size": (1.0, 1e15), "seconds": (1e-9, 1e5)}
#: The fastest rate a single device attains, with room: 10^18 FLOP/s, 10^15 bytes/s.
MAX_RATES = {"gemm": 1e18, "bytes": 1e15}


def _check_rate(row: dict, where: str) -> None:
    if row["kind"] == "gemm":
        rate, high, unit = (
            2 * row["batch"] * row["m"] * row["n"] * row["k"] / row["seconds"],
            MAX_RATES["gemm"],
            "FLOP/s",
        )
    else:
        rate, high, unit = row["bytes"] / row["seconds"], MAX_RATES["bytes"], "bytes/s"
    if rate > high:
        raise CostModelError(f"{where}: {rate:.3g} {unit} is faster than any device ({high:g}); expected a measurement")


def _lm(residuals, x0: Sequence[float], iterations: int = 200) -> list[float]:
    """Levenberg–Marquardt on ``residuals(x)`` (numpy), finite-difference Jacobian."""
    import numpy as np  # deferred: only fitting needs numpy

    x = np.asarray(x0, float)
    r = residuals(x)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iterations):
        J = np.empty((r.size, x.size))
        for j in range(x.size):
            step = np.zeros_like(x)
            step[j] = 1e-6 * max(1.0, abs(x[j]))
            J[:, j] = (residuals(x + step) - r) / step[j]
        A, g = J.T @ J, J.T @ r
        improved = False
        for _ in range(20):
            dx = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            r_new = residuals(x + dx)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                x, r, lam, improved = x + dx, r_new, lam / 3, True
                break
            lam *= 4
        if not improved or abs(cost - c_new) < 1e-12 * max(cost, 1e-30):
            cost = min(cost, c_new)
            break
        cost = c_new
    return list(x)


def _share(x):
    """A number in (0, 1) from any real (the logistic): how an efficiency is fitted unconstrained."""
    import numpy as np  # deferred: only fitting needs numpy

    return 1 / (1 + np.exp(-x))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def fit_gemm(rows: Iterable[Mapping], peak: float, bandwidth: float, size: int = 2) -> dict[str, float]:
    """(efficiency, m0, n0, k0, overhead_s, memory) of the GEMM model fitted to GEMM rows of one dtype."""
    import numpy as np  # deferred: only fitting needs numpy

    rows = list(rows)
    if len(rows) < 6:
        raise CostModelError(f"calibrate: {len(rows)} GEMM measurements; expected at least 6 (several shapes)")
    b, m, n, k, t = (np.array([float(r[c]) for r in rows]) for c in ("batch", "m", "n", "k", "seconds"))
    A, B, C = b * m * k, b * k * n, b * m * n
    F, moved = 2 * b * m * n * k, size * (A + B + C)

    def unpack(x):  # efficiencies through a logistic (in (0, 1)), sizes and the overhead through exp (> 0)
        return _share(x[0]), *np.exp(x[1:5]), _share(x[5])

    def predict(x):
        eta, m0, n0, k0, t0, etaw = unpack(x)
        compute = (F + 2 * (m0 * B + n0 * A + k0 * C)) / (peak * eta)
        return np.maximum(compute, moved / (bandwidth * etaw)) + t0

    x = _lm(lambda x: np.log(predict(x) / t), [_logit(0.8), *np.log([32, 32, 64, 5e-6]), _logit(0.85)])
    eta, m0, n0, k0, t0, etaw = (float(v) for v in unpack(x))
    return {"efficiency": eta, "m0": m0, "n0": n0, "k0": k0, "overhead_s": t0, "memory": etaw}


def fit_memory(rows: Iterable[Mapping], bandwidth: float) -> dict[str, float]:
    """(memory efficiency, overhead_s) of ``t = bytes/(W·η) + t₀`` fitted to memory rows (relative error)."""
    import numpy as np  # deferred: only fitting needs numpy

    rows = list(rows)
    S, t = (np.array([float(r[c]) for r in rows]) for c in ("bytes", "seconds"))
    x = _lm(lambda x: np.log((S / (bandwidth * _share(x[0])) + np.exp(x[1])) / t), [_logit(0.85), math.log(5e-6)])
    return {"memory": float(_share(x[0])), "overhead_s": math.exp(x[1])}


def fit_tier(rows: Iterable[Mapping], bandwidth: float) -> dict[str, float]:
    """(efficiency, latency_s) of one tier: ``t = latency + factor(n)·S/(W·η)`` (relative error)."""
    import numpy as np  # deferred: only fitting needs numpy

    rows = list(rows)
    S = np.array([float(r["bytes"]) * float(FACTORS[r["kind"]](r["group"])) for r in rows])
    t = np.array([float(r["seconds"]) for r in rows])
    x = _lm(lambda x: np.log((S / (bandwidth * _share(x[0])) + np.exp(x[1])) / t), [_logit(0.8), math.log(1e-5)])
    return {"efficiency": float(_share(x[0])), "latency_s": math.exp(x[1])}


def decimal(x: float) -> str:
    """Four significant digits as exact decimal text (``"0.8751"``, ``"5.716e-06"``)."""
    return f"{float(f'{x:.4g}'):.4g}"


def calibrate(rows: Sequence[Mapping], dev, *, name: str | None = None, source: str = "") -> dict[str, object]:
    """A hardware-file entry for ``dev`` (a :class:`~costmodel.devices.table.Device`) with the curves the
    measurements ``rows`` give: GEMM per dtype, memory, and each tier with collective rows."""
    entry: dict[str, object] = {
        "about": f"{dev.about}, calibrated" + (f" ({source})" if source else ""),
        "peak_flops": {k: str(v) for k, v in dev.peak_flops.items()},
        "memory_bytes": str(dev.memory_bytes),
        "memory_bandwidth": str(dev.memory_bandwidth),
        "scale_up_bandwidth": None if dev.scale_up_bandwidth is None else str(dev.scale_up_bandwidth),
        "scale_out_bandwidth": None if dev.scale_out_bandwidth is None else str(dev.scale_out_bandwidth),
        "sources": {**dict(dev.sources), "efficiency": f"costmodel calibrate{': ' + source if source else ''}"},
    }
    bw = float(dev.memory_bandwidth)
    eff: dict[str, object] = {"source": f"fitted by costmodel calibrate{': ' + source if source else ''}"}
    gemm: dict[str, dict[str, str]] = {}
    memory = None
    for dtype in sorted({str(r["dtype"]) for r in rows if r["kind"] == "gemm"}):
        fit = fit_gemm(
            [r for r in rows if r["kind"] == "gemm" and r["dtype"] == dtype],
            float(dev.peak(dtype)),
            bw,
            1 if dtype == "fp8" else 2,
        )
        gemm[dtype] = {k: decimal(fit[k]) for k in ("efficiency", "m0", "n0", "k0", "overhead_s")}
        if memory is None or dtype in ("bf16", "fp16"):
            memory = {"memory": decimal(fit["memory"]), "overhead_s": decimal(fit["overhead_s"])}
    if gemm:
        eff["gemm"] = gemm
    mem_rows = [r for r in rows if r["kind"] == "memory"]
    if mem_rows:
        fit = fit_memory(mem_rows, bw)
        memory = {k: decimal(v) for k, v in fit.items()}
    if memory:
        eff.update(memory)
    # what the kernels cannot measure is kept from the base device: the share of kernel rates a training step
    # sustains, fused attention's rate, and the tiers no collective row measured
    base = dev.attained
    eff.setdefault("attention", decimal(float(base.attention)))
    eff["sustained"] = decimal(float(base.sustained))
    stacks = {  # the software stacks' factors: shares of whatever the kernels reach, as the default is
        n: {"sustained": decimal(float(st.sustained)), "source": st.source, "fitted_on": list(st.fitted_on)}
        for n, st in base.stacks.items()
    }
    if stacks:
        eff["stacks"] = stacks
    entry["efficiency"] = eff
    network: dict[str, object] = {"node_size": base.node_size}
    for tier in ("scale_up", "scale_out"):
        tier_rows = [r for r in rows if r["kind"] in FACTORS and r["tier"] == tier]
        if tier_rows:
            fit = fit_tier(tier_rows, float(dev.link(tier)))
            network[tier] = {k: decimal(v) for k, v in fit.items()}
        else:
            kept = getattr(base, tier)
            network[tier] = {"efficiency": decimal(float(kept.efficiency)), "latency_s": decimal(float(kept.latency_s))}
    if network:
        entry["network"] = network
    return {"devices": {name or f"{dev.name}-calibrated": entry}}


def calibrate_file(
    path: str, hardware: str = "h100-sxm", *, name: str | None = None, source: str = "", output: str | None = None
) -> dict[str, object]:
    """The hardware file (a table with one device) fitted to the measurements of the CSV at ``path``, on top
    of the built-in device ``hardware`` (its peaks and bandwidths); written as JSON to ``output`` when given,
    the file ``--hardware`` takes."""
    table = calibrate(read_rows(path), device(hardware), name=name, source=source or f"measurements in {path}")
    if output is not None:
        write_atomic(output, json.dumps(table, indent=2, allow_nan=False) + "\n", "hardware file")
    return table
