"""What runs without a GPU (needs the built extension): the operator schemas, the fake
implementations and the autograd wiring, traced with fake tensors (FakeTensorMode and make_fx:
tensors without data, so no kernel runs; they are CPU tensors because the autograd engine needs
a real device for CUDA ones, and the operators are called directly since the functional layer
refuses to run without a CUDA device); the CPU paths of the modules; the functional layer's
argument handling; and the errors for CPU tensors."""

import pytest

from support import requires_extension, torch

import ropenorm
from ropenorm import functional as F_rn

pytestmark = requires_extension

ops = torch.ops.ropenorm if ropenorm.available(cuda=False) else None


def fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def fake(*shape, dtype=torch.float32, grad=False):
    return torch.empty(*shape, dtype=dtype).requires_grad_(grad)


def test_schemas_name_the_arguments():
    schema = str(ops.qk_norm_rope.default._schema)
    assert "Tensor q_weight, Tensor k_weight" in schema and "inverse" not in schema
    assert "-> (Tensor q_out, Tensor k_out, Tensor q_rstd, Tensor k_rstd)" in schema
    assert "Tensor(a!) q, Tensor(b!) k" in str(ops.qk_norm_rope_.default._schema)
    assert "bool weight_grad=True" in str(ops.rms_norm_backward.default._schema)
    assert "Tensor? ds, Tensor s" in str(ops.add_rms_norm_backward.default._schema)
    assert "Tensor dq_weight, Tensor dk_weight" in str(ops.qk_norm_rope_backward.default._schema)


def test_qk_norm_rope_fake_forward_and_backward():
    with fake_mode():
        T, hq, hk, D = 5, 8, 2, 128
        qkv = fake(T, (hq + 2 * hk) * D, dtype=torch.bfloat16, grad=True)
        q = qkv[:, : hq * D].view(T, hq, D)
        k = qkv[:, hq * D : (hq + hk) * D].view(T, hk, D)
        wq, wk = fake(D, grad=True), fake(D)  # k_weight frozen
        cache = fake(64, 64)
        pos = torch.empty(T, dtype=torch.int64)
        q_out, k_out, q_rstd, k_rstd = ops.qk_norm_rope(
            q, k, wq, wk, positions=pos, cos_sin_cache=cache, rotary_dim=64)
        assert q_out.shape == q.shape and q_out.dtype == torch.bfloat16 and q_out.is_contiguous()
        assert k_out.shape == k.shape and q_rstd.shape == (T, hq) and k_rstd.shape == (T, hk)
        assert q_rstd.dtype == torch.float32 and not q_rstd.requires_grad
        assert q_out.requires_grad and "qk_norm_rope" in type(q_out.grad_fn).__name__
        (q_out.float().sum() + k_out.float().sum()).backward()
        assert qkv.grad.shape == qkv.shape and qkv.grad.dtype == torch.bfloat16
        assert wq.grad.shape == (D,) and wq.grad.dtype == torch.float32 and wk.grad is None


def test_norm_fake_forward_and_backward():
    with fake_mode():
        x = fake(3, 7, 256, dtype=torch.bfloat16, grad=True)
        w = fake(256, grad=True)
        y, rstd = ops.rms_norm(x, w)
        assert y.dtype == torch.bfloat16 and rstd.shape == (3, 7) and not rstd.requires_grad
        y.float().sum().backward()
        assert x.grad.dtype == torch.bfloat16 and w.grad.dtype == torch.float32

        x = fake(9, 128, dtype=torch.bfloat16, grad=True)
        res = fake(9, 128, grad=True)  # a float32 residual stream
        w = fake(128, dtype=torch.bfloat16)  # frozen
        y, s = ops.add_rms_norm(x, res, w)
        assert y.dtype == torch.bfloat16 and s.dtype == torch.float32
        (y.float().sum() + s.sum()).backward()
        assert x.grad.dtype == torch.bfloat16 and res.grad.dtype == torch.float32
        assert w.grad is None

        x = fake(9, 128, dtype=torch.bfloat16, grad=True)
        res = fake(9, 128, dtype=torch.bfloat16, grad=True)  # one dtype: one gradient for both
        y, s = ops.add_rms_norm(x, res, fake(128))
        (y.float().sum() + s.float().sum()).backward()
        assert x.grad.shape == res.grad.shape == (9, 128)
        assert x.grad.dtype == res.grad.dtype == torch.bfloat16


