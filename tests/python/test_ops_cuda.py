"""The CUDA operators through torch: numerics against float64 references (in output ulps, the
C++ suite's tolerances), torch.library.opcheck, torch.compile, CUDA graphs, autograd, the nn
modules and the errors. Fresh random data on every run."""

import pytest

from support import (
    ROPE_INV_FREQ_TERM_F32_ULPS,
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

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
DEV = "cuda"


def randn(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, device=DEV, dtype=torch.float32) * scale).to(dtype)


# ------------------------------------------------------------------------------------------------
# RMSNorm numerics


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width", [(1, 1), (7, 70), (19, 4096), (3, 8199)])
def test_rms_norm_exact(dtype, rows, width):
    x = randn(rows, width, dtype=dtype, scale=3.0)
    w = randn(width, dtype=dtype)
    y, rstd = ropenorm.rms_norm(x, w, 1e-6, return_rstd=True)
    assert y.dtype == dtype and y.shape == x.shape and rstd.shape == (rows,)
    y_ref, rstd_ref = rms_norm_ref(x, w, 1e-6)
    assert_ulps(y, y_ref, TOL[("rms_norm", "exact", dtype)], f"rms_norm y {dtype}")
    assert_ulps(rstd, rstd_ref, TOL[("rstd", "exact", torch.float32)], "rms_norm rstd")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_hf_llama_gemma_and_strided(dtype):
    base = randn(2, 5, 3 * 256, dtype=dtype)
    x = base[..., 256 : 2 * 256]  # a strided view: x[:, :, N:2N] of a wider buffer
    w = randn(256, dtype=torch.float32)  # weight dtype differs from x's
    y = ropenorm.rms_norm(x, w, 1e-5, rounding="hf_llama")
    y_ref, _ = rms_norm_ref(x, w, 1e-5, rounding="hf_llama")
    assert_ulps(y, y_ref, TOL[("rms_norm", "hf_llama", dtype)], f"hf_llama {dtype}")
    y = ropenorm.rms_norm(x, w, 1e-5, weight_offset=1.0)
    y_ref, _ = rms_norm_ref(x, w, 1e-5, weight_offset=1.0)
    assert_ulps(y, y_ref, TOL[("rms_norm", "exact", dtype)], f"gemma {dtype}")
    y = ropenorm.rms_norm(x, None, 1e-2)
    y_ref, _ = rms_norm_ref(x, None, 1e-2)
    assert_ulps(y, y_ref, TOL[("rms_norm", "exact", dtype)], f"no weight {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("res_dtype", ["same", torch.float32])
def test_add_rms_norm_out_of_place_and_in_place(dtype, res_dtype):
    res_dtype = dtype if res_dtype == "same" else res_dtype
    x = randn(33, 1024, dtype=dtype)
    residual = randn(33, 1024, dtype=res_dtype, scale=2.0)
    w = randn(1024, dtype=dtype)
    s_ref = (residual.float() + x.float()).to(res_dtype)  # fp32 add, one rounding
    y, s = ropenorm.add_rms_norm(x, residual, w, 1e-6)
    assert torch.equal(s, s_ref), "residual_out must be the bitwise unfused add"
    y_ref, _ = rms_norm_ref(s_ref, w, 1e-6)
    assert_ulps(y, y_ref, TOL[("rms_norm", "exact", dtype)], "add_rms_norm y")
    res_copy = residual.clone()
    y2, s2 = ropenorm.add_rms_norm(x, res_copy, w, 1e-6, inplace=True)
    assert s2 is res_copy and torch.equal(res_copy, s_ref) and torch.equal(y2, y)


def test_zero_rows_is_a_no_op():
    x = torch.empty(0, 64, device=DEV, dtype=torch.bfloat16)
    y, rstd = ropenorm.rms_norm(x, None, return_rstd=True)
    assert y.shape == (0, 64) and rstd.shape == (0,)


# ------------------------------------------------------------------------------------------------
# RoPE numerics


def _cache(positions, rotary_dim, dtype=torch.float32, **kw):
    return ropenorm.build_rope_cache(positions, rotary_dim=rotary_dim, dtype=dtype, device=DEV,
                                     **kw)


def _cs_from_cache(cache, pos):
    h = cache.shape[1] // 2
    rows = cache[pos.long()].double()
    return rows[..., :h], rows[..., h:]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("head_dim,rot_frac", [(128, 1.0), (80, 0.5), (64, 0.25)])
def test_rope_cache_positions_packed_qkv(dtype, style, head_dim, rot_frac):
    T, hq, hk, P = 37, 8, 2, 4096
    R = int(head_dim * rot_frac)
    qkv = randn(T, (hq + 2 * hk) * head_dim, dtype=dtype)
    q = qkv[:, : hq * head_dim].view(T, hq, head_dim)
    k = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(T, hk, head_dim)
    pos = torch.randint(0, P, (T,), device=DEV, dtype=torch.int64)  # random, non-monotone
    cache = _cache(P, R, rope_theta=500000.0)
    q_out, k_out = ropenorm.rope(q, k, positions=pos, cos_sin_cache=cache, style=style,
                                 rotary_dim=R)
    c, s = _cs_from_cache(cache, pos)
    tol = TOL[("rope", "exact", dtype)]
    assert_ulps(q_out, rope_ref(q, c, s, style, R), tol, "rope q")
    assert_ulps(k_out, rope_ref(k, c, s, style, R), tol, "rope k")
    assert torch.equal(q_out[..., R:], q[..., R:]), "pass-through channels must be copied"
    # In place, on the packed buffer's views, gives the same bits.
    ropenorm.rope(q, k, positions=pos, cos_sin_cache=cache, style=style, rotary_dim=R,
                  inplace=True)
    assert torch.equal(q, q_out) and torch.equal(k, k_out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rope_every_cos_sin_source(dtype):
    B, S, H, D = 2, 9, 4, 64
    q = randn(B, S, H, D, dtype=dtype)
    pos = torch.randint(0, 64, (B, S), device=DEV, dtype=torch.int32)
    cache = _cache(64, D, dtype=torch.float32)
    c, s = _cs_from_cache(cache, pos)
    ref = rope_ref(q, c, s, "neox", D)
    tol = TOL[("rope", "exact", dtype)]
    assert_ulps(ropenorm.rope(q, positions=pos, cos_sin_cache=cache), ref, tol, "cache")
    # Hugging Face tables [P, D] (duplicated halves) indexed by position.
    h = D // 2
    cos = torch.cat([cache[:, :h], cache[:, :h]], -1)
    sin = torch.cat([cache[:, h:], cache[:, h:]], -1)
    assert_ulps(ropenorm.rope(q, positions=pos, cos=cos, sin=sin), ref, tol, "hf_cos_sin")
    # Hugging Face position_embeddings, gathered per token [B, S, D].
    assert_ulps(ropenorm.rope(q, cos=cos[pos.long()], sin=sin[pos.long()]), ref, tol,
                "hf_cos_sin_gathered")
    # Implicit positions: arange(S) + offset + seq_offsets[b].
    seq_off = torch.tensor([3, 11], device=DEV, dtype=torch.int64)
    implicit = torch.arange(S, device=DEV)[None, :] + 5 + seq_off[:, None]
    c2, s2 = _cs_from_cache(cache, implicit)
    assert_ulps(ropenorm.rope(q, cos_sin_cache=cache, offset=5, seq_offsets=seq_off),
                rope_ref(q, c2, s2, "neox", D), tol, "implicit positions")
    # In the kernel from inv_freq (fp32 angle, sincosf): allowance for its cos/sin error.
    inv, scaling = ropenorm.rope_inv_freq(rope_type="yarn", rotary_dim=D, factor=4.0,
                                          original_max_position_embeddings=16, device=DEV)
    angle = pos.float()[..., None] * inv  # fl32(fl32(p) * inv_freq), as the kernel forms it
    c3, s3 = torch.cos(angle.double()) * scaling, torch.sin(angle.double()) * scaling
    got = ropenorm.rope(q, positions=pos, inv_freq=inv, attention_scaling=scaling)
    ia, ib = rope_pairs(D, "neox")
    pair = torch.sqrt(q.double()[..., ia] ** 2 + q.double()[..., ib] ** 2) * abs(scaling)
    allow = ROPE_INV_FREQ_TERM_F32_ULPS * ulp(pair.float(), torch.float32)
    allow = torch.cat([allow, allow], -1)
    assert_ulps(got, rope_ref(q, c3, s3, "neox", D), tol, "inv_freq", allow=allow)


def test_rope_check_positions_and_inverse():
    q = randn(5, 2, 32)
    cache = _cache(16, 32)
    bad = torch.tensor([0, 1, 2, 16, 3], device=DEV)
    with pytest.raises(ValueError, match="position"):
        ropenorm.rope(q, positions=bad, cos_sin_cache=cache, check_positions=True)
    pos = torch.tensor([0, 1, 2, 15, 3], device=DEV)
    fwd = ropenorm.rope(q, positions=pos, cos_sin_cache=cache)
    back = ropenorm.rope(fwd, positions=pos, cos_sin_cache=cache, inverse=True)
    torch.testing.assert_close(back, q, rtol=2e-6, atol=2e-6)


# ------------------------------------------------------------------------------------------------
# torch.library.opcheck on every operator


def _rope_kwargs(cache, pos):
    return dict(positions=pos, cos_sin_kind=0, cos_sin_cache=cache, style=0, rotary_dim=0)


def _opcheck_cases():
    x = randn(6, 256, dtype=torch.bfloat16)
    res = randn(6, 256, dtype=torch.bfloat16)
    w = randn(256, dtype=torch.bfloat16)
    q = randn(6, 4, 64, dtype=torch.bfloat16).requires_grad_()
    k = randn(6, 2, 64, dtype=torch.bfloat16).requires_grad_()
    cache = _cache(32, 64)
    pos = torch.randint(0, 32, (6,), device=DEV)
    ops = torch.ops.ropenorm
    return [
        ("rms_norm", ops.rms_norm.default, (x, w, 1e-6, 0.0, 0)),
        ("rms_norm_no_weight", ops.rms_norm.default, (x, None, 1e-5, 0.0, 1)),
        ("add_rms_norm", ops.add_rms_norm.default, (x, res, w, 1e-6, 1.0, 0)),
        ("add_rms_norm_", ops.add_rms_norm_.default, (x, res.clone(), w, 1e-6, 0.0, 0)),
        ("rope", ops.rope.default, (q,), _rope_kwargs(cache, pos)),
        ("rope_qk", ops.rope_qk.default, (q, k), _rope_kwargs(cache, pos)),
        ("rope_", ops.rope_.default, (q.detach().clone(),), _rope_kwargs(cache, pos)),
        ("rope_qk_", ops.rope_qk_.default, (q.detach().clone(), k.detach().clone()),
         _rope_kwargs(cache, pos)),
        ("rope_inv_freq_source", ops.rope.default, (q,),
         dict(cos_sin_kind=3, inv_freq=ropenorm.rope_inv_freq(rotary_dim=64, device=DEV)[0],
              offset=3, style=1)),
    ]


@pytest.mark.parametrize("case", range(9))
def test_opcheck(case):
    entry = _opcheck_cases()[case]
    name, op, args = entry[0], entry[1], entry[2]
    kwargs = entry[3] if len(entry) > 3 else {}
    torch.library.opcheck(op, args, kwargs)


# ------------------------------------------------------------------------------------------------
# torch.compile and CUDA graphs


def _block(x, residual, w, q, k, pos, cache):
    y, s = ropenorm.add_rms_norm(x, residual, w, 1e-6)
    y = ropenorm.rms_norm(y, w, 1e-6)
    q2, k2 = ropenorm.rope(q, k, positions=pos, cos_sin_cache=cache)
    return y, s, q2, k2


def _block_inputs(T, dtype=torch.bfloat16):
    cache = _cache(128, 64)
    return (randn(T, 256, dtype=dtype), randn(T, 256, dtype=dtype), randn(256, dtype=dtype),
            randn(T, 4, 64, dtype=dtype), randn(T, 2, 64, dtype=dtype),
            torch.randint(0, 128, (T,), device=DEV), cache)


def test_compile_fullgraph_dynamic_no_recompile():
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    fn = torch.compile(_block, backend=counting_backend, fullgraph=True, dynamic=True)
    for T in (7, 19, 64):
        args = _block_inputs(T)
        for got, want in zip(fn(*args), _block(*args)):
            assert torch.equal(got, want)
    assert len(graphs) == 1, f"recompiled: {len(graphs)} graphs for 3 values of T"


def test_compile_inductor_matches_eager():
    torch._dynamo.reset()
    fn = torch.compile(_block, fullgraph=True, dynamic=True)
    for T in (5, 33):
        args = _block_inputs(T)
        for got, want in zip(fn(*args), _block(*args)):
            assert torch.equal(got, want)


def test_cuda_graph_capture_and_replay_with_new_inputs():
    static = _block_inputs(24)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _block(*static)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _block(*static)
    for _ in range(2):
        fresh = _block_inputs(24)
        for dst, src in zip(static, fresh):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(static_out, _block(*fresh)):
            assert torch.equal(got, want)


def test_ops_run_on_the_current_stream():
    x = randn(64, 512, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = ropenorm.rms_norm(x, None)
    stream.synchronize()
    assert torch.equal(y, ropenorm.rms_norm(x, None))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices (tensor on one, "
                    "current device set to the other)")
def test_tensor_on_a_device_other_than_the_current_one():
    x = randn(8, 128, dtype=torch.bfloat16).to("cuda:1")
    cache = _cache(16, 32).to("cuda:1")
    q = randn(8, 2, 32).to("cuda:1")
    with torch.cuda.device(0):
        y = ropenorm.rms_norm(x, None)
        q2 = ropenorm.rope(q, cos_sin_cache=cache)
    assert y.device == x.device and q2.device == q.device
    assert torch.equal(y.cpu(), ropenorm.rms_norm(x.to("cuda:0"), None).cpu())
    with torch.cuda.device(0), pytest.raises(ValueError, match="cache"):
        ropenorm.rope(q, cos_sin_cache=cache.to("cuda:0"))


# ------------------------------------------------------------------------------------------------
# Autograd


def test_rope_gradcheck():
    # The kernels serve f32/f16/bf16 (a float64 tensor is a TypeError), so the check runs in
    # float32 with tolerances for float32 finite differences; RoPE is linear, so the numerical
    # Jacobian is exact up to that rounding.
    cache = _cache(16, 6)
    pos = torch.tensor([3, 0, 15], device=DEV)
    q = randn(3, 2, 8).requires_grad_()
    k = randn(3, 1, 8).requires_grad_()
    for style in ("neox", "gptj"):
        torch.autograd.gradcheck(
            lambda a, b: ropenorm.rope(a, b, positions=pos, cos_sin_cache=cache, style=style,
                                       rotary_dim=6),
            (q, k), eps=1e-2, atol=1e-3, rtol=1e-3, fast_mode=False)
        torch.autograd.gradgradcheck(
            lambda a: ropenorm.rope(a, positions=pos, cos_sin_cache=cache, style=style,
                                    rotary_dim=6),
            (q,), eps=1e-2, atol=1e-3, rtol=1e-3)


def test_rope_backward_is_exact_adjoint():
    cache = _cache(64, 64)
    pos = torch.randint(0, 64, (21,), device=DEV)
    q = randn(21, 4, 64, dtype=torch.float32).requires_grad_()
    g = randn(21, 4, 64)
    ropenorm.rope(q, positions=pos, cos_sin_cache=cache).backward(g)
    c, s = _cs_from_cache(cache, pos)
    assert_ulps(q.grad, rope_ref(g, c, s, "neox", 64, inverse=True), 3.0, "dq")


# ------------------------------------------------------------------------------------------------
# nn modules


def test_rms_norm_module_is_a_drop_in_for_torch_nn_rmsnorm():
    ref = torch.nn.RMSNorm(256, eps=1e-6, device=DEV)
    with torch.no_grad():
        ref.weight.copy_(torch.randn(256) * 0.1 + 1.0)
    mod = ropenorm.RMSNorm(256, eps=1e-6, device=DEV)
    assert list(mod.state_dict()) == list(ref.state_dict()) == ["weight"]
    mod.load_state_dict(ref.state_dict())
    ref.load_state_dict(mod.state_dict())
    x = randn(3, 5, 256)
    with torch.no_grad():
        y, y_torch = mod(x), ref(x)
    assert_ulps(y, rms_norm_ref(x, ref.weight.detach(), 1e-6)[0], 64.0, "RMSNorm module")
    torch.testing.assert_close(y, y_torch, rtol=1e-5, atol=1e-5)
    # Same constructor: multi-dim normalized_shape, eps=None, no affine.
    m2 = ropenorm.RMSNorm((4, 64), elementwise_affine=False, dtype=torch.bfloat16, device=DEV)
    r2 = torch.nn.RMSNorm((4, 64), elementwise_affine=False, dtype=torch.bfloat16, device=DEV)
    x2 = randn(7, 4, 64, dtype=torch.bfloat16)
    torch.testing.assert_close(m2(x2), r2(x2), rtol=1.6e-2, atol=1e-2)
    # Training (a gradient is needed) runs the kernels and gets gradients
    # (tests/python/test_autograd_cuda.py checks their values).
    x.requires_grad_()
    mod(x).sum().backward()
    assert x.grad is not None and mod.weight.grad is not None


def test_fused_add_rms_norm_and_rotary_embedding_modules():
    fused = ropenorm.FusedAddRMSNorm(128, eps=1e-6, device=DEV, dtype=torch.bfloat16)
    x, res = randn(9, 128, dtype=torch.bfloat16), randn(9, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        y, s = fused(x, res)
    assert torch.equal(s, res + x)
    rot = ropenorm.RotaryEmbedding(64, 256, rope_theta=10000.0, device=DEV)
    q, k = randn(9, 4, 64), randn(9, 2, 64)
    pos = torch.randint(0, 256, (9,), device=DEV)
    q2, k2 = rot(q, k, positions=pos)
    want = ropenorm.rope(q, k, positions=pos, cos_sin_cache=rot.cos_sin_cache)
    assert torch.equal(q2, want[0]) and torch.equal(k2, want[1])


# ------------------------------------------------------------------------------------------------
# Errors


def test_errors_are_value_and_type_errors_naming_the_argument():
    x = randn(4, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="'weight'"):
        ropenorm.rms_norm(x, randn(63, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="eps"):
        ropenorm.rms_norm(x, None, 1.0)
    with pytest.raises(TypeError, match="'x'"):
        ropenorm.rms_norm(x.double(), None)
    with pytest.raises(TypeError, match="'x'"):
        ropenorm.add_rms_norm(x.double(), randn(4, 64, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="'q'"):
        ropenorm.rope(randn(4, 2, 64).double(), randn(4, 1, 64).double(),
                      cos_sin_cache=_cache(8, 64))
    with pytest.raises(ValueError, match="'x'.*CUDA"):
        ropenorm.rms_norm(x.cpu(), None)
    with pytest.raises(ValueError, match="'residual'"):
        ropenorm.add_rms_norm(x, randn(4, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="rounding"):
        ropenorm.rms_norm(x, None, rounding="nearest")
    q = randn(4, 2, 64)
    cache = _cache(8, 64)
    with pytest.raises(ValueError, match="rotary_dim"):
        ropenorm.rope(q, cos_sin_cache=cache, rotary_dim=7)
    with pytest.raises(ValueError, match="cos/sin source"):
        ropenorm.rope(q)
    with pytest.raises(TypeError, match="'positions'"):
        ropenorm.rope(q, positions=torch.zeros(4, device=DEV), cos_sin_cache=cache)
    with pytest.raises(ValueError):
        ropenorm.rope(q.transpose(1, 2), cos_sin_cache=cache)  # last dim not contiguous
    # Nothing was written on error: a failed in-place call leaves its inputs as they were.
    before = q.clone()
    with pytest.raises(ValueError):
        ropenorm.rope(q, cos_sin_cache=cache, rotary_dim=70, inplace=True)
    assert torch.equal(q, before)
