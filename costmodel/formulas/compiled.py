"""Derived formulas that run without sympy: generated Python, the modes it runs in, and the disk cache.

A derivation (sympy) ends in :class:`Formulas`: the Python source of one function of the symbols' values
(written by :mod:`costmodel.formulas.python`) and how to read what it returns — which keys are exact whole
numbers, floats or labels, which relations must hold (with the message when one does not), which texts to
fill in. Evaluating it needs neither sympy nor networkx, so a cached estimate starts as fast as Python does.

The same source runs in three modes, chosen by the helpers it is given: :data:`EXACT` (Python ints and
``fractions.Fraction``: the numbers ``estimate`` gives), :func:`float_mode` (numpy float64 arrays: sweeps of
millions of configs) and :func:`object_mode` (numpy arrays of Python ints: exact sweeps and validity).

Formulas are cached on disk per (model, settings, options, costmodel's code) under ``COSTMODEL_CACHE_DIR``
(default ``$XDG_CACHE_HOME/costmodel`` when that is absolute, else ``~/.cache/costmodel``): written to a
temporary file and renamed, so concurrent writers never leave a partial file, and keyed by a hash of the code
that derived them, so a change to costmodel or to an architecture invalidates them. A cached file is code that
runs: it is read only from a folder this user alone can write, and only when its seal (an HMAC keyed by a
per-user secret in that folder) holds; anything else is derived again (see :func:`load`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from ..errors import CostModelError

FORMAT = 2  # the layout of a cached file; a change makes old files unreadable (they are rebuilt)
CACHE_CAP = 64 << 20  # bytes: a cached file over this (a sparse file, /dev/zero behind a link) is not read


# -- the modes ------------------------------------------------------------------------------------------


def _exact_div(a, b):
    q = Fraction(a) / Fraction(b)
    return q.numerator if q.denominator == 1 else q


def _exact_where(cond, a, b):
    return a if cond else b


def _exact_and(*conds):
    return all(conds)


#: Exact mode: Python ints and Fractions (whole results come back as ints).
EXACT = (Fraction, _exact_div, max, min, math.ceil, math.floor, _exact_where, _exact_and)

_MODES: dict[str, tuple] = {}


def float_mode() -> tuple:
    """Vectorised mode: numpy float64 arrays (imports numpy on first use)."""
    if "float" not in _MODES:
        import numpy as np  # deferred: only the vectorised modes need numpy; exact evaluation does not

        def vmax(*args):
            return np.maximum.reduce(np.broadcast_arrays(*args)) if len(args) > 1 else args[0]

        def vmin(*args):
            return np.minimum.reduce(np.broadcast_arrays(*args)) if len(args) > 1 else args[0]

        def vand(*conds):
            return np.logical_and.reduce(np.broadcast_arrays(*conds))

        _MODES["float"] = (lambda p, q: p / q, np.true_divide, vmax, vmin, np.ceil, np.floor, np.where, vand)
    return _MODES["float"]


def object_mode() -> tuple:
    """Vectorised exact mode: numpy object arrays of Python ints and Fractions, element by element."""
    if "object" not in _MODES:
        import numpy as np  # deferred: only the vectorised modes need numpy; exact evaluation does not

        def reduce(fn):
            ufunc = np.frompyfunc(fn, 2, 1)
            return lambda *args: ufunc.reduce(np.broadcast_arrays(*[np.asarray(a, dtype=object) for a in args]))

        def vand(*conds):
            return np.logical_and.reduce(np.broadcast_arrays(*conds))

        _MODES["object"] = (
            Fraction,
            np.frompyfunc(_exact_div, 2, 1),
            reduce(max),
            reduce(min),
            np.frompyfunc(math.ceil, 1, 1),
            np.frompyfunc(math.floor, 1, 1),
            np.where,
            vand,
        )
    return _MODES["object"]


def run_source(source: str, name: str = "f"):
    """The function ``name`` defined by generated ``source`` (costmodel's own output, never a user's text)."""
    namespace: dict[str, object] = {}
    exec(compile(source, "<costmodel formulas>", "exec"), namespace)
    return namespace[name]


# -- texts ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A text filled in once the numbers are known: ``template`` is a ``str.format`` string whose fields are
    symbol names (``{T}``), evaluated keys with their dots as ``__`` (``{memory__layout__stage}``) or the
    names of ``fields`` (expressions evaluated with the rest; an integer prints whole, a fraction as a float).
    """

    template: str
    fields: Mapping[str, object] = field(default_factory=dict)  # name → sympy expression (at derivation)

    def fill(self, values: Mapping[str, object], flat: Mapping[str, object], computed: Mapping[str, object]) -> str:
        names: dict[str, object] = {}
        for name in _fields_of(self.template):
            if name in computed:
                v = computed[name]
                names[name] = _Number(v) if isinstance(v, Fraction) else v
            elif name in values:
                names[name] = values[name]
            else:
                names[name] = flat.get(name.replace("__", "."))
        return self.template.format(**names)


