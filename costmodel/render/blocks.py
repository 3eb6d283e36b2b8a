"""The blocks a report is made of: a :class:`Section` holds :class:`Text`, :class:`Math`, :class:`Table`
and :class:`Box` (the summary's rows), each rendered as LaTeX, Markdown and HTML by
:mod:`costmodel.verbs.report`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Text:
    """A paragraph of plain text (escaped for LaTeX)."""

    text: str


@dataclass(frozen=True)
class Math:
    """Display math: LaTeX of an ``align*`` body or environment (rendered as ``aligned`` in Markdown)."""

    latex: str


@dataclass(frozen=True)
class Cell:
    """A table cell: plain text, inline LaTeX math when ``math`` is set, a key or a name in type when ``code``."""

    text: str
    math: bool = False
    code: bool = False


@dataclass(frozen=True)
class Table:
    """A table: a header and rows of cells (``align``: a LaTeX column spec)."""

    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    align: str = ""  # LaTeX column spec; default: left-aligned columns


@dataclass(frozen=True)
class Box:
    """The answer first: (what, answer) rows in a frame."""

    rows: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Section:
    """A titled section of a document: its blocks in order."""

    title: str
    blocks: tuple[object, ...]
