"""The state-space op rules (``conv``, ``scan``) against small torch references.

The selective scan's FLOPs are checked part by part against a reference written in torch the way
Mamba's Algorithm 2 (and transformers' slow path) computes it, and a backward written by hand (the
adjoint scan), whose gradients must equal autograd's. Their FLOPs are *counted by hand per aten op* with a
dispatch mode (:class:`Counted`): one FLOP per output element of each add, mul or exp, one per input
element of a sum (a product then a sum over ``n`` is ``2n``: a multiply-add is 2 FLOPs), ``2·M·N·K`` for
a ``bmm``; any other op that computes raises, so nothing uncounted hides. ``FlopCounterMode`` sees only
the matmuls. The depthwise convolution is checked against ``F.conv1d``, whose count by ``FlopCounterMode``
has a stated relation to the rule's.
"""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from costmodel.errors import CostModelError
from costmodel.graph.registry import Op, op_cost, state_bytes

POINTWISE = {"add", "mul", "exp"}
MOVES = {
    "view",
    "unsqueeze",
    "select",
    "stack",
    "zeros",
    "expand",
    "transpose",
    "squeeze",
    "_unsafe_view",
    "detach",
    "clone",
    "copy_",
    "_to_copy",
    "slice",
    "t",
    "alias",
    "zeros_like",
    "empty",
    "full",
    "lift_fresh",
    "fill_",
}


