"""Autograd through the ropenorm operators: gradients of the float32 kernels against float64
torch autograd of the eager formulas on the same inputs (with the backward entries of the C++
suite's tolerance table: an allowance in fp32 ulps of the magnitude of the terms each gradient
is formed from, then 1 or 2 ulps), torch.autograd.gradcheck, torch.compile of forward + backward
(fullgraph, dynamic, no recompilation) and the nn modules in training.

The kernels take float32, float16 and bfloat16 only (a float64 tensor is a TypeError), so
gradcheck runs in float32 on tiny shapes, with a finite-difference step and tolerances sized for
float32 evaluation (eps=1e-3, atol=rtol=5e-3); the accuracy claim is the float64 comparison.
"""

import pytest

from support import (
    GRAD_TOL,
    TOL,
    assert_ulps,
    requires_cuda,
    rms_norm_ref,
    rope_pairs,
    rope_ref,
    torch,
    ulp,
)

import ropenorm

pytestmark = requires_cuda

DEV = "cuda"


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, device=DEV, dtype=torch.float32) * scale).to(dtype)


def _cache(positions, rotary_dim, dtype=torch.float32, **kw):
    return ropenorm.build_rope_cache(positions, rotary_dim=rotary_dim, dtype=dtype, device=DEV,
                                     **kw)


def _cs_from_cache(cache, pos):
    h = cache.shape[1] // 2
    rows = cache[pos.long()].double()
    return rows[..., :h], rows[..., h:]


def leaf64(t):
    return t.detach().double().requires_grad_()


DX_TOL = GRAD_TOL[("rms_norm_backward", "dx")]
DW_TOL = GRAD_TOL[("rms_norm_backward", "dw")]
DQ_TOL = GRAD_TOL[("qk_norm_rope_backward", "dq")]
DWQ_TOL = GRAD_TOL[("qk_norm_rope_backward", "dw")]


def f32_ulps_of(scale, ulps):
    """An absolute allowance: `ulps` fp32 ulps of the (float64) magnitudes `scale`."""
    return ulps * ulp(scale.float(), torch.float32)


def assert_grad(got, ref, allow, max_ulp, what):
    assert got is not None, f"{what}: no gradient"
    assert got.shape == ref.shape and got.dtype == torch.float32, what
    assert_ulps(got, ref, max_ulp, what, allow=allow)


def pair_norms(t64, style, rotary_dim):
    """|t| per element, with each rotated pair's channels replaced by the pair's norm."""
    ia, ib = rope_pairs(rotary_dim, style)
    ia, ib = ia.to(t64.device), ib.to(t64.device)
    out = t64.abs().clone()
    pair = torch.sqrt(t64[..., ia] ** 2 + t64[..., ib] ** 2)
    out[..., ia] = pair
    out[..., ib] = pair
    return out


def norm_grad_allowances(x64, w64, offset, dy64, ds64=None):
    """The C++ table's allowances for rms_norm_backward: dx: dx_scale_term fp32 ulps of
    S = r * (|g| + |xh| * (|c| + mean|g * xh|)) (+ |ds| for the fused add), c = mean(g * xh);
    dw: dw_scale_term + dw_per_sqrt_rows * sqrt(M) fp32 ulps of max|dw|."""
    with torch.no_grad():
        r = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
        xh = x64 * r
        g = dy64 * (w64 + offset) if w64 is not None else dy64
        c = (g * xh).mean(-1, keepdim=True)
        scale = r * (g.abs() + xh.abs() * (c.abs() + (g * xh).abs().mean(-1, keepdim=True)))
        if ds64 is not None:
            scale = scale + ds64.abs()
        dx_allow = f32_ulps_of(scale, GRAD_TOL[("rms_norm_backward", "dx_scale_term")])
        dw = (dy64 * xh).reshape(-1, x64.shape[-1]).sum(0)
        rows = dy64.numel() // x64.shape[-1]
        dw_ulps = (GRAD_TOL[("rms_norm_backward", "dw_scale_term")]
                   + GRAD_TOL[("rms_norm_backward", "dw_per_sqrt_rows")] * rows ** 0.5)
        dw_allow = f32_ulps_of(dw.abs().max().expand_as(dw), dw_ulps)
    return dx_allow, dw_allow