def test_backward_operator_fakes():
    with fake_mode():
        dy, x, w = fake(4, 64), fake(4, 64, dtype=torch.float16), fake(64, dtype=torch.bfloat16)
        dx, dw = ops.rms_norm_backward(dy, x, w, None, 1e-6, 0.0, True)
        assert dx.dtype == torch.float16 and dw.shape == (64,) and dw.dtype == torch.bfloat16
        _, dw = ops.rms_norm_backward(dy, x, w, None, 1e-6, 0.0, False)
        assert dw.shape == (0,)
        dx, dres, dw = ops.add_rms_norm_backward(dy.half(), None, fake(4, 64), None)
        assert dx.dtype == torch.float16 and dres.dtype == torch.float32 and dw.shape == (0,)
        dx, dres, dw = ops.add_rms_norm_backward(dy, None, fake(4, 64), w, None, 1e-6, 0.0, True,
                                                 False)
        assert dx.shape == (4, 64) and dres.shape == (0,) and dw.shape == (64,)
        q, k, wq = fake(2, 3, 4, 32), fake(2, 3, 1, 32), fake(32)
        dq, dk, dwq, dwk = ops.qk_norm_rope_backward(q, k, q, k, wq, wq, cos_sin_cache=fake(8, 32))
        assert dq.shape == q.shape and dk.shape == k.shape and dwq.shape == dwk.shape == (32,)


def test_make_fx_symbolic_traces_forward_and_backward():
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(qkv, wq, wk, pos, cache):
        T = qkv.shape[0]
        q = qkv[:, :256].view(T, 4, 64)
        k = qkv[:, 256:384].view(T, 2, 64)
        q_out, k_out, _, _ = ops.qk_norm_rope(q, k, wq, wk, positions=pos, cos_sin_cache=cache)
        return torch.autograd.grad(q_out.sum() + k_out.sum(), (qkv, wq, wk))

    args = (torch.randn(6, 512, requires_grad=True), torch.randn(64, requires_grad=True),
            torch.randn(64, requires_grad=True), torch.zeros(6, dtype=torch.int64),
            torch.randn(32, 64))
    gm = make_fx(step, tracing_mode="symbolic")(*args)  # fake inputs with symbolic sizes
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "ropenorm.qk_norm_rope.default" in targets
    assert "ropenorm.qk_norm_rope_backward.default" in targets


def test_cpu_tensors_are_value_errors_naming_the_argument():
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="'x'.*CUDA"):
        ops.rms_norm(x, None)
    with pytest.raises(ValueError, match="'dy'.*CUDA"):
        ops.rms_norm_backward(x, x)
    q, k, w = torch.randn(2, 4, 64), torch.randn(2, 1, 64), torch.randn(64)
    with pytest.raises(ValueError, match="'q'.*CUDA"):
        ops.qk_norm_rope(q, k, w, w, cos_sin_cache=torch.randn(8, 64))
    with pytest.raises(ValueError, match="'dq_out'.*CUDA"):
        ops.qk_norm_rope_backward(q, k, q, k, w, w, cos_sin_cache=torch.randn(8, 64))