class Counted(TorchDispatchMode):
    """Element-wise FLOPs (``elementwise``) and matmul FLOPs (``matmul``) of what runs inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.elementwise = self.matmul = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in POINTWISE:
            self.elementwise += out.numel()  # one per output element
        elif name == "sum":
            self.elementwise += args[0].numel()  # one add per summed element
        elif name == "bmm":
            (b, m, k), n = args[0].shape, args[1].shape[-1]
            self.matmul += 2 * b * m * k * n
        elif name not in MOVES:
            raise AssertionError(f"uncounted aten op {name}")
        return out


def scan_op(b, t, u, n, *, trainable=True, skip=True) -> Op:
    attrs = {
        "state": "n",
        "along": "t",
        **({"skip": "u"} if skip else {}),
        **({} if trainable else {"trainable": False}),
    }
    sizes = tuple((k, sympy.Integer(v)) for k, v in dict(b=b, t=t, u=u, n=n).items())
    return Op("scan", "b t u, b t u, b t n, b t n, u n -> b t u", sizes, "fp32", tuple(sorted(attrs.items())))


def reference_forward(x, dt, A, Bm, Cm, D):
    """Mamba's Algorithm 2: x, Δ (b, t, u); B, C (b, t, n); A (u, n); D (u,). Returns y and what a fused
    kernel recomputes in backward: Ā, ΔB and the states."""
    b, t, u = x.shape
    abar = torch.exp(dt[..., None] * A)  # discretise: Δ·A, exp
    dtb = dt[..., None] * Bm[:, :, None, :]  # input: Δ·B
    bx = dtb * x[..., None]  # input: ·x
    h, hs, ys = torch.zeros(b, u, A.shape[1], dtype=x.dtype), [], []
    for i in range(t):
        h = abar[:, i] * h + bx[:, i]  # recurrence: ·, +
        hs.append(h)
        ys.append(torch.matmul(h, Cm[:, i, :, None])[..., 0])  # readout: a bmm over the state
    y = torch.stack(ys, 1)
    return y + x * D, abar, dtb, hs  # skip: ·, +


def reference_backward(x, dt, A, Bm, Cm, D, abar, dtb, hs, dy, weights=True):
    """The adjoint of :func:`reference_forward`, part by part as ``SCAN_PARTS`` documents them."""
    t = x.shape[1]
    g = torch.zeros_like(hs[0])
    d_abar, d_bx, dC = [None] * t, [None] * t, [None] * t
    for i in reversed(range(t)):
        g = g + torch.matmul(dy[:, i, :, None], Cm[:, i, None, :])  # readout ∂h (bmm), recurrence: + (1)
        dC[i] = torch.matmul(hs[i].transpose(1, 2), dy[:, i, :, None])[..., 0]  # readout ∂C (bmm)
        d_abar[i] = g * (hs[i - 1] if i else torch.zeros_like(g))  # recurrence: ∂Ā = g·h_{t−1} (1)
        d_bx[i] = g  # ∂(B̄x) = g, free
        g = g * abar[:, i]  # recurrence: carry (1)
    d_abar, d_bx = torch.stack(d_abar, 1), torch.stack(d_bx, 1)
    d_dta = d_abar * abar  # discretise: ∂(ΔA) (1)
    d_dtb = d_bx * x[..., None]  # input: ∂(ΔB) (1)
    d_dt = (d_dta * A + d_dtb * Bm[:, :, None, :]).sum(-1)  # discretise Σ_n (2) + input Σ_n (2)
    dB = (d_dtb * dt[..., None]).sum(2)  # input: Σ_u (2)
    dx = (d_bx * dtb).sum(-1) + D * dy  # input Σ_n (2), skip (2)
    grads = {"x": dx, "dt": d_dt, "B": dB, "C": torch.stack(dC, 1)}
    if weights:
        grads["A"] = (d_dta * dt[..., None]).sum((0, 1))  # discretise: Σ_{b,t} (2)
        grads["D"] = (dy * x).sum((0, 1))  # skip: Σ_{b,t} (2)
    return grads


def inputs(b, t, u, n, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(b, t, u, generator=g, dtype=dtype),
        torch.rand(b, t, u, generator=g, dtype=dtype),
        -torch.rand(u, n, generator=g, dtype=dtype),
        torch.randn(b, t, n, generator=g, dtype=dtype),
        torch.randn(b, t, n, generator=g, dtype=dtype),
        torch.randn(u, generator=g, dtype=dtype),
    )


@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 3, 6, 2)])
def test_scan_forward_counts_match_the_reference(shape):
    cost = op_cost(scan_op(*shape)).forward
    args = inputs(*shape)
    with Counted() as counted:
        reference_forward(*args)
    assert counted.matmul == cost.matmul_flops
    assert counted.elementwise == cost.flops - cost.matmul_flops
    # by hand, b·t·u·n = B·T·U·N: discretise 2 + input 2 + recurrence 2 element-wise, readout 2 as a bmm;
    # the skip 2 per b·t·u
    b, t, u, n = shape
    assert (cost.flops, cost.matmul_flops) == (8 * b * t * u * n + 2 * b * t * u, 2 * b * t * u * n)


def test_scan_forward_matches_transformers_reference_scan():
    # transformers' own slow path (no Δ bias, no softplus, no gate: those are separate ops of the graph)
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    b, t, u, n = 2, 5, 3, 4
    x, dt, A, Bm, Cm, D = inputs(b, t, u, n)
    args = (x.transpose(1, 2), dt.transpose(1, 2), A, Bm.transpose(1, 2), Cm.transpose(1, 2))
    cost = op_cost(scan_op(b, t, u, n)).forward
    with Counted() as counted:
        y = mamba_selective_scan(*args, D=D)
    with FlopCounterMode(display=False) as fc:
        mamba_selective_scan(*args, D=D)
    assert counted.elementwise == cost.flops - cost.matmul_flops
    assert counted.matmul == fc.get_total_flops() == cost.matmul_flops  # FlopCounterMode: only h·C
    torch.testing.assert_close(y.transpose(1, 2), reference_forward(x, dt, A, Bm, Cm, D)[0])


@pytest.mark.parametrize("trainable", [True, False])
def test_scan_backward_counts_match_the_hand_written_adjoint(trainable):
    shape = b, t, u, n = 2, 4, 3, 5
    cost = op_cost(scan_op(*shape, trainable=trainable)).backward
    x, dt, A, Bm, Cm, D = (v.requires_grad_() for v in inputs(*shape))
    y = reference_forward(x, dt, A, Bm, Cm, D)[0]
    dy = torch.randn_like(y)
    auto = dict(zip(("x", "dt", "A", "B", "C", "D"), torch.autograd.grad(y, (x, dt, A, Bm, Cm, D), dy)))
    with torch.no_grad():
        with Counted() as again:  # what a fused kernel recomputes: Ā, B̄x and the states
            _, abar, dtb, hs = reference_forward(x, dt, A, Bm, Cm, D)
        with Counted() as counted, FlopCounterMode(display=False) as fc:
            grads = reference_backward(x, dt, A, Bm, Cm, D, abar, dtb, hs, dy, weights=trainable)
    for name, grad in grads.items():  # the hand-written backward is the real one
        torch.testing.assert_close(grad, auto[name])
    assert counted.matmul == fc.get_total_flops() == cost.matmul_flops == 4 * b * t * u * n
    assert counted.elementwise == cost.flops - cost.matmul_flops
    # recomputed: the forward minus the readout's bmm and the skip (2·b·t·u·n + 2·b·t·u)
    assert again.elementwise - 2 * b * t * u == cost.recompute_flops == 6 * b * t * u * n
    # by hand: 19 per b·t·u·n and 4 per b·t·u, without the weights' gradients 2 and 2 fewer
    assert cost.flops == (19 - 2 * (not trainable)) * b * t * u * n + (4 - 2 * (not trainable)) * b * t * u


def test_scan_parameters_are_mamba_mixers_A_log_and_D():
    from transformers import MambaConfig
    from transformers.models.mamba.modeling_mamba import MambaMixer

    cfg = MambaConfig(hidden_size=8, state_size=5, expand=3, num_hidden_layers=1)
    with torch.device("meta"):
        mixer = MambaMixer(cfg, 0)
    cost = op_cost(scan_op(1, 1, cfg.intermediate_size, cfg.state_size))
    assert {w.name: w.elements for w in cost.weights} == {"A_log": mixer.A_log.numel(), "D": mixer.D.numel()}
    assert op_cost(scan_op(1, 1, 24, 5, skip=False)).params == 24 * 5  # no skip: A only


def test_scan_state_is_fp32_and_saved_inputs_are_the_activations():
    b, t, u, n = 2, 7, 3, 4
    op = scan_op(b, t, u, n)
    assert state_bytes(op) == b * u * n * 4  # h: B·U·N float32, whatever T
    assert [(s.name, s.elements) for s in op_cost(op).saved] == [
        ("x", b * t * u),
        ("dt", b * t * u),
        ("B", b * t * n),
        ("C", b * t * n),
    ]
    plain, step = op_cost(op).forward, op_cost(op.with_attrs(decode=True)).forward  # a decode step: ± the state
    assert (step.flops, step.bytes_read, step.bytes_written) == (
        plain.flops,
        plain.bytes_read + b * u * n * 4,
        plain.bytes_written + b * u * n * 4,
    )


# -- the depthwise causal convolution ------------------------------------------------------------


def conv_op(b, t, u, w, *, bias=True, trainable=True) -> Op:
    attrs = {
        "window": "w",
        "along": "t",
        **({"bias": "u"} if bias else {}),
        **({} if trainable else {"trainable": False}),
    }
    sizes = tuple((k, sympy.Integer(v)) for k, v in dict(b=b, t=t, u=u, w=w).items())
    return Op("conv", "b t u, w u -> b t u", sizes, "bf16", tuple(sorted(attrs.items())))


def causal_conv(x, weight, padded: bool):
    """``x`` (b, u, t) through a depthwise causal filter (u, 1, w): the ``t`` outputs a causal kernel
    computes (``padded=False``: pad the left only), or PyTorch's ``padding = w − 1`` on both sides then the
    first ``t`` outputs (transformers' reference path)."""
    u, w, t = weight.shape[0], weight.shape[-1], x.shape[-1]
    if padded:
        return F.conv1d(x, weight, padding=w - 1, groups=u)[..., :t]
    return F.conv1d(F.pad(x, (w - 1, 0)), weight, groups=u)


@pytest.mark.parametrize("b, t, u, w", [(2, 5, 6, 4), (3, 9, 4, 2)])
def test_conv_flops_relation_to_flop_counter(b, t, u, w):
    cost = op_cost(conv_op(b, t, u, w, bias=False))
    x = torch.randn(b, u, t, requires_grad=True)
    weight = torch.randn(u, 1, w, requires_grad=True)
    counts = {}
    for padded in (False, True):
        with FlopCounterMode(display=False) as fwd:
            y = causal_conv(x, weight, padded)
        with FlopCounterMode(display=False) as bwd:
            y.backward(torch.ones_like(y))
        counts[padded] = fwd.get_total_flops(), bwd.get_total_flops()
    # the rule: 2·B·T·U·W forward (T outputs of W multiply-adds), input and weight gradients as much
    assert (cost.forward.matmul_flops, cost.backward.matmul_flops) == (2 * b * t * u * w, 4 * b * t * u * w)
    # FlopCounterMode counts the weight gradient of a depthwise conv as if it were dense (groups ignored):
    # 2·B·T·U·W·U instead of 2·B·T·U·W
    assert counts[False] == (cost.forward.matmul_flops, cost.backward.matmul_flops + 2 * b * t * u * w * (u - 1))
    # the padded conv of transformers' reference path computes T + W − 1 outputs, W − 1 of them dropped
    pad = 2 * b * (w - 1) * u * w
    assert counts[True] == (counts[False][0] + pad, counts[False][1] + pad + pad * u)


def test_conv_computes_the_causal_filter_and_has_the_modules_parameters():
    b, t, u, w = 2, 6, 3, 4
    x, weight = torch.randn(b, u, t, dtype=torch.float64), torch.randn(u, 1, w, dtype=torch.float64)
    # y[b, t, u] = Σ_w x[b, t − W + 1 + w, u] · k[w, u], zeros before the first token
    by_hand = torch.stack(
        [sum(weight[:, 0, j] * x[:, :, i - w + 1 + j] for j in range(w) if i - w + 1 + j >= 0) for i in range(t)], -1
    )
    torch.testing.assert_close(causal_conv(x, weight, padded=False), by_hand)
    torch.testing.assert_close(causal_conv(x, weight, padded=True), by_hand)
    with torch.device("meta"):
        module = torch.nn.Conv1d(u, u, w, groups=u, padding=w - 1)
    assert op_cost(conv_op(b, t, u, w)).params == sum(p.numel() for p in module.parameters())  # U·W + U


def test_conv_state_and_frozen_weight():
    b, t, u, w = 2, 7, 3, 4
    op = conv_op(b, t, u, w)
    assert state_bytes(op) == b * w * u * 2  # the last W inputs in bf16 (transformers keeps conv_kernel)
    frozen = op_cost(conv_op(b, t, u, w, bias=False, trainable=False))
    assert frozen.backward.matmul_flops == 2 * b * t * u * w and frozen.saved == ()  # input gradient only


@pytest.mark.parametrize(
    "kind, pattern, attrs, needle",
    [
        ("conv", "b t u, w u -> b t u", {"window": "t", "along": "t"}, "window="),
        ("conv", "b t u, w u -> b t u", {"window": "w", "along": "s"}, "along="),
        ("conv", "b t u -> b t u", {"window": "w", "along": "t"}, "expected 'input, filter"),
        ("scan", "b t u, b t u, b t n, b t n -> b t u", {"state": "n", "along": "t"}, "expected 'x, Δ, B, C, A"),
        ("scan", "b t u, b t u, b t n, b t n, u n -> b t u", {"state": "u", "along": "t"}, "state="),
        ("scan", "b t u, b t u, b t n, b t n, u n -> b t u", {"state": "n", "along": "n"}, "along="),
        ("scan", "b t u, b t u, b t n, b t n, u n -> b t u", {"state": "n", "along": "t", "skip": "t"}, "skip="),
    ],
)
def test_malformed_ssm_ops_are_refused(kind, pattern, attrs, needle):
    sizes = tuple((a, sympy.Integer(2)) for a in "btuwns")
    with pytest.raises(CostModelError, match=needle):
        op_cost(Op(kind, pattern, sizes, "bf16", tuple(sorted(attrs.items()))))