def qk_grad_allowances(x64, w64, offset, dout64, dw_ref, style, rotary_dim):
    """The C++ table's allowances for qk_norm_rope_backward: dx: dx_term fp32 ulps of
    S_j = r * (P_j |w_j + o| + |xh_j| M), P_j the norm of the gradient pair holding j and
    M = sum_i P_i |w_i + o| |xh_i| / D; dw: dw_term + dw_sum_term * sqrt(head vectors) fp32 ulps
    of max|dw|."""
    with torch.no_grad():
        p = pair_norms(dout64, style, rotary_dim)
        r = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
        xh = x64 * r
        wo = (w64 + offset).abs()
        m = (p * wo * xh.abs()).mean(-1, keepdim=True)
        scale = r * (p * wo + xh.abs() * m)
        dx_allow = f32_ulps_of(scale, GRAD_TOL[("qk_norm_rope_backward", "dx_term")])
        vectors = x64.numel() // x64.shape[-1]
        dw_ulps = (GRAD_TOL[("qk_norm_rope_backward", "dw_term")]
                   + GRAD_TOL[("qk_norm_rope_backward", "dw_sum_term")] * vectors ** 0.5)
        dw_allow = f32_ulps_of(dw_ref.abs().max().expand_as(dw_ref), dw_ulps)
    return dx_allow, dw_allow


# ------------------------------------------------------------------------------------------------
# Gradients against float64 autograd


@pytest.mark.parametrize("width,offset", [(64, 0.0), (769, 1.0), (4096, 0.0)])
def test_rms_norm_gradients_match_float64(width, offset):
    x = randn(2, 19, width, scale=2.0).requires_grad_()
    w = (randn(width, scale=0.3) + (0.0 if offset else 1.0)).requires_grad_()
    dy = randn(2, 19, width)
    ropenorm.rms_norm(x, w, 1e-6, weight_offset=offset).backward(dy)
    x64, w64 = leaf64(x), leaf64(w)
    rms_norm_ref(x64, w64, 1e-6, offset)[0].backward(dy.double())
    dx_allow, dw_allow = norm_grad_allowances(x64, w64, offset, dy.double())
    assert_grad(x.grad, x64.grad, dx_allow, DX_TOL, "rms_norm dx")
    assert_grad(w.grad, w64.grad, dw_allow, DW_TOL, "rms_norm dw")
    # Without a weight, and with the weight frozen (no dw computed).
    x.grad = None
    ropenorm.rms_norm(x, None, 1e-6).backward(dy)
    x64 = leaf64(x)
    rms_norm_ref(x64, None, 1e-6)[0].backward(dy.double())
    assert_grad(x.grad, x64.grad, norm_grad_allowances(x64, None, 0.0, dy.double())[0], DX_TOL,
                "rms_norm dx (no weight)")
    x.grad = None
    w_frozen = w.detach()
    ropenorm.rms_norm(x, w_frozen, 1e-6, weight_offset=offset).backward(dy)
    assert x.grad is not None and w_frozen.grad is None


