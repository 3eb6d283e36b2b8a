"""Workloads: seeded arrivals and lengths with the moments they promise, the length grammar, trace replay, and one
clear sentence for each kind of bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pytest import approx

from costmodel.errors import CostModelError
from costmodel.serving.workload import Length, from_trace, parse_length, workload


def gaps(w):
    t = np.array([r.arrival_s for r in w.requests])
    return np.diff(np.concatenate(([0.0], t)))


def test_the_same_seed_gives_the_same_workload_and_another_seed_another():
    a = workload(200, rate=3.0, input_len="uniform:10:100", output_len="normal:50:10", seed=7)
    assert a == workload(200, rate=3.0, input_len="uniform:10:100", output_len="normal:50:10", seed=7)
    assert a != workload(200, rate=3.0, input_len="uniform:10:100", output_len="normal:50:10", seed=8)


def test_poisson_gaps_have_the_mean_and_cv_of_an_exponential():
    g = gaps(workload(20000, rate=4.0, seed=1))
    assert g.mean() == approx(0.25, rel=0.03) and g.std() / g.mean() == approx(1.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_gaps_keep_the_mean_and_take_the_burstiness(cv):
    g = gaps(workload(20000, rate=4.0, burstiness=cv, seed=1))
    assert g.mean() == approx(0.25, rel=0.05) and g.std() / g.mean() == approx(cv, rel=0.08)


def test_rate_inf_puts_every_request_at_zero_and_a_closed_loop_carries_its_concurrency():
    assert {r.arrival_s for r in workload(50, rate=math.inf).requests} == {0.0}
    w = workload(50, concurrency=8)
    assert w.closed and w.concurrency == 8 and not workload(5, rate=1.0).closed


def test_lengths_have_their_moments():
    rng = np.random.default_rng(0)
    u = Length("uniform", 3, 9).sample(rng, 20000)
    assert u.min() == 3 and u.max() == 9 and u.mean() == approx(6, rel=0.02)
    n = Length("normal", 2048, 256).sample(rng, 20000)
    assert n.mean() == approx(2048, rel=0.01) and n.std() == approx(256, rel=0.05)
    assert Length("normal", 2, 50).sample(rng, 1000).min() == 1  # truncated at 1
    ln = Length("lognormal", 2048, 512).sample(rng, 50000)
    assert ln.mean() == approx(2048, rel=0.01) and ln.std() == approx(512, rel=0.05)
    assert Length("fixed", 7).sample(rng, 3).tolist() == [7, 7, 7]


def test_the_length_grammar():
    assert parse_length("2048") == Length("fixed", 2048)
    assert parse_length(512) == Length("fixed", 512)
    assert parse_length("uniform:1024:4096") == Length("uniform", 1024, 4096)
    assert parse_length("normal:2048:256") == Length("normal", 2048, 256)
    assert parse_length(" LogNormal:2048:512 ") == Length("lognormal", 2048, 512)


@pytest.mark.parametrize(
    "text, message",
    [
        ("lognorm:2048:512", "unknown distribution 'lognorm' (did you mean 'lognormal'"),
        ("normal:2048", "expected normal:A:B, got 1 number"),
        ("2048.5", "a fixed length must be a whole number >= 1"),
        ("0", "a fixed length must be a whole number >= 1"),
        ("uniform:9:3", "uniform:a:b needs whole numbers 1 <= a <= b"),
        ("uniform:1:2.5", "uniform:a:b needs whole numbers 1 <= a <= b"),
        ("normal:abc:3", "expected numbers, got 'abc:3'"),
        ("__import__('os')", "expected numbers"),
        ("normal:nan:1", "needs finite numbers"),
        ("1e30", "at most 100,000,000 tokens"),
        ("lognormal:2048:1e12", "at most 100,000,000 tokens"),
    ],
)
def test_bad_lengths_say_what_is_wrong(text, message):
    with pytest.raises(CostModelError, match=message.replace("(", r"\(")):
        parse_length(text)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(rate=0.0), "the rate must be > 0"),
        (dict(rate=-1.0), "the rate must be > 0"),
        (dict(), "give a rate or a concurrency"),
        (dict(rate=1.0, concurrency=2), "give a rate or a concurrency"),
        (dict(concurrency=0), "concurrency must be a whole number >= 1"),
        (dict(rate=1.0, burstiness=0.0), "burstiness"),
        (dict(rate=1.0, n=10**7), "the number of requests must be a whole number in 1..1,000,000"),
    ],
)
def test_bad_workloads_say_what_is_wrong(kw, message):
    with pytest.raises(CostModelError, match=message):
        workload(kw.pop("n", 10), **kw)


def write(tmp_path, lines):
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def test_a_trace_replays_shifted_to_zero_and_sorted_in_any_key_spelling(tmp_path):
    path = write(
        tmp_path,
        [
            {"timestamp": 1700000002.5, "input_length": 100, "output_length": 20},
            "",
            {"arrival_time": 1700000001.0, "prompt_len": 50, "output_tokens": 5, "prefix_tokens": 80},
            {"timestamp": 1700000004.0, "input_tokens": 7, "completion_tokens": 3},
        ],
    )
    w = from_trace(path)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.prefix_tokens) for r in w.requests] == [
        (0.0, 50, 5, 50),  # a prefix longer than its prompt is capped
        (1.5, 100, 20, 0),
        (3.0, 7, 3, 0),
    ]
    assert len(from_trace(path, limit=2)) == 2 and from_trace(path, concurrency=2).closed


@pytest.mark.parametrize(
    "lines, message",
    [
        ([{"timestamp": 0, "input_length": 5, "output_length": 1}, "{not json"], "line 2: not JSON"),
        ([{"timestamp": 0, "input_length": -5, "output_length": 1}], "line 1: the input length must be between 1 and"),
        ([{"timestamp": 0, "input_length": 5, "output_length": 10**12}], "line 1: the output length must be between"),
        ([{"timestamp": 0, "input_length": 5, "output_length": 2.5}], "line 1: the output length must be a whole"),
        ([{"timestamp": 0, "output_length": 2}], "line 1: no input length \\(expected one of the keys input_length"),
        ([[1, 2, 3]], "line 1: expected a JSON object, got list"),
        ([{"timestamp": "soon", "input_length": 5, "output_length": 1}], "the timestamp must be a number"),
        ([""], "no requests"),
    ],
)
def test_bad_traces_name_their_line(tmp_path, lines, message):
    with pytest.raises(CostModelError, match=message):
        from_trace(write(tmp_path, lines))


def test_a_missing_trace_is_one_line(tmp_path):
    with pytest.raises(CostModelError, match="cannot read trace"):
        from_trace(tmp_path / "absent.jsonl")


def test_milliseconds_and_other_tools_spellings(tmp_path):
    mooncake = write(
        tmp_path,
        [
            {"timestamp": 0, "input_length": 9, "output_length": 2},
            {"timestamp": 1500, "input_length": 4, "output_length": 1},
        ],
    )
    assert [r.arrival_s for r in from_trace(mooncake, time_unit="ms").requests] == [0.0, 1.5]
    azure = write(
        tmp_path,
        [
            {"TIMESTAMP_MS": 250, "ContextTokens": 30, "GeneratedTokens": 7},
            {"timestamp_ms": 0, "ContextTokens": 3, "GeneratedTokens": 1},
        ],
    )
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in from_trace(azure).requests] == [
        (0.0, 3, 1),
        (0.25, 30, 7),
    ]
    with pytest.raises(CostModelError, match="the time unit is 's' or 'ms'"):
        from_trace(azure, time_unit="min")