def verbatim(text: str) -> str:
    """``text`` as a part of a :class:`Text` template that fills no field: its braces doubled.

    >>> verbatim("dims {b, t}: ")
    'dims {{b, t}}: '
    """
    return text.replace("{", "{{").replace("}", "}}")


@functools.lru_cache(maxsize=1024)
def _fields_of(template: str) -> tuple[str, ...]:
    return tuple({name for _, name, _, _ in string.Formatter().parse(template) if name})


class _Number(Fraction):
    """An exact fraction in a message: ``768/7`` as it is, or a float with a format spec (``{x:.3g}``)."""

    def __format__(self, spec: str) -> str:
        return format(float(self), spec) if spec else str(self)


def _show(v: object) -> object:
    return v.numerator if isinstance(v, Fraction) and v.denominator == 1 else v


# -- the artifact ---------------------------------------------------------------------------------------


_WHOLE, _FLOAT, _NUMBER = 0, 1, 2  # how a key is shown: an exact int, a float, an int where whole else a float


@dataclass
class Formulas:
    """Generated formulas and how to read them (see the module notes). Plain data: it round-trips through JSON.

    ``source`` defines ``f(h, *symbols)`` returning, in order: the ``keys``' values, the candidates of each
    choice, the relation of each check, then the fields of the texts (checks' and infos').
    """

    source: str
    symbols: list[str]
    keys: list[str]
    floats: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    choices: list[tuple[str, list[str], bool]] = field(default_factory=list)  # key, labels, ties by label
    checks: list[tuple[str, list[str]]] = field(default_factory=list)  # message template, its field names
    texts: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # info key → template, field names
    info: dict[str, object] = field(default_factory=dict)  # info keys with fixed values
    order: list[str] = field(default_factory=list)  # every key in the order it was added
    meta: dict[str, object] = field(default_factory=dict)  # what else a report of these formulas shows

    def __post_init__(self) -> None:
        self._fn = None
        self.__kinds: list[int] | None = None

    @property
    def _kinds(self) -> list[int]:
        """Per key: how its value is shown (a whole number, a float, or either), worked out once."""
        if self.__kinds is None:
            floats, numbers = set(self.floats), set(self.numbers)
            self.__kinds = [_FLOAT if k in floats else _NUMBER if k in numbers else _WHOLE for k in self.keys]
        return self.__kinds

    @property
    def fn(self):
        if self._fn is None:
            self._fn = run_source(self.source)
        return self._fn

    def with_meta(self, meta: Mapping[str, object]) -> Formulas:
        """A copy with its own ``meta`` (sharing the compiled function)."""
        copy = Formulas(**{**{k: getattr(self, k) for k in self.__dataclass_fields__}, "meta": dict(meta)})
        copy._fn = self._fn
        return copy

    def run(self, values: Mapping[str, int]) -> list[object]:
        """The raw outputs at ``values`` (symbol name → whole number), exact."""
        missing = sorted(s for s in self.symbols if s not in values)
        if missing:
            raise CostModelError(
                f"cannot evaluate: no value for {', '.join(missing)}; expected values for every "
                f"symbol, received {sorted(values)}"
            )
        try:
            return self.fn(EXACT, *(values[s] for s in self.symbols))
        except ZeroDivisionError:
            raise CostModelError("cannot evaluate: a division by zero at these values") from None

    def evaluate(self, values: Mapping[str, int], keys: Iterable[str] | None = None) -> dict[str, object]:
        """Every key at ``values``, after the checks (the first failing check raises its message)."""
        out = self.run(values)
        n_keys, n_choice = len(self.keys), sum(len(labels) for _, labels, _ in self.choices)
        n_checks = len(self.checks)
        nums, rest = out[:n_keys], out[n_keys:]
        cands, holds, fields_ = rest[:n_choice], rest[n_choice : n_choice + n_checks], rest[n_choice + n_checks :]
        text_fields = iter(fields_)
        check_fields = [[next(text_fields) for _ in names] for _, names in self.checks]
        for (template, names), ok, got in zip(self.checks, holds, check_fields):
            if not ok:
                computed = {n: _show(v) for n, v in zip(names, got)}
                raise CostModelError(Text(template).fill(values, {}, computed))
        flat: dict[str, object] = {}
        for key, how, v in zip(self.keys, self._kinds, nums):
            if type(v) is not int:
                v = _show(v)
            if how == _FLOAT:
                flat[key] = float(v)
            elif isinstance(v, int):
                flat[key] = v
            elif how == _NUMBER:
                flat[key] = float(v)
            else:
                raise CostModelError(f"{key} is not a whole number: {v}")
        i = 0
        for key, labels, by_label in self.choices:
            got = cands[i : i + len(labels)]
            i += len(labels)
            order = (lambda j: (got[j], labels[j])) if by_label else (lambda j: (got[j], -j))  # noqa: B023
            flat[key] = labels[max(range(len(labels)), key=order)]
        flat.update(self.info)
        for key, (template, names) in self.texts.items():
            computed = {n: _show(next(text_fields)) for n in names}
            flat[key] = Text(template).fill(values, flat, computed)
        if keys is not None:
            return {k: flat[k] for k in keys}
        return {k: flat[k] for k in self.order if k in flat}

    # -- the disk cache --------------------------------------------------------------------------------

    def to_json(self) -> str:
        data = {
            k: getattr(self, k)
            for k in (
                "source",
                "symbols",
                "keys",
                "floats",
                "numbers",
                "choices",
                "checks",
                "texts",
                "info",
                "order",
                "meta",
            )
        }
        return json.dumps({"format": FORMAT, **data})

    @classmethod
    def from_json(cls, text: str) -> Formulas:
        data = json.loads(text)
        data.pop("seal", None)
        if data.pop("format", None) != FORMAT:
            raise ValueError("an older cache format")
        data["choices"] = [tuple(c) for c in data["choices"]]
        data["checks"] = [tuple(c) for c in data["checks"]]
        data["texts"] = {k: tuple(v) for k, v in data["texts"].items()}
        return cls(**data)