@pytest.mark.parametrize("x_dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_gradients_match_float64(x_dtype):
    # residual in float32 (x's dtype or float32 is the contract); dx is rounded to x's dtype.
    N = 1024
    x = randn(37, N, dtype=x_dtype).requires_grad_()
    residual = randn(37, N, scale=2.0).requires_grad_()
    w = (randn(N, scale=0.3) + 1.0).requires_grad_()
    dy, ds = randn(37, N, dtype=x_dtype), randn(37, N)
    y, s = ropenorm.add_rms_norm(x, residual, w, 1e-6)
    # The gradient reaching s through the returned residual output adds in.
    torch.autograd.backward([y, s], [dy, ds])
    # float64 reference from the same rounded sum s.
    s64 = leaf64(s)
    w64 = leaf64(w)
    rms_norm_ref(s64, w64, 1e-6)[0].backward(dy.double())
    gs = s64.grad + ds.double()
    dx_allow, dw_allow = norm_grad_allowances(s64.detach(), w64, 0.0, dy.double(), ds.double())
    assert_grad(residual.grad, gs, dx_allow, DX_TOL, "add_rms_norm dresidual")
    assert_grad(w.grad, w64.grad, dw_allow, DW_TOL, "add_rms_norm dw")
    # dx and dresidual are each one rounding of the same fp32 gradient.
    assert x.grad.dtype == x_dtype
    assert torch.equal(x.grad, residual.grad.to(x_dtype))
    if x_dtype == residual.dtype:
        # The backward returned one tensor for both inputs; each leaf still owns its gradient.
        assert x.grad.data_ptr() != residual.grad.data_ptr()


def _qk_reference(q64, k64, wq64, wk64, eps, offset, c, s, style, R):
    def one(x, w):
        n, _ = rms_norm_ref(x, w, eps, offset)
        return rope_ref(n, c, s, style, R)

    return one(q64, wq64), one(k64, wk64)


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("head_dim,rot_frac,hq,hk", [(128, 1.0, 32, 8), (64, 0.5, 16, 1),
                                                    (80, 0.5, 4, 2), (256, 1.0, 8, 1)])
def test_qk_norm_rope_gradients_match_float64(style, head_dim, rot_frac, hq, hk):
    T, P, R = 23, 512, int(head_dim * rot_frac)
    # Views of a packed QKV buffer that requires grad: the gradient lands in its q and k parts.
    qkv = randn(T, (hq + 2 * hk) * head_dim, scale=2.0).requires_grad_()
    q = qkv[:, : hq * head_dim].view(T, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(T, hk, head_dim)
    wq = (randn(head_dim, scale=0.3) + 1.0).requires_grad_()
    wk = (randn(head_dim, scale=0.3) + 1.0).requires_grad_()
    pos = torch.randint(0, P, (T,), device=DEV)
    cache = _cache(P, R, rope_theta=1e6)
    dq_out, dk_out = randn(T, hq, head_dim), randn(T, hk, head_dim)
    q_out, k_out = ropenorm.qk_norm_rope(q, k, wq, wk, 1e-6, positions=pos, cos_sin_cache=cache,
                                         style=style, rotary_dim=R)
    torch.autograd.backward([q_out, k_out], [dq_out, dk_out])
    c, s = _cs_from_cache(cache, pos)
    q64, k64, wq64, wk64 = (leaf64(t) for t in (q, k, wq, wk))
    q_ref, k_ref = _qk_reference(q64, k64, wq64, wk64, 1e-6, 0.0, c, s, style, R)
    torch.autograd.backward([q_ref, k_ref], [dq_out.double(), dk_out.double()])
    dq = qkv.grad[:, : hq * head_dim].view(T, hq, head_dim)
    dk = qkv.grad[:, hq * head_dim : (hq + hk) * head_dim].view(T, hk, head_dim)
    assert torch.equal(qkv.grad[:, (hq + hk) * head_dim :],
                       torch.zeros_like(qkv.grad[:, (hq + hk) * head_dim :]))
    for name, got, ref, x64, w64, dout, wgot, wref in (
        ("q", dq, q64.grad, q64, wq64, dq_out, wq.grad, wq64.grad),
        ("k", dk, k64.grad, k64, wk64, dk_out, wk.grad, wk64.grad),
    ):
        dx_allow, dw_allow = qk_grad_allowances(x64.detach(), w64.detach(), 0.0, dout.double(),
                                                wref, style, R)
        assert_grad(got, ref, dx_allow, DQ_TOL, f"qk_norm_rope d{name}")
        assert_grad(wgot, wref, dw_allow, DWQ_TOL, f"qk_norm_rope d{name}_weight")


def test_qk_norm_rope_gradients_gemma_hf_cos_sin_and_one_output_used():
    B, S, hq, hk, D = 2, 9, 4, 2, 64
    q = randn(B, S, hq, D).requires_grad_()
    k = randn(B, S, hk, D).requires_grad_()
    wq = randn(D, scale=0.3).requires_grad_()
    wk = randn(D, scale=0.3).requires_grad_()
    cache = _cache(S, D)
    h = D // 2
    cos = torch.cat([cache[:, :h], cache[:, :h]], -1)[None]
    sin = torch.cat([cache[:, h:], cache[:, h:]], -1)[None]
    q_out, _ = ropenorm.qk_norm_rope(q, k, wq, wk, 1e-6, weight_offset=1.0, cos=cos, sin=sin)
    dq_out = randn(B, S, hq, D)
    q_out.backward(dq_out)  # k_out unused: its gradient is zero
    c, s = _cs_from_cache(cache, torch.arange(S, device=DEV).expand(B, S))
    q64, k64, wq64, wk64 = (leaf64(t) for t in (q, k, wq, wk))
    q_ref, _ = _qk_reference(q64, k64, wq64, wk64, 1e-6, 1.0, c, s, "neox", D)
    q_ref.backward(dq_out.double())
    dx_allow, dw_allow = qk_grad_allowances(q64.detach(), wq64.detach(), 1.0, dq_out.double(),
                                            wq64.grad, "neox", D)
    assert_grad(q.grad, q64.grad, dx_allow, DQ_TOL, "dq")
    assert_grad(wq.grad, wq64.grad, dw_allow, DWQ_TOL, "dq_weight")
    for t in (k, wk):
        assert t.grad is None or not t.grad.any()


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_rope_gradients_match_float64(style):
    T, P, D, R = 31, 256, 128, 64
    q = randn(T, 8, D).requires_grad_()
    k = randn(T, 2, D).requires_grad_()
    pos = torch.randint(0, P, (T,), device=DEV)
    cache = _cache(P, R)
    dq_out, dk_out = randn(T, 8, D), randn(T, 2, D)
    q_out, k_out = ropenorm.rope(q, k, positions=pos, cos_sin_cache=cache, style=style,
                                 rotary_dim=R)
    torch.autograd.backward([q_out, k_out], [dq_out, dk_out])
    c, s = _cs_from_cache(cache, pos)
    q64, k64 = leaf64(q), leaf64(k)
    torch.autograd.backward([rope_ref(q64, c, s, style, R), rope_ref(k64, c, s, style, R)],
                            [dq_out.double(), dk_out.double()])
    # A rotation's backward is the inverse rotation: rope's float32 tolerance.
    tol = TOL[("rope", "exact", torch.float32)]
    assert_ulps(q.grad, q64.grad, tol, "rope dq")
    assert_ulps(k.grad, k64.grad, tol, "rope dk")


# ------------------------------------------------------------------------------------------------
# gradcheck (float32, tiny shapes)

GC = dict(eps=1e-3, atol=5e-3, rtol=5e-3)


def test_gradcheck_rms_norm_and_add_rms_norm():
    x = randn(3, 8).requires_grad_()
    res = randn(3, 8).requires_grad_()
    w = (randn(8, scale=0.5) + 1.0).requires_grad_()
    torch.autograd.gradcheck(lambda a, b: ropenorm.rms_norm(a, b, 1e-6), (x, w),
                             fast_mode=False, **GC)
    torch.autograd.gradcheck(lambda a, b: ropenorm.rms_norm(a, b, 1e-6, weight_offset=1.0),
                             (x, w), fast_mode=False, **GC)
    torch.autograd.gradcheck(lambda a, r, b: ropenorm.add_rms_norm(a, r, b, 1e-6),
                             (x, res, w), fast_mode=False, **GC)


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_gradcheck_qk_norm_rope(style):
    q = randn(2, 2, 8).requires_grad_()
    k = randn(2, 1, 8).requires_grad_()
    wq = (randn(8, scale=0.5) + 1.0).requires_grad_()
    wk = (randn(8, scale=0.5) + 1.0).requires_grad_()
    cache = _cache(16, 6)
    pos = torch.tensor([5, 11], device=DEV)
    torch.autograd.gradcheck(
        lambda a, b, c, d: ropenorm.qk_norm_rope(a, b, c, d, 1e-6, positions=pos,
                                                 cos_sin_cache=cache, style=style, rotary_dim=6),
        (q, k, wq, wk), fast_mode=False, **GC)


# ------------------------------------------------------------------------------------------------
# torch.compile of an attention prologue, forward and forward + backward


HQ, HK, D, HIDDEN = 4, 2, 64, 256


def _prologue(x, residual, w_norm, w_qkv, wq, wk, pos, cache):
    y, s = ropenorm.add_rms_norm(x, residual, w_norm, 1e-6)
    qkv = y @ w_qkv  # [T, (HQ + 2 HK) * D]; q and k are strided views of it
    T = qkv.shape[0]
    q = qkv[:, : HQ * D].view(T, HQ, D)
    k = qkv[:, HQ * D : (HQ + HK) * D].view(T, HK, D)
    v = qkv[:, (HQ + HK) * D :].view(T, HK, D)
    q, k = ropenorm.qk_norm_rope(q, k, wq, wk, 1e-6, positions=pos, cos_sin_cache=cache)
    return q, k, v, s


def _prologue_inputs(T, grad, dtype=torch.float32):
    params = (randn(HIDDEN, dtype=dtype) + 1.0, randn(HIDDEN, (HQ + 2 * HK) * D, dtype=dtype,
                                                     scale=HIDDEN ** -0.5),
              randn(D, dtype=dtype) + 1.0, randn(D, dtype=dtype) + 1.0)
    params = tuple(p.requires_grad_(grad) for p in params)
    x = randn(T, HIDDEN, dtype=dtype).requires_grad_(grad)
    residual = randn(T, HIDDEN, dtype=dtype).requires_grad_(grad)
    return (x, residual) + params + (torch.randint(0, 128, (T,), device=DEV), _cache(128, D))


def _run(fn, args, grad):
    outs = fn(*args)
    if not grad:
        return outs
    loss = sum((o.float() * (i + 1)).sum() for i, o in enumerate(outs))
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    return tuple(outs) + torch.autograd.grad(loss, leaves)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "forward_backward"])
def test_compile_prologue_fullgraph_dynamic_no_recompile(grad):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(_prologue, backend=counter, fullgraph=True, dynamic=True)
    # Dynamo logs why it recompiles (the failed guard) to the captured output, which pytest
    # prints when the assertion below fails.
    torch._logging.set_logs(recompiles=True)
    frames_after_first = None
    try:
        # Token counts unequal to the block's other sizes (2, 4, 64, 128, 256): torch's duck
        # shaping gives equal sizes one symbol, so T == D would be torch's own specialisation.
        for T in (7, 19, 48):
            args = _prologue_inputs(T, grad)
            got, want = _run(fn, args, grad), _run(_prologue, args, grad)
            for a, b in zip(got[:4], want[:4]):
                assert torch.equal(a, b)
            for a, b in zip(got[4:], want[4:]):  # gradients: the joint graph may reorder sums
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            if frames_after_first is None:
                frames_after_first = counter.frame_count
    finally:
        torch._logging.set_logs()
    # The first call may hand the backend more than one graph: with float arguments (eps,
    # weight_offset, attention_scaling) Dynamo restarts its analysis once to turn them into
    # tensors, and the abandoned attempt reaches the counter as an empty graph. A recompile is a
    # further graph for a later T.
    assert frames_after_first >= 1
    assert counter.frame_count == frames_after_first, (
        f"recompiled: {counter.frame_count - frames_after_first} more graphs after the first T")


