"""What :func:`costmodel.derive` returns (:class:`Derivation`): the JSON contract of ``derive --json`` and, beside
it, the formulas shaped for reading, the views a writer asks for and where each term comes from.

Shaping, views and explanations are :mod:`costmodel.formulas.shaped` and :mod:`costmodel.formulas.views`; the JSON
is the exact expressions as they are. (Unlike :mod:`costmodel.render.results`, this module imports sympy: only
``derive``, which has derived with it, makes one.)
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy

from ..errors import CostModelError
from ..formulas import views
from ..formulas.named import definitions, glossary, use_names
from ..formulas.quantities import choose, maximum
from ..formulas.shaped import fractional, shape, shape_all
from ..memory.peak import maximal
from . import explained
from .paper import display, fragment, whole_document
from .results import Result, dumps, to_jsonable

#: The keys of the peak's parts at its winning point (``memory.device.training_memory``).
AT_PEAK = "memory_bytes.peak_breakdown."


class Derivation(Result):
    """What :func:`costmodel.derive` returns: symbols, expressions (sympy) and per-op costs.

    Beside the JSON contract it keeps what shaping the formulas for reading needs (never in the JSON):
    ``peaks`` (key → the names of a liveness peak's points), ``counts`` (the block counts, ``L``) and ``at``
    (a config's name and values that order terms and pick the peak's point), and gives the formulas shaped
    (:meth:`shaped`).
    """

    def __init__(
        self,
        data: Mapping[str, object],
        *,
        peaks: Mapping[str, tuple[str, ...]] | None = None,
        counts: tuple = (),
        at: tuple[str, Mapping] | None = None,
        sources=None,
    ) -> None:
        super().__init__(data)
        self.peaks, self.counts, self.at, self._sources = dict(peaks or {}), counts, at, sources

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"costmodel derive: {self._data.get('model', '')}"

    def _rows(self) -> list[tuple[str, object]]:
        return list(self._data["expressions"].items())

    def to_dict(self) -> dict:
        out = to_jsonable(self._data)
        for name, row in out["ops"].items():  # the contract: an intensity is always a string ("2*d/5 + 11/10")
            row["intensity"] = str(self._data["ops"][name]["intensity"])
        return out  # type: ignore[return-value]

    def to_json(self) -> str:
        return dumps(self.to_dict())

    def shaped(self) -> dict:
        """Every expression shaped for reading (:func:`costmodel.formulas.shaped.shape_all`), equal to it."""
        if "_shaped" not in self.__dict__:
            values = self.at[1] if self.at else None
            shaped = shape_all(
                self._data["expressions"], peaks=self.peaks, counts=self.counts, at=values, maximal=maximal
            )
            names = self.names()
            self.__dict__["_shaped"] = {k: use_names(s, names, self.counts) for k, s in shaped.items()}
        return self.__dict__["_shaped"]

    def view(
        self,
        *,
        keys: str | None = None,
        per_token: bool = False,
        per_layer: bool = False,
        rename: str | None = None,
    ) -> Derivation:
        """This derivation as a writer asks to see it (``derive --keys/--per-token/--per-layer/--rename``): the
        expressions whose keys match ``keys`` (comma-separated patterns); divided by the tokens of a step; each
        expression's part per repetition of the block (its coefficient of L); the symbols renamed (``d=h,T=s``).
        Exact throughout; a peak's max and a stage's choice are left out of the per-token and per-layer views."""

        exprs = dict(self._data["expressions"])
        if keys:
            exprs = views.select(exprs, keys)
        plain = {  # sums of terms: not a peak's max, a stage's choice or a share (a ratio of sums)
            k: v for k, v in exprs.items() if not v.has(maximum, choose, sympy.Piecewise) and not fractional(v)
        }
        if per_token:
            exprs = views.per(plain, self._data["expressions"]["tokens.per_step"])
        if per_layer:
            count = next((c for c in self.counts if isinstance(c, sympy.Symbol)), None)
            if count is None:
                raise CostModelError(f"--per-layer: {self._data['model']} has no repeated block (no count such as L)")
            exprs = views.per_layer(plain if not per_token else exprs, count)
        if not exprs:
            raise CostModelError(
                "derive: no expression is left to show (a per-token or per-layer view keeps sums of terms, "
                "not a peak's max, a choice or a share)"
            )
        names = views.parse_rename(rename, list(self._data["symbols"])) if rename else {}

        def ren(e):
            return e.xreplace(names) if names and isinstance(e, sympy.Basic) else e

        data = dict(self._data)
        data["expressions"] = {k: ren(v) for k, v in exprs.items()}
        old = {str(o): str(n) for o, n in names.items()}
        data["symbols"] = {old.get(s, s): v for s, v in self._data["symbols"].items()}
        data["ops"] = {n: {k: ren(v) for k, v in row.items()} for n, row in self._data["ops"].items()}
        same = not (per_token or per_layer)
        sources = self._sources if same else None
        return Derivation(
            data,
            peaks={k: v for k, v in self.peaks.items() if k in exprs and same},
            counts=tuple(ren(c) for c in self.counts),
            at=(self.at[0], {ren(s): v for s, v in self.at[1].items()}) if self.at else None,
            sources=(lambda: {k: {op: ren(v) for op, v in d.items()} for k, d in sources().items()})
            if sources
            else None,
        )

    def leading(self, cover: float = 0.9) -> dict[str, dict[str, object]]:
        """key → the fewest largest terms that make up ``cover`` of it at the derivation's config (``at``), the
        share they make and the config's name; only for sums where that leaves terms out."""
        if self.at is None:
            raise CostModelError(
                f"derive --leading: {self._data['model']} has no config to rank terms at; give its sizes with --set"
            )
        out = {}
        for k, e in self._data["expressions"].items():
            got = views.leading(e, self.at[1], cover)
            if got is not None and got[0] != e:
                out[k] = {"expression": got[0], "share": got[1], "at": self.at[0]}
        return out

    def explain(self) -> dict:
        """For each expression a per-op sum makes (parameters, FLOPs, bytes), each term with the ops that add up to
        it (:func:`costmodel.formulas.views.explain`), as strings (the JSON key ``explain``); only where the ops'
        parts sum to the expression exactly."""
        return {
            key: [{"term": str(t["term"]), "ops": {op: str(v) for op, v in t["ops"].items()}} for t in terms]
            for key, terms in self._explained().items()
        }

    def explain_text(self) -> str:
        """:meth:`explain` as plain text (``derive --explain``): each term with its ops by block."""
        return explained.text(self._explained())

    def _explained(self) -> dict:
        """:meth:`explain` with the terms and the ops' parts as sympy expressions (what a page prints)."""
        if "_explain" not in self.__dict__:
            sources = self._sources() if self._sources else {}
            out = {}
            for key, parts in sources.items():
                if key in self._data["expressions"]:
                    got = views.explain(self._data["expressions"][key], parts, self.at[1] if self.at else None)
                    if got is not None:
                        out[key] = got
            self.__dict__["_explain"] = out
        return self.__dict__["_explain"]

    def names(self) -> dict:
        """The quantities the shaped formulas use by name (:func:`costmodel.formulas.shaped.glossary`)."""
        return glossary(self._data["expressions"], self.counts)

    def definitions(self) -> dict:
        """Each named quantity shaped, in the names before it (``N = L N_{layer} + N_{embed} + 2 d``)."""
        return definitions(self.names(), self.counts, self.at[1] if self.at else None)

    def ops_shaped(self) -> dict:
        """Each op's forward FLOPs and bytes of one run, shaped."""
        values = self.at[1] if self.at else None
        return {
            name: (shape(row["flops"], at=values), shape(row["bytes"], at=values))
            for name, row in self._data["ops"].items()
        }

    def displayed(self) -> dict:
        """The shaped formulas a page prints: all but the peak's parts at its winning point
        (``memory_bytes.peak_breakdown.*``, each a choice over the peak's points: named in :meth:`at_peak_note`)."""
        return {k: v for k, v in self.shaped().items() if k not in self._at_peak()}

    def _at_peak(self) -> list[str]:
        return [k for k, v in self._data["expressions"].items() if k.startswith(AT_PEAK) and v.has(choose)]

    def at_peak_note(self) -> str:
        """One sentence naming the peak's parts left out of :meth:`displayed` ('' when none are)."""
        parts = [k[len(AT_PEAK) :] for k in self._at_peak()]
        if not parts:
            return ""
        return (
            "The peak's parts at its winning point (" + ", ".join(parts) + "): each the part of the point that wins, "
            "exact in the JSON (" + AT_PEAK + "*)."
        )

    def _repr_latex_(self) -> str:  # Jupyter: the formulas shaped, as Markdown shows them
        return "$\\begin{aligned}\n" + display(self.displayed()) + "\n\\end{aligned}$"

    def to_markdown(self, *, explain: bool = False) -> str:
        """Markdown: the symbols, then every formula shaped in a ``$$…$$`` block (KaTeX, MathJax); ``explain``:
        then each explained expression's terms and their ops (:meth:`explain`)."""
        lines = [f"**{self.title}**", "", "| symbol | meaning |", "|---|---|"]
        lines += [f"| `{s}` | {about} |" for s, about in self._data["symbols"].items()]
        names = self.definitions()
        if names:
            lines += ["", "$$", "\\begin{aligned}", display(names, lambda n: n), "\\end{aligned}", "$$"]
        lines += ["", "$$", "\\begin{aligned}", display(self.displayed()), "\\end{aligned}", "$$"]
        if self.at_peak_note():
            lines += ["", self.at_peak_note()]
        if explain:
            lines.append(explained.markdown(self._explained()))
        return "\n".join(lines) + "\n"

    def to_latex(
        self, title: str | None = None, *, standalone: bool = False, leading: bool = False, explain: bool = False
    ) -> str:
        """A LaTeX fragment for a plain article (:func:`costmodel.render.paper.fragment`): the symbols, every
        formula shaped and broken to fit the page, the peak by its named points, the per-op table;
        ``standalone``: a whole document; ``leading``: each formula's leading terms (:meth:`leading`) only;
        ``explain``: then each explained expression's terms and their ops (:meth:`explain`)."""
        body = fragment(
            title or self.title,
            self._data["symbols"],
            self.displayed(),
            self._data["ops"],
            self.ops_shaped(),
            self.at,
            self.definitions(),
            self.leading() if leading else None,
            self.at_peak_note(),
            explained.latex(self._explained()) if explain else "",
        )
        return whole_document(body) if standalone else body
