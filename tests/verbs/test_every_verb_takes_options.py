"""Every verb takes its choices as :class:`Options` (issue 24): the device given in ``options`` is the same
device given as the older ``hardware=`` keyword, and two different devices are refused."""

import pytest

import costmodel
from costmodel import CostModelError, Options


def test_roofline_reads_the_device_from_options():
    by_keyword = costmodel.roofline("gpt2-small", "h100-sxm", batch=2)
    by_options = costmodel.roofline("gpt2-small", options=Options(hardware="h100-sxm", batch=2))
    assert by_options.to_dict() == by_keyword.to_dict()
    with pytest.raises(CostModelError, match="two devices"):
        costmodel.roofline("gpt2-small", "a100-80gb", options=Options(hardware="h100-sxm"))
    with pytest.raises(CostModelError, match="give a device"):
        costmodel.roofline("gpt2-small")


def test_fit_reads_the_device_from_options():
    by_keyword = costmodel.fit("gpt2-small", hardware="h100-sxm", flash=True)
    by_options = costmodel.fit("gpt2-small", options=Options(hardware="h100-sxm", flash=True))
    assert by_options.to_dict() == by_keyword.to_dict()
    # the device's memory is what is filled: 80 GB, as the table says
    assert by_options["memory"] == 80 * 10**9


def test_plan_takes_options_like_every_verb():
    keywords = dict(hardware="h100-sxm", devices=8, batch=16, seq=1024, top=3, progress=False)
    by_keyword = costmodel.plan("gpt2-small", **keywords)
    opts = Options(hardware="h100-sxm", batch=16, seq=1024, flash=True)
    by_options = costmodel.plan("gpt2-small", devices=8, top=3, progress=False, options=opts)
    strip = lambda r: [{k: v for k, v in row.items()} for row in r["layouts"]]  # noqa: E731
    assert strip(by_options) == strip(by_keyword)
    with pytest.raises(CostModelError, match="give devices"):
        costmodel.plan("gpt2-small", options=opts)
