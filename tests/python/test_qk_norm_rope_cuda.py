"""Fused QK-norm + RoPE through torch: values against a float64 reference (per-head RMSNorm,
then RoPE; in output ulps with the C++ suite's tolerances), in place, opcheck, CUDA graphs, the
nn module and the device of the call. Fresh random data on every run."""

import pytest

from support import (
    TOL,
    assert_ulps,
    qk_norm_rope_ref,
    requires_cuda,
    torch,
)

import ropenorm

pytestmark = requires_cuda

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
DEV = "cuda"


def randn(*shape, dtype=torch.float32, scale=1.0, device=DEV):
    return (torch.randn(*shape, device=device, dtype=torch.float32) * scale).to(dtype)


def _cache(positions, rotary_dim, dtype=torch.float32, **kw):
    return ropenorm.build_rope_cache(positions, rotary_dim=rotary_dim, dtype=dtype, device=DEV,
                                     **kw)


def _cs_from_cache(cache, pos):
    h = cache.shape[1] // 2
    rows = cache[pos.long()].double()
    return rows[..., :h], rows[..., h:]


def _check(q_out, k_out, q_rstd, k_rstd, q, k, wq, wk, eps, offset, c, s, style, rotary_dim):
    dtype = q.dtype
    tol = TOL[("qk_norm_rope", "exact", dtype)]
    tol_rstd = TOL[("qk_norm_rope_rstd", "exact", torch.float32)]
    for name, got, got_rstd, x, w in (("q", q_out, q_rstd, q, wq), ("k", k_out, k_rstd, k, wk)):
        ref, rstd_ref, _, allow = qk_norm_rope_ref(x, w, eps, offset, c, s, style, rotary_dim)
        assert got.shape == x.shape and got.dtype == dtype
        assert_ulps(got, ref, tol, f"qk_norm_rope {name}_out {dtype} {style}", allow=allow)
        if got_rstd is not None:
            assert got_rstd.shape == x.shape[:-1] and got_rstd.dtype == torch.float32
            assert_ulps(got_rstd, rstd_ref, tol_rstd, f"qk_norm_rope {name}_rstd")