def test_compile_prologue_inductor_forward_backward_matches_eager():
    torch._dynamo.reset()
    fn = torch.compile(_prologue, fullgraph=True, dynamic=True)
    for T in (5, 33):
        args = _prologue_inputs(T, True, dtype=torch.bfloat16)
        for got, want in zip(_run(fn, args, True), _run(_prologue, args, True)):
            torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)


# ------------------------------------------------------------------------------------------------
# nn modules in training run the kernels


def test_norm_modules_train_with_the_kernels():
    mod = ropenorm.RMSNorm(256, eps=1e-6, device=DEV)
    ref = torch.nn.RMSNorm(256, eps=1e-6, device=DEV)
    with torch.no_grad():
        mod.weight.copy_(randn(256, scale=0.1) + 1.0)
        ref.weight.copy_(mod.weight)
    x = randn(3, 5, 256).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    dy = randn(3, 5, 256)
    mod(x).backward(dy)
    ref(x_ref).backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mod.weight.grad, ref.weight.grad, rtol=1e-5, atol=1e-4)
    # The kernel ran (not torch's function): its backward node is ropenorm's.
    assert "ropenorm_rms_norm" in type(mod(x).grad_fn).__name__

    fused = ropenorm.FusedAddRMSNorm(128, eps=1e-6, device=DEV, inplace=True)
    xa, res = randn(9, 128).requires_grad_(), randn(9, 128).requires_grad_()
    res_before = res.detach().clone()
    y, s = fused(xa, res)  # a gradient is needed: s is a new tensor, residual untouched
    assert torch.equal(res.detach(), res_before) and torch.equal(s, res_before + xa.detach())
    (y.sum() + s.sum()).backward()
    assert xa.grad is not None and res.grad is not None and fused.weight.grad is not None
    torch.testing.assert_close(xa.grad, res.grad, rtol=0, atol=0)