def test_cos_sin_source_inference():
    q4 = torch.empty(2, 9, 4, 64)
    q3 = torch.empty(9, 4, 64)
    t = torch.empty
    kind = F_rn._cos_sin_kind
    # Hugging Face position_embeddings: per token, [B, S, R] or [1, S, R] broadcast over B.
    assert kind("rope", q4, None, 0, None, None, t(2, 9, 64), t(2, 9, 64), None, None) == 2
    assert kind("rope", q4, None, 0, None, None, t(1, 9, 64), t(1, 9, 64), None, None) == 2
    assert kind("rope", q3, None, 0, None, None, t(9, 64), t(9, 64), None, None) == 2
    # A [P, R] table indexed by positions.
    assert kind("rope", q4, t(2, 9), 0, None, None, t(100, 64), t(100, 64), None, None) == 1
    assert kind("rope", q3, None, 0, None, t(100, 64), None, None, None, None) == 0
    assert kind("rope", q3, None, 0, None, None, None, None, t(32), None) == 3
    with pytest.raises(ValueError, match="ropenorm.qk_norm_rope: expected exactly one"):
        kind("qk_norm_rope", q3, None, 0, None, t(8, 64), t(8, 64), t(8, 64), None, None)


def test_qk_norm_rope_module_parameters_and_hf_norms():
    mod = ropenorm.QKNormRoPE(64, eps=1e-5, max_position_embeddings=32, rope_theta=1e6)
    assert list(mod.state_dict()) == ["q_weight", "k_weight"]
    assert mod.cos_sin_cache.shape == (32, 64) and torch.equal(mod.q_weight, torch.ones(64))
    half = ropenorm.QKNormRoPE(64, partial_rotary_factor=0.5, max_position_embeddings=8)
    assert half.rotary_dim == 32 and half.cos_sin_cache.shape == (8, 32)
    gemma = ropenorm.QKNormRoPE(64, weight_offset=1.0)
    assert torch.equal(gemma.k_weight, torch.zeros(64)) and gemma.cos_sin_cache is None
    with pytest.raises(ValueError, match="no cos/sin source"):
        gemma(torch.randn(2, 1, 64), torch.randn(2, 1, 64))
    with pytest.raises(ValueError, match="max_position_embeddings"):
        ropenorm.QKNormRoPE(64, factor=8.0)
    qwen3 = pytest.importorskip("transformers.models.qwen3.modeling_qwen3",
                                reason="transformers (Qwen3) is not importable")
    q_norm, k_norm = qwen3.Qwen3RMSNorm(64), qwen3.Qwen3RMSNorm(64)
    with torch.no_grad():
        q_norm.weight.normal_()
        k_norm.weight.normal_()
    mod.load_hf_norms(q_norm, k_norm)
    assert torch.equal(mod.q_weight, q_norm.weight) and torch.equal(mod.k_weight, k_norm.weight)
    with pytest.raises(ValueError, match="'k_norm'"):
        mod.load_hf_norms(q_norm, qwen3.Qwen3RMSNorm(32))
    # The same weights through a state_dict with Hugging Face's key names.
    hf_state = {"q_norm.weight": q_norm.weight.detach(), "k_norm.weight": k_norm.weight.detach()}
    fresh = ropenorm.QKNormRoPE(64)
    fresh.load_state_dict({"q_weight": hf_state["q_norm.weight"],
                           "k_weight": hf_state["k_norm.weight"]})
    assert torch.equal(fresh.q_weight, mod.q_weight)


def test_norm_modules_on_cpu_use_torch():
    mod = ropenorm.RMSNorm(32, eps=1e-6)
    ref = torch.nn.RMSNorm(32, eps=1e-6)
    with torch.no_grad():
        mod.weight.normal_()
        ref.weight.copy_(mod.weight)
    x = torch.randn(3, 32, requires_grad=True)
    y = mod(x)
    torch.testing.assert_close(y, ref(x))
    y.sum().backward()
    assert x.grad is not None and mod.weight.grad is not None
    fused = ropenorm.FusedAddRMSNorm(32, inplace=True)
    xa, res = torch.randn(3, 32), torch.randn(3, 32)
    want = res + xa
    with torch.no_grad():
        y, s = fused(xa, res)
    assert s is res and torch.equal(res, want)
