"""The points of a liveness walk that can be the peak (``peak.maximal``), checked against the plain maximum.

``estimate`` evaluates only the maximal points (a 64-layer walk: 8 of 2,184); the peak and the label that names
it must be those of every point: the largest value, and of equal ones the alphabetically last label
(``memory.peak_at``). Checked here by evaluating every point with sympy at random sizes, not by the rule
``maximal`` uses.
"""

from fractions import Fraction

import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import Options, load
from costmodel.formulas.quantities import roundup
from costmodel.memory.device import prepared
from costmodel.memory.peak import maximal, peak
from costmodel.symbols import B, L, T, d

# a monomial above 0 at every config, one ≥ 0 that is 0 at L = 1, one whose sign is unknown (< 0 at L = 1)
MONOMIALS = (sympy.S.One, B * T * d, B * T, roundup(B * T * d / 3), roundup((L - 1) * d / 6), roundup((L - 2) * d / 6))
COEFFS = st.one_of(st.integers(-3, 6), st.sampled_from([Fraction(1, 2), Fraction(-3, 4), Fraction(5, 3)]))
POINT = st.dictionaries(st.sampled_from(MONOMIALS), COEFFS.filter(bool), max_size=len(MONOMIALS))


def _value(point: dict, values: dict) -> sympy.Rational:
    return sum((sympy.Rational(c.numerator, c.denominator) * m.xreplace(values) for m, c in point.items()), 0)


def _peak(points, labels, values):
    nums = [_value(p, values) for p in points]
    i = max(range(len(points)), key=lambda j: (nums[j], labels[j]))  # memory.peak_at's tie rule
    return nums[i], labels[i]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(POINT, min_size=1, max_size=12),
    st.data(),
    st.fixed_dictionaries({B: st.integers(1, 3), T: st.integers(1, 4), d: st.integers(1, 7), L: st.integers(1, 3)}),
)
def test_the_maximal_points_give_the_peak_and_its_label(points, data, values):
    points = points + [dict(p) for p in data.draw(st.lists(st.sampled_from(points), max_size=4))]  # equal points
    labels = data.draw(st.lists(st.text("abc", min_size=1, max_size=3), min_size=len(points), max_size=len(points)))
    labels = [f"{label}{i}" for i, label in enumerate(labels)]  # a walk's labels are distinct
    kept = maximal(points, labels)
    assert kept == sorted(set(kept))
    assert _peak([points[i] for i in kept], [labels[i] for i in kept], values) == _peak(points, labels, values)


def test_a_point_equal_to_another_keeps_the_later_label():
    p = {B * T * d: 2, sympy.S.One: 8}
    assert maximal([dict(p), dict(p), {B * T: 1}], ["forward of b", "backward of a", "forward of c"]) == [0, 2]


def test_a_point_that_ties_where_a_share_is_0_is_kept():
    # 2·B·T·d + ⌈(L−1)·d/6⌉ ≥ 2·B·T·d, equal at L = 1: the smaller point names the peak there (its label is later)
    low, high = {B * T * d: 2}, {B * T * d: 2, roundup((L - 1) * d / 6): 1}
    assert maximal([low, high], ["z", "a"]) == [0, 1]
    assert maximal([low, high], ["a", "z"]) == [1]
    assert maximal([low, {B * T * d: 2, B * T: 1}], ["z", "a"]) == [1]  # B·T ≥ 1: never equal


def test_a_larger_coefficient_of_a_monomial_of_unknown_sign_covers_nothing():
    # ⌈(L−2)·d/6⌉ is −1 at L = 1, d = 6: there the point with the smaller coefficient is the larger
    share = roundup((L - 2) * d / 6)
    low, high = {B * T * d: 1, share: 1}, {B * T * d: 1, share: 2}
    assert maximal([low, high], ["a", "b"]) == [0, 1]
    assert _peak([low], ["a"], {B: 1, T: 1, d: 6, L: 1}) == _peak([low, high], ["a", "b"], {B: 1, T: 1, d: 6, L: 1})


def test_the_walk_of_a_model_keeps_its_peak():
    """GPT-2 small, recompute none and full: the maximal points' peak and label are every point's."""
    m = load("gpt2-small")
    for recompute in ("none", "full"):
        H = prepared(m.graph, Options.make(None))
        every, some = peak(H, recompute), peak(H, recompute, every_point=False)
        assert len(some.candidates) < len(every.candidates)
        values = {**m.values, B: 2, T: 1024}
        assert some.at(values) == every.at(values)