def cache_dir() -> Path | None:
    """Where cached formulas live: ``COSTMODEL_CACHE_DIR`` (``""`` or ``off`` turns the cache off), else
    ``$XDG_CACHE_HOME/costmodel`` or ``~/.cache/costmodel``."""
    configured = os.environ.get("COSTMODEL_CACHE_DIR")
    if configured is not None:
        return None if configured.strip() in ("", "off", "0") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative path is invalid and ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "costmodel"


def _code_stamp() -> str:
    """What the derivation depends on: costmodel's and its architectures' files (path, size, modification)."""
    import importlib.util  # deferred: only a cache key needs it

    roots = [Path(__file__).resolve().parents[1]]  # costmodel/, every stage (not formulas/ alone)
    spec = importlib.util.find_spec("costmodel_graphs")
    if spec is not None and spec.origin:
        roots.append(Path(spec.origin).resolve().parent)
    else:  # a plain checkout: the graphs/ folder beside costmodel/
        roots.append(roots[0].parent / "graphs")
    parts = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                if name.endswith((".py", ".json")):
                    st = os.stat(os.path.join(dirpath, name))
                    parts.append(f"{os.path.relpath(os.path.join(dirpath, name), root)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()


_STAMP: list[str] = []


def code_stamp() -> str:
    """The hash of costmodel's and its architectures' files, worked out once per process (a cache key's part)."""
    if not _STAMP:
        _STAMP.append(_code_stamp())
    return _STAMP[0]


def file_digest(path: str) -> str | None:
    """The hash of a file a key depends on (a config.json, a builder, a hardware file), all of it, or None."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def folder_digest(path: str, limit: int = 2000) -> str:
    """The hash of the Python a builder ``path`` can import from its folder: the folder's ``.py`` files and
    its packages' (folders with an ``__init__.py``), by name and content; at most ``limit`` files."""
    parts: list[str] = []
    todo = [Path(path).resolve().parent]
    root = todo[0]
    while todo and len(parts) < limit:
        folder = todo.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if e.name.startswith(".") or e.name == "__pycache__":
                continue
            try:
                if e.is_file() and e.name.endswith(".py"):
                    parts.append(f"{os.path.relpath(e.path, root)}:{file_digest(e.path)}")
                elif e.is_dir() and os.path.isfile(os.path.join(e.path, "__init__.py")):
                    todo.append(Path(e.path))
            except OSError:
                continue
    return hashlib.sha256("\n".join(sorted(parts[:limit])).encode()).hexdigest()


# A cached file holds code that ``estimate`` runs: it is used only from a folder this user alone can write
# (files.private_folder) and only when its seal, an HMAC of its name and body keyed by the folder's per-user
# secret, holds. A file another user planted, edited, truncated or renamed is derived again, never run.
_SEAL = '{"seal": "'


def _seal(secret: bytes, key: str, body: str) -> str:
    import hmac  # deferred: only the disk cache seals

    return hmac.new(secret, f"{key}\0{body}".encode(), hashlib.sha256).hexdigest()


def _private_cache() -> tuple[Path, bytes] | None:
    from ..files import folder_secret, private_folder  # deferred: only the disk cache needs them

    folder = cache_dir()
    folder = private_folder(folder) if folder is not None else None
    secret = folder_secret(folder) if folder is not None else None
    return None if secret is None else (folder, secret)


def load(key: str) -> Formulas | None:
    """The cached formulas of ``key``, or None (no cache, not cached, unreadable, not sealed by this user:
    derived again)."""
    import hmac  # deferred: only the disk cache reads seals

    from ..files import read_capped  # deferred: only the disk cache reads files

    private = _private_cache()
    if private is None:
        return None
    folder, secret = private
    try:
        text = read_capped(folder / f"{key}.json", CACHE_CAP, "cached formulas").decode("utf-8")
    except (CostModelError, UnicodeDecodeError):
        return None
    n = len(_SEAL)
    if not text.startswith(_SEAL) or text[n + 64 : n + 67] != '", ':
        return None
    body = "{" + text[n + 67 :]
    if not hmac.compare_digest(text[n : n + 64], _seal(secret, key, body)):
        return None
    try:
        f = Formulas.from_json(body)
        f.fn  # noqa: B018 — compiled now: an entry that does not compile is derived again
        return f
    except Exception:  # a sealed entry that does not load or compile: derived again
        return None


def store(key: str, formulas: Formulas) -> None:
    """Cache ``formulas`` under ``key`` (atomically; a folder that cannot be written is no error)."""
    private = _private_cache()
    if private is None:
        return
    folder, secret = private
    body = formulas.to_json()
    try:
        from ..files import write_atomic  # deferred: writing happens once per new key, not on the warm path

        write_atomic(folder / f"{key}.json", f'{_SEAL}{_seal(secret, key, body)}", {body[1:]}', "cached formulas")
    except (OSError, CostModelError):
        pass
