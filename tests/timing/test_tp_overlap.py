"""Issue 29, item 5: Megatron's tensor-parallel overlap as a partial hide (--tp-comm-overlap) and the share of
compute an overlapped collective takes (--comm-sm-share). Hand arithmetic on the rule, then on an estimate."""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest
import sympy

import costmodel
from costmodel.timing.calibrated import tp_overlapped
from costmodel.timing.kernels import OpTime

R = sympy.Rational


def knobs(tp, sp=0):
    return SimpleNamespace(tp=sympy.Integer(tp), megatron_sp=sympy.Integer(sp))


def test_forward_collectives_pipeline_in_tp_chunks():
    # 8 s of all-reduce behind a 4 s GEMM in 8 chunks: the first chunk's 1 s exposed, then 7/8 · (8 − 4) = 3.5 s
    assert tp_overlapped(R(8), "forward", OpTime(R(4), R(0)), knobs(8)) == R(9, 2)
    # a GEMM longer than the exchange hides all but the first chunk: 8/8 = 1 s
    assert tp_overlapped(R(8), "forward", OpTime(R(10), R(0)), knobs(8)) == 1


def test_backward_collectives_hide_behind_the_other_gemm():
    # without sequence parallelism the input gradient's all-reduce runs behind the weight gradient's GEMM, half
    # of a 6 s backward: 8 − 3 = 5 s exposed; with it the re-gather hides behind the input-gradient GEMM and the
    # reduce-scatter behind the weight gradient's: behind all 6 s, 2 s exposed
    assert tp_overlapped(R(8), "backward", OpTime(R(0), R(6)), knobs(8)) == 5
    assert tp_overlapped(R(8), "backward", OpTime(R(0), R(6)), knobs(8, sp=1)) == 2


def run(**options):
    o = dict(tp=8, dp=4, batch=32, seq=4096, flash=True, hardware="h100-sxm")
    return costmodel.estimate("llama3-70b", **o, **options).to_dict()["time"]


def test_a_partial_hide_between_exposed_and_hidden():
    exposed = run()  # today's default: TP all-reduces exposed
    hidden = run(overlap_comm="dp,tp")  # hidden behind the whole stage
    piped = run(tp_comm_overlap=True)
    tp = exposed["comm_by_kind"]["tp"]
    assert exposed["breakdown"]["exposed_communication_s"] == pytest.approx(tp, rel=1e-12)
    assert hidden["breakdown"]["exposed_communication_s"] == 0
    part = piped["breakdown"]["exposed_communication_s"]
    # at least the first of tp chunks of every forward collective, at most all of it
    assert tp / 8 / 2 < part < tp
    assert hidden["step_s"] < piped["step_s"] < exposed["step_s"]


def test_an_overlapped_collective_takes_its_share_of_compute():
    free = run(overlap_comm="dp,tp")
    taxed = run(overlap_comm="dp,tp", comm_sm_share=Fraction(1, 5))
    # everything hidden: F × (tp + dp seconds) added, 0.2 × (0.819 + 0.588) s
    hidden = free["comm_by_kind"]["tp"] + free["comm_by_kind"]["dp"]
    assert taxed["step_s"] - free["step_s"] == pytest.approx(hidden / 5, rel=1e-9)
    with pytest.raises(costmodel.CostModelError, match="0 < F < 1"):
        costmodel.Options.make(comm_sm_share=Fraction(3, 2))
