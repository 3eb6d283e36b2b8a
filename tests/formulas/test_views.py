"""derive's views for writers: --keys, --leading, --per-token, --per-layer, --rename and --explain, exact and
checked against the architecture they come from."""

import json

import pytest
import sympy

import costmodel
from costmodel import CostModelError
from costmodel.cli import main
from costmodel.formulas.views import parse_rename
from costmodel.symbols import B, L, T, V, d


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_names_the_ops_of_each_term(capsys):
    code, out, _ = _cli(capsys, "derive", "gpt3-175b", "--keys", "flops.training", "--explain", "--format", "json")
    terms = {t["term"]: t["ops"] for t in json.loads(out)["explain"]["flops.training"]}
    # 72·B·L·T·d²: q, k, v, proj 6·B·L·T·d² each (2·d² per token forward, ×3 with backward), fc and proj 24 each
    assert terms["72*B*L*T*d**2"] == {
        "layers.attn.q": "6*B*L*T*d**2",
        "layers.attn.k": "6*B*L*T*d**2",
        "layers.attn.v": "6*B*L*T*d**2",
        "layers.attn.proj": "6*B*L*T*d**2",
        "layers.mlp.fc": "24*B*L*T*d**2",
        "layers.mlp.proj": "24*B*L*T*d**2",
    }
    assert terms["6*B*T*V*d"] == {"lm_head": "6*B*T*V*d"}  # the unembedding: 2·V·d per token, ×3
    code, out, _ = _cli(capsys, "derive", "gpt3-175b", "--keys", "params.total", "--explain")
    assert code == 0 and "12*L*d**2" in out and "<- layers.attn.q/k/v/proj, layers.mlp.fc/proj" in out


def test_json_without_the_new_flags_is_unchanged(capsys):
    _, plain, _ = _cli(capsys, "derive", "gpt2-small", "--format", "json")
    _, explained, _ = _cli(capsys, "derive", "gpt2-small", "--format", "json", "--explain", "--leading")
    plain, explained = json.loads(plain), json.loads(explained)
    assert {k: v for k, v in explained.items() if k not in ("explain", "leading")} == plain


def test_leading_terms_and_their_share(capsys):
    code, out, _ = _cli(capsys, "derive", "gpt3-175b", "--leading", "--format", "json")
    row = json.loads(out)["leading"]["params.total"]
    # 12·L·d² = 12·96·12288² = 173,946,175,488 of 174,604,259,328 parameters: 99.6%
    assert row["expression"] == "12*L*d**2" and row["share"] == pytest.approx(173_946_175_488 / 174_604_259_328)


def test_per_token_and_per_layer_are_exact(capsys):
    r = costmodel.derive("gpt3-175b")
    per_token = r.view(keys="flops.matmul.training", per_token=True)["expressions"]["flops.matmul.training"]
    assert per_token == 72 * L * d**2 + 12 * L * T * d + 6 * V * d  # (72BLTd² + 12BLT²d + 6BTVd) / (B·T)
    per_layer = r.view(keys="params.total", per_layer=True)["expressions"]["params.total"]
    assert per_layer == 12 * d**2 + 13 * d  # GPT-2/3: 12d² weights, 13d biases and norm gains per layer


def test_rename_to_the_papers_notation(capsys):
    r = costmodel.derive("gpt3-175b").view(keys="flops.matmul.training", rename="d=h,T=s,h=a")
    h, s = sympy.Symbol("h", positive=True, integer=True), sympy.Symbol("s", positive=True, integer=True)
    assert (
        r["expressions"]["flops.matmul.training"] == 72 * B * L * s * h**2 + 12 * B * L * s**2 * h + 6 * B * s * V * h
    )
    assert "a" in r["symbols"] and "d" not in r["symbols"]
    code, out, _ = _cli(
        capsys, "derive", "gpt3-175b", "--keys", "flops.matmul.training", "--rename", "d=h,T=s,h=a", "--format", "latex"
    )
    assert code == 0 and r"72 B L h^{2} s" in out


@pytest.mark.parametrize("text", ["d=h,T=h", "d=__import__('os')", "x=y", "d", "d=h+1", "d=\\input{x}"])
def test_rename_refuses_what_is_not_a_renaming(text):
    with pytest.raises(CostModelError):
        parse_rename(text, ["B", "L", "T", "d", "h"])


def test_bad_keys_and_rename_exit_2(capsys):
    code, _, err = _cli(capsys, "derive", "gpt2-small", "--keys", "nothing.*")
    assert code == 2 and "no expression matches" in err
    code, _, err = _cli(capsys, "derive", "gpt2-small", "--rename", "d=os.system")
    assert code == 2 and "--rename" in err


def test_a_view_that_leaves_nothing_exits_2(capsys):
    code, _, err = _cli(capsys, "derive", "llama", "--keys", "memory_bytes.peak", "--per-token")
    assert code == 2 and "no expression is left" in err


def test_a_quantity_is_not_named_like_a_symbol():
    # renamed T → D, the tokens of a step are no longer called D (B·D would read as B times themselves)
    r = costmodel.derive("gpt3-175b").view(rename="T=D")
    assert "D" not in r.names() and "N" in r.names()
