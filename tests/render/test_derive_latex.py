"""``derive --format latex`` compiles in a plain article for every built-in family (and a traced model), with no
line of the page overfull by more than 1 pt and no line of the source longer than 200 characters."""

import contextlib
import io
import re

import pytest

import costmodel
from costmodel.cli import main
from costmodel.families import families
from costmodel.render.paper import whole_document
from tests.render.pdflatex import need_pdflatex, pdflatex

PLAIN = r"\documentclass{article}\usepackage{amsmath,amssymb,booktabs}\begin{document}"


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


def _compile(tex: str, folder) -> list[tuple[float, int]]:
    """Compile ``tex`` once; the (points too wide, source line) of every overfull line of the page."""
    (folder / "doc.tex").write_text(tex)
    run = pdflatex(folder, "doc.tex", timeout=300)
    log = (folder / "doc.log").read_text(errors="replace")
    assert run.returncode == 0, log[-3000:]
    found = re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\) (?:in paragraph at lines|detected at line) (\d+)", log)
    return [(float(pt), int(line)) for pt, line in found]


def _check(parts: dict[str, str], folder) -> None:
    """Compile every fragment of ``parts`` (name → LaTeX) in one plain article; name the fragment of each
    line longer than 200 characters and of each overfull box wider than 1 pt."""
    lines, starts = [PLAIN], []
    for name, fragment in parts.items():
        starts.append((len(lines) + 1, name))
        lines += [rf"\section*{{{name}}}", *fragment.splitlines(), r"\clearpage"]
    lines.append(r"\end{document}")
    long = {name: n for name, fragment in parts.items() if (n := max(map(len, fragment.splitlines()))) > 200}
    assert not long, f"source lines over 200 characters: {long}"

    def owner(line: int) -> str:
        return max((s for s in starts if s[0] <= line), default=(0, "preamble"))[1]

    wide = [(owner(line), pt) for pt, line in _compile("\n".join(lines) + "\n", folder) if pt > 1]
    assert not wide, f"overfull boxes wider than 1 pt (family, pt): {wide}"


#: Presets whose graphs differ from their family's default in what prints widest (a window's min(T, W), the
#: interleaved layers of Llama 4 Maverick and gpt-oss, Gemma 3's 5:1 local/global, DeepSeek-V3's MoE widths)
PRESETS = ["mistral-7b-swa", "gpt-oss-20b", "llama4-maverick", "gemma3-1b", "deepseek-v3"]


def test_every_family_compiles_and_fits_the_page(tmp_path):
    need_pdflatex()
    parts = {name: _cli("derive", name, "--format", "latex") for name in [*sorted(families()), *PRESETS]}
    for name, tex in parts.items():  # what a user pastes: the packages it needs named at the top
        assert "% needs \\usepackage{amsmath,amssymb,booktabs}" in tex.splitlines()[1], name
    _check({name.replace("_", " "): tex for name, tex in parts.items()}, tmp_path)


def test_standalone_is_a_whole_document(tmp_path):
    need_pdflatex()
    tex = _cli("derive", "gpt3-175b", "--format", "latex", "--standalone")
    assert tex.startswith("\\documentclass{article}") and tex.rstrip().endswith("\\end{document}")
    assert tex.rstrip() == whole_document(_cli("derive", "gpt3-175b", "--format", "latex").rstrip("\n")).rstrip()
    assert [pt for pt, _ in _compile(tex, tmp_path) if pt > 1] == []
    # the peak reads as a named max and the Megatron form of the training FLOPs is one short line
    assert r"= S + \max_{i} A_{i}" in tex and "live at backward of" in tex
    assert r"72 B L T d^{2} \bigl(1 + \frac{T}{6 d} + \frac{V}{12 L d}\bigr)" in tex


def test_a_traced_model_compiles_and_fits(tmp_path):
    need_pdflatex()
    torch = pytest.importorskip("torch")
    from torch import nn

    class Net(nn.Module):  # embedding, two pre-norm MLP blocks, an unembedding
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 16)
            self.layers = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 48), nn.GELU(), nn.Linear(48, 16)) for _ in range(2)
            )
            self.head = nn.Linear(16, 50, bias=False)

        def forward(self, ids):
            x = self.embed(ids)
            for layer in self.layers:
                x = x + layer(x)
            return self.head(x)

    with torch.device("meta"):
        net = Net()
    ids = torch.zeros(2, 8, dtype=torch.long, device="meta")
    m = costmodel.trace(net, {"ids": ids}, dynamic={"ids": {0: "B", 1: "T"}})
    _check({"traced": costmodel.derive(m).to_latex("traced Net")}, tmp_path)


def test_explain_compiles_and_fits_the_page(tmp_path):
    need_pdflatex()
    tex = _cli("derive", "gpt3-175b", "--format", "latex", "--explain")
    # GPT-3's 12·L·d² parameters are the four attention projections (4d²) and the MLP's two (8d², d_ff = 4d)
    assert r"$12 L d^{2}$ & \texttt{layers.\allowbreak attn.\allowbreak q/\allowbreak k/" in tex
    assert r"Where each term comes from" in tex and r"term of \texttt{flops.\allowbreak training}" in tex
    _check({"gpt3-175b explained": tex}, tmp_path)