# (head_dim, rotary fraction, q heads, kv heads)
GEOMETRIES = [
    (128, 1.0, 32, 8),
    (64, 0.5, 16, 1),
    (256, 1.0, 16, 1),
    (80, 0.5, 32, 8),
    (128, 0.25, 8, 2),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("head_dim,rot_frac,hq,hk", GEOMETRIES)
def test_qk_norm_rope_packed_qkv_views(dtype, style, head_dim, rot_frac, hq, hk):
    T, P = 29, 4096
    R = int(head_dim * rot_frac)
    # q and k are views of one packed [T, (hq + 2 hk) * D] QKV buffer: read in place, no copy.
    qkv = randn(T, (hq + 2 * hk) * head_dim, dtype=dtype, scale=2.0)
    q = qkv[:, : hq * head_dim].view(T, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(T, hk, head_dim)
    wq = randn(head_dim, dtype=dtype, scale=0.5) + 1.0
    wk = randn(head_dim, dtype=dtype, scale=0.5) + 1.0
    pos = torch.randint(0, P, (T,), device=DEV, dtype=torch.int64)  # random, non-monotone
    cache = _cache(P, R, rope_theta=1e6)
    q_out, k_out, q_rstd, k_rstd = ropenorm.qk_norm_rope(
        q, k, wq, wk, 1e-6, positions=pos, cos_sin_cache=cache, style=style, rotary_dim=R,
        return_rstd=True)
    c, s = _cs_from_cache(cache, pos)
    _check(q_out, k_out, q_rstd, k_rstd, q, k, wq, wk, 1e-6, 0.0, c, s, style, R)
    # In place, on the packed buffer's views: the same bits, and the v part untouched.
    v_before = qkv[:, (hq + hk) * head_dim :].clone()
    q2, k2, q_rstd2, k_rstd2 = ropenorm.qk_norm_rope(
        q, k, wq, wk, 1e-6, positions=pos, cos_sin_cache=cache, style=style, rotary_dim=R,
        inplace=True, return_rstd=True)
    assert q2 is q and k2 is k
    assert torch.equal(q, q_out) and torch.equal(k, k_out)
    assert torch.equal(q_rstd2, q_rstd) and torch.equal(k_rstd2, k_rstd)
    assert torch.equal(qkv[:, (hq + hk) * head_dim :], v_before)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_qk_norm_rope_hf_layout_gemma_and_mixed_weight_dtype(dtype):
    # Hugging Face: q_proj(x).view(B, S, H, D) with cos/sin position_embeddings [B, S, D]
    # (here [1, S, D], broadcast over B); Gemma's (1 + w) with float32 weights.
    B, S, hq, hk, D = 2, 11, 8, 2, 64
    q = randn(B, S, hq, D, dtype=dtype)
    k = randn(B, S, hk, D, dtype=dtype)
    wq, wk = randn(D, scale=0.3), randn(D, scale=0.3)
    cache = _cache(64, D)
    pos = torch.arange(S, device=DEV)
    h = D // 2
    cos = torch.cat([cache[:, :h], cache[:, :h]], -1)[pos][None]
    sin = torch.cat([cache[:, h:], cache[:, h:]], -1)[pos][None]
    q_out, k_out = ropenorm.qk_norm_rope(q, k, wq, wk, 1e-5, weight_offset=1.0, cos=cos, sin=sin)
    c, s = _cs_from_cache(cache, pos.expand(B, S))
    _check(q_out, k_out, None, None, q, k, wq, wk, 1e-5, 1.0, c, s, "neox", D)
    # The same rotation from inv_freq computed in the kernel, with explicit int32 positions:
    # compared with the cache result it is the same up to the in-kernel cos/sin's error.
    inv, scaling = ropenorm.rope_inv_freq(rotary_dim=D, device=DEV)
    q3, _ = ropenorm.qk_norm_rope(q, k, wq, wk, 1e-5, weight_offset=1.0,
                                  positions=pos.expand(B, S).to(torch.int32), inv_freq=inv,
                                  attention_scaling=scaling)
    torch.testing.assert_close(q3.float(), q_out.float(), rtol=2e-2, atol=2e-2)


def test_qk_norm_rope_zero_tokens_and_errors():
    q = randn(0, 4, 64, dtype=torch.bfloat16)
    k = randn(0, 2, 64, dtype=torch.bfloat16)
    w = randn(64)
    cache = _cache(16, 64)
    q_out, k_out, q_rstd, k_rstd = ropenorm.qk_norm_rope(q, k, w, w, cos_sin_cache=cache,
                                                         return_rstd=True)
    assert q_out.shape == (0, 4, 64) and k_rstd.shape == (0, 2)
    q = randn(3, 4, 64, dtype=torch.bfloat16)
    k = randn(3, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="'q_weight'"):
        ropenorm.qk_norm_rope(q, k, randn(63), w, cos_sin_cache=cache)
    with pytest.raises(ValueError, match="'k_weight'"):
        ropenorm.qk_norm_rope(q, k, w, randn(32), cos_sin_cache=cache)
    with pytest.raises(TypeError, match="'q'"):
        ropenorm.qk_norm_rope(q.double(), k, w, w, cos_sin_cache=cache)
    with pytest.raises(ValueError, match="'k'"):
        ropenorm.qk_norm_rope(q, randn(4, 2, 64, dtype=torch.bfloat16), w, w,
                              cos_sin_cache=cache)
    with pytest.raises(ValueError, match="eps"):
        ropenorm.qk_norm_rope(q, k, w, w, 1.0, cos_sin_cache=cache)
    with pytest.raises(ValueError, match="cos/sin source"):
        ropenorm.qk_norm_rope(q, k, w, w)
    with pytest.raises(ValueError, match="position"):
        ropenorm.qk_norm_rope(q, k, w, w, positions=torch.tensor([0, 16, 1], device=DEV),
                              cos_sin_cache=cache, check_positions=True)
    # Nothing was written on error.
    before_q, before_k = q.clone(), k.clone()
    with pytest.raises(ValueError):
        ropenorm.qk_norm_rope(q, k, w, w, cos_sin_cache=cache, rotary_dim=70, inplace=True)
    assert torch.equal(q, before_q) and torch.equal(k, before_k)


# ------------------------------------------------------------------------------------------------
# opcheck


def _qk_kwargs(cache, pos, style=0, rotary_dim=0):
    return dict(positions=pos, cos_sin_kind=0, cos_sin_cache=cache, style=style,
                rotary_dim=rotary_dim)


def _opcheck_cases():
    T, hq, hk, D = 6, 4, 2, 64
    qkv = randn(T, (hq + 2 * hk) * D, dtype=torch.bfloat16)
    q = qkv[:, : hq * D].view(T, hq, D)
    k = qkv[:, hq * D : (hq + hk) * D].view(T, hk, D)
    wq, wk = randn(D, dtype=torch.bfloat16), randn(D)
    cache = _cache(32, 32)
    pos = torch.randint(0, 32, (T,), device=DEV)
    kw = _qk_kwargs(cache, pos, style=1, rotary_dim=32)
    ops = torch.ops.ropenorm
    qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    wqg, wkg = wq.detach().clone().requires_grad_(), wk.detach().clone().requires_grad_()
    _, _, q_rstd, k_rstd = ops.qk_norm_rope(q, k, wq, wk, 1e-6, 0.0, **kw)
    dq_out, dk_out = randn(T, hq, D, dtype=torch.bfloat16), randn(T, hk, D, dtype=torch.bfloat16)
    x, w = randn(5, 3, 96), randn(96, dtype=torch.bfloat16)
    _, rstd = ops.rms_norm(x, w, 1e-6, 0.0, 0)
    return [
        ("qk_norm_rope", ops.qk_norm_rope.default, (q, k, wq, wk, 1e-6, 0.0), kw),
        ("qk_norm_rope_grad", ops.qk_norm_rope.default, (qg, kg, wqg, wkg, 1e-5, 1.0), kw),
        ("qk_norm_rope_", ops.qk_norm_rope_.default,
         (q.detach().clone(), k.detach().clone(), wq, wk, 1e-6, 0.0), kw),
        ("qk_norm_rope_inv_freq", ops.qk_norm_rope.default, (qg, kg, wqg, wkg),
         dict(cos_sin_kind=3, inv_freq=ropenorm.rope_inv_freq(rotary_dim=64, device=DEV)[0],
              offset=2)),
        ("qk_norm_rope_backward", ops.qk_norm_rope_backward.default,
         (dq_out, dk_out, q, k, wq, wk, q_rstd, k_rstd, 1e-6, 0.0), kw),
        ("qk_norm_rope_backward_no_rstd_no_dw", ops.qk_norm_rope_backward.default,
         (dq_out, dk_out, q, k, wq, wk, None, None, 1e-6, 0.0),
         dict(kw, weight_grad=False)),
        ("rms_norm_backward", ops.rms_norm_backward.default,
         (randn(5, 3, 96), x, w, rstd, 1e-6, 0.0, True)),
        ("rms_norm_backward_no_weight", ops.rms_norm_backward.default,
         (randn(5, 3, 96), x, None, None, 1e-5, 0.0, True)),
        ("add_rms_norm_backward", ops.add_rms_norm_backward.default,
         (randn(5, 3, 96, dtype=torch.bfloat16), randn(5, 3, 96), x, w, None, 1e-6, 1.0, True)),
        ("add_rms_norm_backward_no_ds", ops.add_rms_norm_backward.default,
         (randn(5, 3, 96), None, x, w, rstd, 1e-6, 0.0, False)),
        ("add_rms_norm_backward_no_dresidual", ops.add_rms_norm_backward.default,
         (randn(5, 3, 96), randn(5, 3, 96), x, w, None, 1e-6, 0.0, True, False)),
    ]


@pytest.mark.parametrize("case", range(11))
def test_opcheck(case):
    entry = _opcheck_cases()[case]
    name, op, args = entry[0], entry[1], entry[2]
    kwargs = entry[3] if len(entry) > 3 else {}
    torch.library.opcheck(op, args, kwargs)


# ------------------------------------------------------------------------------------------------
# CUDA graphs, streams, devices


def _qk_inputs(T, dtype=torch.bfloat16):
    hq, hk, D = 8, 2, 128
    qkv = randn(T, (hq + 2 * hk) * D, dtype=dtype)
    return (qkv, randn(D, dtype=dtype), randn(D, dtype=dtype),
            torch.randint(0, 256, (T,), device=DEV), _cache(256, 128))


def _qk_block(qkv, wq, wk, pos, cache):
    T = qkv.shape[0]
    q = qkv[:, : 8 * 128].view(T, 8, 128)
    k = qkv[:, 8 * 128 : 10 * 128].view(T, 2, 128)
    return ropenorm.qk_norm_rope(q, k, wq, wk, 1e-6, positions=pos, cos_sin_cache=cache,
                                 return_rstd=True)


def test_cuda_graph_capture_and_replay_with_new_inputs():
    static = _qk_inputs(24)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _qk_block(*static)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _qk_block(*static)
    for _ in range(2):
        fresh = _qk_inputs(24)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(static_out, _qk_block(*fresh)):
            assert torch.equal(got, want)


def test_runs_on_the_current_stream():
    args = _qk_inputs(64)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        got = _qk_block(*args)
    stream.synchronize()
    for a, b in zip(got, _qk_block(*args)):
        assert torch.equal(a, b)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (tensors on one, "
                    "current device set to the other)")
def test_tensors_on_a_device_other_than_the_current_one():
    qkv, wq, wk, pos, cache = (t.to("cuda:1") for t in _qk_inputs(16))
    with torch.cuda.device(0):
        got = _qk_block(qkv, wq, wk, pos, cache)
        qkv_g = qkv.detach().clone().requires_grad_()
        q_out, k_out, _, _ = _qk_block(qkv_g, wq, wk, pos, cache)
        (q_out.float().sum() + k_out.float().sum()).backward()
    assert all(t.device == qkv.device for t in got) and qkv_g.grad.device == qkv.device
    want = _qk_block(*(t.to("cuda:0") for t in (qkv, wq, wk, pos, cache)))
    for a, b in zip(got, want):
        assert torch.equal(a.cpu(), b.cpu())
    with torch.cuda.device(0), pytest.raises(ValueError, match="cache"):
        _qk_block(qkv, wq, wk, pos, cache.to("cuda:0"))


# ------------------------------------------------------------------------------------------------
# nn.QKNormRoPE


def test_qk_norm_rope_module():
    D = 64
    mod = ropenorm.nn.QKNormRoPE(D, eps=1e-6, device=DEV, max_position_embeddings=128,
                                 rope_theta=1e6)
    assert sorted(dict(mod.named_parameters())) == ["k_weight", "q_weight"]
    assert list(mod.state_dict()) == ["q_weight", "k_weight"]  # the cache is not saved
    assert torch.equal(mod.q_weight, torch.ones(D, device=DEV))
    with torch.no_grad():
        mod.q_weight.copy_(randn(D))
        mod.k_weight.copy_(randn(D))
    q, k = randn(9, 4, D), randn(9, 2, D)
    pos = torch.randint(0, 128, (9,), device=DEV)
    got = mod(q, k, positions=pos)
    want = ropenorm.qk_norm_rope(q, k, mod.q_weight, mod.k_weight, 1e-6, positions=pos,
                                 cos_sin_cache=mod.cos_sin_cache)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # Gemma: (1 + w), weights start at 0.
    gemma = ropenorm.nn.QKNormRoPE(D, weight_offset=1.0, device=DEV)
    assert torch.equal(gemma.k_weight, torch.zeros(D, device=DEV))
    cache = mod.cos_sin_cache
    got = gemma(q, k, positions=pos, cos_sin_cache=cache)
    want = ropenorm.qk_norm_rope(q, k, torch.ones(D, device=DEV), torch.ones(D, device=DEV),
                                 positions=pos, cos_sin_cache=cache)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # Training through the module reaches both weights.
    q.requires_grad_()
    out_q, out_k = mod(q, k, positions=pos)
    (out_q.sum() + out_k.sum()).backward()
    assert q.grad is not None and mod.q_weight.grad is not None and mod.k_weight.grad is not None


def test_qk_norm_rope_module_loads_hugging_face_norms():
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3",
                                reason="transformers (Qwen3) is not importable")
    D = 128
    q_norm = qwen3.Qwen3RMSNorm(D, eps=1e-6).to(DEV)
    k_norm = qwen3.Qwen3RMSNorm(D, eps=1e-6).to(DEV)
    with torch.no_grad():
        q_norm.weight.copy_(randn(D, scale=0.2) + 1.0)
        k_norm.weight.copy_(randn(D, scale=0.2) + 1.0)
    mod = ropenorm.nn.QKNormRoPE(D, eps=1e-6, device=DEV).load_hf_norms(q_norm, k_norm)
    assert torch.equal(mod.q_weight, q_norm.weight) and torch.equal(mod.k_weight, k_norm.weight)
    # Hugging Face's order: norm per head on [B, S, H, D], then rotate with position_embeddings.
    B, S = 2, 7
    q, k = randn(B, S, 4, D), randn(B, S, 2, D)
    cache = _cache(S, D)
    h = D // 2
    cos = torch.cat([cache[:, :h], cache[:, :h]], -1)[None].expand(B, S, D)
    sin = torch.cat([cache[:, h:], cache[:, h:]], -1)[None].expand(B, S, D)
    q_out, k_out = mod(q, k, cos=cos, sin=sin)
    with torch.no_grad():
        q_hf, k_hf = qwen3.apply_rotary_pos_emb(q_norm(q).transpose(1, 2),
                                                 k_norm(k).transpose(1, 2), cos, sin)
    torch.testing.assert_close(q_out, q_hf.transpose(1, 2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_out, k_hf.transpose(1, 2), rtol=1e-5, atol=1e-5)

