"""Issue 30, item 7: ``plan --reference tp=8,pp=16,dp=16`` for llama3-405b said only "no fitting layout has those
fields". Llama 3 405B's 126 layers do not divide into 16 even stages (126 = 16 · 7 + 14) and plan searches even
stages only; it now says so and names the ``estimate`` flags that take uneven stages."""

import contextlib
import io

from costmodel.cli import main


def test_a_reference_plan_cannot_search_says_why():
    out = io.StringIO()
    argv = ["plan", "llama3-405b", "--hardware", "h100-sxm", "--devices", "2048", "--batch", "2048", "--seq", "8192"]
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--reference", "tp=8,pp=16,dp=16"]) == 0
    text = " ".join(out.getvalue().split())
    assert "pp 16 does not divide the 126 layers" in text and "--stage-layers" in text
