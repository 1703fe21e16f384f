"""ropenorm.integrations.transformers: Hugging Face models patched to ropenorm's kernels.

Every model is a tiny one built here from a config (hidden 64, 2 layers, 4 q / 2 kv heads,
head_dim 16, vocab 128) with random weights from a fixed seed; nothing is downloaded.

CPU tests (wherever transformers is installed; no ropenorm op runs on CPU tensors, so every
patched forward takes its stock path): which modules are patched, state_dict keys and loading
both ways, the options, patching the modeling modules before construction, the unknown-family
error, the check of the mirrored forwards, and that the patched forwards (the mirrored fused
QK-norm + RoPE attention and fused-add decoder layers included) compute exactly what the stock
model computes.

GPU tests (CUDA and the built extension): each family, stock vs a patched deep copy, float32
and bfloat16, numerics "exact" and "hf": logits, loss and every parameter's gradient; greedy
generation with a KV cache; torch.compile; a decode step captured in a CUDA graph; the rope_type
variants on Llama; partial rotary; and that the kernels did run (a patched model that silently
fell back to the stock code would pass the parity checks).

Tolerances, as relative errors ``||a - b|| / ||b||`` over a whole tensor:

- float32: patched vs stock within 2e-5 (logits, loss) and 2e-4 (each gradient). Both compute
  in fp32 and differ only in operation order (reduction order inside a norm, fused vs separate
  roundings).
- bfloat16: there is no bitwise target (Hugging Face rounds the rotation three times and a
  Llama norm twice; ropenorm once), so both models are measured against a float32 copy of the
  stock model holding the same bf16 weights. The patched model's error may exceed the stock
  model's by at most 25% (logits, loss) / 50% (gradients), plus a floor of 1e-3 / 4e-3 for
  errors that happen to be tiny. With numerics="hf" the forward rounds where Hugging Face's
  does, so the patched logits and loss must be within a quarter of the stock error (plus 5e-4)
  of the stock ones: what is left is the fp32 summation order inside a norm, which moves a
  rounding boundary for a few elements in 1e5.
"""

from __future__ import annotations

import copy
import inspect

import pytest

from support import requires_cuda, torch

transformers = pytest.importorskip(
    "transformers", reason="transformers is not importable: the integration tests need it")

from ropenorm.integrations import _hf_forwards as HF  # noqa: E402
from ropenorm.integrations import _hf_kernels as K  # noqa: E402
from ropenorm.integrations import transformers as rt  # noqa: E402

FAMILIES = list(rt.SUPPORTED_FAMILIES)

_CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
}

VOCAB = 128


def tiny_config(family: str, **overrides):
    kw = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
              attention_dropout=0.0)
    if family in ("gemma2", "gemma3"):
        # A window shorter than the test sequences, so the sliding layers mask something.
        kw.update(sliding_window=8, layer_types=["sliding_attention", "full_attention"])
    if family == "qwen2":
        kw.update(use_sliding_window=False)
    kw.update(overrides)
    return getattr(transformers, _CONFIGS[family][0])(**kw)


def _init(model, family: str, seed: int) -> None:
    """Random weights of order-one activations; norm weights away from their neutral value, so a
    norm that ignored its weight (or Gemma's 1 + w) would show."""
    gen = torch.Generator().manual_seed(seed)
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(0.2 * r if gemma else 1.0 + 0.2 * r)
            elif name.endswith(".bias"):
                p.copy_(0.1 * r)
            elif p.dim() == 2 and "embed" not in name:
                p.copy_(r / p.shape[1] ** 0.5)
            else:
                p.copy_(r)


def tiny_model(family: str, dtype=torch.float32, device="cpu", seed=0, attn="sdpa", **overrides):
    config = tiny_config(family, **overrides)
    config._attn_implementation = attn
    model = getattr(transformers, _CONFIGS[family][1])(config)
    _init(model, family, seed)
    return model.to(device=device, dtype=dtype).eval()


def tokens(batch=2, seq=16, seed=1, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, seq), generator=gen).to(device)


# ------------------------------------------------------------------------------------------------
# CPU: patching mechanics


EXPECTED_ROLES = {
    # (rms_norm count, attention count, decoder_layer count) for 2 layers
    "llama": (5, 2, 2),
    "mistral": (5, 2, 2),
    "qwen2": (5, 2, 2),
    "qwen3": (9, 2, 2),
    "gemma": (5, 2, 2),
    "gemma2": (9, 2, 2),
    "gemma3": (13, 2, 2),
    "olmo2": (9, 2, 0),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_patched_modules_and_state_dict(family):
    stock = tiny_model(family)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    roles = list(rt.patched_modules(patched).values())
    counts = tuple(roles.count(r) for r in ("rms_norm", "attention", "decoder_layer"))
    assert counts == EXPECTED_ROLES[family]
    for name, module in patched.named_modules():
        if name in rt.patched_modules(patched):
            stock_cls = type(stock.get_submodule(name))
            assert isinstance(module, stock_cls) and type(module) is not stock_cls
            assert type(module).__name__ == stock_cls.__name__
    sd_stock, sd_patched = stock.state_dict(), patched.state_dict()
    assert list(sd_stock) == list(sd_patched)
    assert all(torch.equal(sd_stock[k], sd_patched[k]) for k in sd_stock)
    # Checkpoints load both ways, strictly.
    other = rt.apply_ropenorm(tiny_model(family, seed=5))
    other.load_state_dict(sd_stock, strict=True)
    assert all(torch.equal(v, sd_stock[k]) for k, v in other.state_dict().items())
    back = tiny_model(family, seed=6)
    back.load_state_dict(sd_patched, strict=True)
    assert all(torch.equal(v, sd_stock[k]) for k, v in back.state_dict().items())
    # Patching in place keeps the parameter objects, so optimisers and tied weights keep working.
    params = [id(p) for p in stock.parameters()]
    rt.apply_ropenorm(stock)
    assert [id(p) for p in stock.parameters()] == params


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("fused_qk", [False, True])
def test_cpu_patched_forward_and_generation_equal_stock(family, fused_qk, monkeypatch):
    # On CPU every kernel call declines and the stock computation runs, through the patched
    # forwards: the mirrored ones must then compute exactly what the stock ones do. fused_qk
    # forces the fused QK-norm + RoPE attention forward even where this ropenorm lacks the op.
    monkeypatch.setattr(K, "has_fused_qk_norm_rope", lambda: fused_qk)
    stock = tiny_model(family)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    if family in ("qwen3", "gemma3"):
        attn = type(patched.model.layers[0].self_attn).forward
        assert (attn.__code__.co_filename == HF.__file__) == fused_qk
    ids = tokens()
    with torch.no_grad():
        assert torch.equal(stock(ids).logits, patched(ids).logits)
    out_s = stock(ids, labels=ids)
    out_p = patched(ids, labels=ids)
    assert torch.equal(out_s.loss, out_p.loss)
    out_s.loss.backward()
    out_p.loss.backward()
    for (name, ps), (_, pp) in zip(stock.named_parameters(), patched.named_parameters()):
        assert torch.equal(ps.grad, pp.grad), name
    prompt = tokens(1, 6, seed=3)
    gen = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(stock.generate(prompt, **gen), patched.generate(prompt, **gen))


def test_options_select_what_is_patched():
    model = tiny_model("qwen3")
    roles = lambda: sorted(set(rt.patched_modules(model).values()))  # noqa: E731
    rt.apply_ropenorm(model, rms_norm=False)
    assert roles() == ["attention"]
    rt.apply_ropenorm(model, rope=False, qk_norm_rope=False)
    assert roles() == ["decoder_layer", "rms_norm"]
    rt.apply_ropenorm(model, fused_add=False)
    assert roles() == ["attention", "rms_norm"]
    rt.apply_ropenorm(model, rms_norm=False, rope=False)
    assert roles() == []
    rt.apply_ropenorm(model)
    assert roles() == ["attention", "decoder_layer", "rms_norm"]
    rt.remove_ropenorm(model)
    assert rt.patched_modules(model) == {}
    assert type(model.model.norm) is transformers.models.qwen3.modeling_qwen3.Qwen3RMSNorm
    with pytest.raises(ValueError, match="numerics"):
        rt.apply_ropenorm(model, numerics="fast")


def test_numerics_map_onto_ropenorm_roundings():
    from ropenorm.integrations._hf_families import FAMILIES as table

    llama_exact = HF.NormPlan(table["llama"], "exact")
    llama_hf = HF.NormPlan(table["llama"], "hf")
    gemma_hf = HF.NormPlan(table["gemma3"], "hf")
    olmo_hf = HF.NormPlan(table["olmo2"], "hf")
    assert (llama_exact.rounding, llama_exact.weight_offset) == (K.ROUNDING["exact"], 0.0)
    assert (llama_hf.rounding, llama_hf.same_dtype) == (K.ROUNDING["hf_llama"], True)
    # Gemma's (1 + w) and OLMo-2's fp32 weight multiply are what "exact" computes.
    assert (gemma_hf.rounding, gemma_hf.weight_offset) == (K.ROUNDING["exact"], 1.0)
    assert (olmo_hf.rounding, olmo_hf.weight_offset) == (K.ROUNDING["exact"], 0.0)
    # numerics="hf" never fuses the per-head norms with the rotation (HF rounds in between).
    model = rt.apply_ropenorm(tiny_model("qwen3"), numerics="hf")
    attn = type(model.model.layers[0].self_attn).forward
    assert attn.__code__ is transformers.models.qwen3.modeling_qwen3.Qwen3Attention.forward.__code__


def test_unknown_family_error():
    gpt2 = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=32))
    with pytest.raises(ValueError) as info:
        rt.apply_ropenorm(gpt2)
    message = str(info.value)
    assert "GPT2LMHeadModel" in message
    for family in FAMILIES:
        assert family in message
    with pytest.raises(ValueError, match="GPT2LMHeadModel"):
        rt.apply_ropenorm_to_class(transformers.GPT2LMHeadModel)
    with pytest.raises(ValueError, match="supported families: llama"):
        rt.patch_transformers("gpt2")


def test_patch_transformers_before_construction():
    from transformers.models.llama import modeling_llama

    before = tiny_model("llama")
    stock_norm = modeling_llama.LlamaRMSNorm
    try:
        assert rt.patch_transformers("llama", fused_add=False) == ["llama"]
        assert modeling_llama.LlamaRMSNorm is not stock_norm
        built = tiny_model("llama")
        assert sorted(set(rt.patched_modules(built).values())) == ["attention", "rms_norm"]
        assert rt.patched_modules(before) == {}
        # apply_ropenorm on a model built from the patched module re-patches it.
        rt.apply_ropenorm(built, rope=False)
        assert sorted(set(rt.patched_modules(built).values())) == ["decoder_layer", "rms_norm"]
    finally:
        assert rt.unpatch_transformers("llama") == ["llama"]
    assert modeling_llama.LlamaRMSNorm is stock_norm
    assert rt.patched_modules(tiny_model("llama")) == {}
    try:
        assert rt.apply_ropenorm_to_class(transformers.Qwen3ForCausalLM) is (
            transformers.Qwen3ForCausalLM)
        assert len(rt.patched_modules(tiny_model("qwen3"))) == sum(EXPECTED_ROLES["qwen3"])
    finally:
        rt.unpatch_transformers("all")
    assert rt.patched_modules(tiny_model("qwen3")) == {}


def test_eps_outside_kernel_range_is_refused():
    model = tiny_model("llama", rms_norm_eps=0.5)
    with pytest.raises(ValueError, match=r"model\.layers\.0\.input_layernorm.*eps 0\.5"):
        rt.apply_ropenorm(model)
    rt.apply_ropenorm(model, rms_norm=False)


def test_mirrored_forward_check():
    installed = transformers.__version__
    if not installed.startswith(HF.MIRRORED_VERSION + "."):
        pytest.skip(f"the mirrored forwards are those of transformers {HF.MIRRORED_VERSION}; "
                    f"{installed} is installed")
    from ropenorm.integrations._hf_families import FAMILIES as table

    for family in table.values():
        modeling = family.modeling()
        if family.qk_norm == "per_head":
            HF.check_mirrored(getattr(modeling, family.attention_class),
                              f"{family.name}.attention", "qk_norm_rope")
        if family.layout != "post_norm":
            HF.check_mirrored(getattr(modeling, family.layer_class), f"{family.layout}.layer",
                              "fused_add")

    class ChangedAttention(transformers.models.qwen3.modeling_qwen3.Qwen3Attention):
        def forward(self, hidden_states, position_embeddings, attention_mask,
                    past_key_values=None, **kwargs):
            return None, None

    with pytest.raises(RuntimeError, match="qk_norm_rope=False"):
        HF.check_mirrored(ChangedAttention, "qwen3.attention", "qk_norm_rope")
    sig = inspect.signature(ChangedAttention.forward)
    assert list(sig.parameters)[:2] == ["self", "hidden_states"]


# ------------------------------------------------------------------------------------------------
# GPU: numerics against the stock model

DEV = "cuda"
LOGIT_RATIO, LOGIT_FLOOR = 1.25, 1e-3
GRAD_RATIO, GRAD_FLOOR = 1.5, 4e-3
F32_LOGITS, F32_GRADS = 2e-5, 2e-4
HF_RATIO, HF_FLOOR = 0.25, 5e-4


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the kernel calls that ran (returned a result rather than declining)."""
    counts = {}
    for name in ("rms_norm", "add_rms_norm", "rope_bshd", "qk_norm_rope_bshd"):
        fn = getattr(K, name)

        def counted(*args, _fn=fn, _name=name, **kwargs):
            out = _fn(*args, **kwargs)
            if out is not None:
                counts[_name] = counts.get(_name, 0) + 1
            return out

        monkeypatch.setattr(K, name, counted)
    return counts


def _expected_kernels(family: str, numerics: str, dtype):
    want = {"rms_norm"}
    if family != "olmo2":
        want.add("add_rms_norm")
    if numerics == "exact" and family in ("qwen3", "gemma3") and K.has_fused_qk_norm_rope():
        want.add("qk_norm_rope_bshd")
    elif numerics == "exact" or dtype == torch.float32 or family == "olmo2":
        want.add("rope_bshd")  # numerics="hf": where HF's cos/sin are float32
    return want


def _step(model, ids):
    out = model(ids, labels=ids)
    out.loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return out.logits.detach(), out.loss.detach(), grads


@requires_cuda
@pytest.mark.parametrize("numerics", ["exact", "hf"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_parity_logits_loss_grads(family, dtype, numerics, kernel_calls):
    stock = tiny_model(family, dtype=dtype, device=DEV)
    patched = rt.apply_ropenorm(copy.deepcopy(stock), numerics=numerics)
    ids = tokens(device=DEV)
    with torch.no_grad():
        patched(ids)
    assert set(kernel_calls) >= _expected_kernels(family, numerics, dtype), kernel_calls
    logits_s, loss_s, grads_s = _step(stock, ids)
    logits_p, loss_p, grads_p = _step(patched, ids)
    assert torch.isfinite(logits_p).all() and torch.isfinite(loss_p)
    if dtype == torch.float32:
        assert rel(logits_p, logits_s) <= F32_LOGITS
        assert rel(loss_p, loss_s) <= F32_LOGITS
        for name in grads_s:
            assert rel(grads_p[name], grads_s[name]) <= F32_GRADS, name
        return
    reference = copy.deepcopy(stock).float()
    logits_r, loss_r, grads_r = _step(reference, ids)
    checks = [("logits", logits_s, logits_p, logits_r, LOGIT_RATIO, LOGIT_FLOOR),
              ("loss", loss_s, loss_p, loss_r, LOGIT_RATIO, LOGIT_FLOOR)]
    checks += [(f"grad {n}", grads_s[n], grads_p[n], grads_r[n], GRAD_RATIO, GRAD_FLOOR)
               for n in grads_s]
    for what, s, p, r, ratio, floor in checks:
        err_s, err_p = rel(s, r), rel(p, r)
        assert err_p <= ratio * err_s + floor, (what, err_p, err_s)
    if numerics == "hf":
        for what, s, p, r, _, _ in checks[:2]:
            err_s = rel(s, r)
            assert rel(p, s) <= HF_RATIO * err_s + HF_FLOOR, (what, rel(p, s), err_s)


@requires_cuda
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_with_kv_cache(family, attn):
    stock = tiny_model(family, device=DEV, attn=attn)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    prompt = tokens(2, 6, seed=3, device=DEV)
    gen = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    out_s = stock.generate(prompt, **gen)
    out_p = patched.generate(prompt, **gen)
    assert out_s.shape == (2, 11)
    assert torch.equal(out_s, out_p)


ROPE_VARIANTS = {
    "linear": dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
    # Sequences past max_position_embeddings: the dynamic NTK frequencies are recomputed.
    "dynamic": dict(max_position_embeddings=32,
                    rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                     "factor": 2.0}),
    "llama3": dict(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 16}),
    "yarn": dict(max_position_embeddings=64,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 16}),
}


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("variant", list(ROPE_VARIANTS))
def test_llama_rope_types(variant, dtype, kernel_calls):
    stock = tiny_model("llama", dtype=dtype, device=DEV, **ROPE_VARIANTS[variant])
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    ids = tokens(2, 48, device=DEV)
    with torch.no_grad():
        logits_s = stock(ids).logits
        logits_p = patched(ids).logits
    assert kernel_calls.get("rope_bshd", 0) == 2
    if variant == "dynamic":
        rotary = patched.model.rotary_emb
        assert not torch.equal(rotary.inv_freq, rotary.original_inv_freq)
    if dtype == torch.float32:
        assert rel(logits_p, logits_s) <= F32_LOGITS
        return
    with torch.no_grad():
        logits_r = copy.deepcopy(stock).float()(ids).logits
    assert rel(logits_p, logits_r) <= LOGIT_RATIO * rel(logits_s, logits_r) + LOGIT_FLOOR


@requires_cuda
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_partial_rotary(layout):
    # cos/sin narrower than the head (partial_rotary_factor): channels R..D-1 pass through.
    # (The stock apply_rotary_pos_emb of these families cannot broadcast them.)
    gen = torch.Generator(device=DEV).manual_seed(0)
    b, s, hq, hk, d, r = 2, 7, 4, 2, 32, 16
    q = torch.randn(b, s, hq, d, device=DEV, generator=gen)
    k = torch.randn(b, s, hk, d, device=DEV, generator=gen)
    ang = torch.rand(1, s, r // 2, device=DEV, generator=gen) * 20
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    stock_rotary = transformers.models.llama.modeling_llama.apply_rotary_pos_emb
    rotary = HF.rotary_fn(stock_rotary)
    if layout == "bhsd":
        q_out, k_out = rotary(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
        q_out, k_out = q_out.transpose(1, 2), k_out.transpose(1, 2)
    else:
        q_out, k_out = rotary(q, k, cos, sin, unsqueeze_dim=2)
    q_ref, k_ref = stock_rotary(q[..., :r], k[..., :r], cos, sin, unsqueeze_dim=2)
    for out, ref, x in ((q_out, q_ref, q), (k_out, k_ref, k)):
        torch.testing.assert_close(out[..., :r], ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(out[..., r:], x[..., r:])


@requires_cuda
def test_fused_qk_norm_rope_falls_back_without_the_op(monkeypatch, kernel_calls):
    monkeypatch.setattr(K, "has_fused_qk_norm_rope", lambda: False)
    stock = tiny_model("qwen3", device=DEV)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    ids = tokens(device=DEV)
    with torch.no_grad():
        assert rel(patched(ids).logits, stock(ids).logits) <= F32_LOGITS
    assert "qk_norm_rope_bshd" not in kernel_calls and kernel_calls["rope_bshd"] == 2


@requires_cuda
@pytest.mark.skipif(not K.has_fused_qk_norm_rope(),
                    reason="this ropenorm has no qk_norm_rope op (the unfused path is tested)")
@pytest.mark.parametrize("family", ["qwen3", "gemma3"])
def test_fused_qk_norm_rope_is_used(family, kernel_calls):
    patched = rt.apply_ropenorm(tiny_model(family, dtype=torch.bfloat16, device=DEV))
    with torch.no_grad():
        patched(tokens(device=DEV))
    assert kernel_calls["qk_norm_rope_bshd"] == 2 and "rope_bshd" not in kernel_calls


# ------------------------------------------------------------------------------------------------
# GPU: torch.compile and CUDA graphs


@requires_cuda
@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_torch_compile(family):
    torch._dynamo.reset()
    stock = tiny_model(family, device=DEV)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    compiled = torch.compile(patched)
    ids = tokens(device=DEV)
    with torch.no_grad():
        ref = stock(ids).logits
        got = compiled(ids).logits
    assert rel(got, ref) <= F32_LOGITS


def _decode_with_static_cache(model, prompt, steps, graph: bool):
    """Greedy decoding, one token a step, with a StaticCache; each step either eager or a
    replay of one CUDA graph captured for the step. Returns the tokens and the step logits."""
    b, p = prompt.shape
    max_len = p + steps + 4
    cache = transformers.StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        first = model(prompt, past_key_values=cache, use_cache=True).logits[:, -1]
    dtype = first.dtype
    ids = first.argmax(-1, keepdim=True)
    pos = torch.full((b, 1), p, device=DEV, dtype=torch.long)
    # A prepared 4-D mask, updated in place: no host synchronisation in the step.
    mask = torch.full((b, 1, 1, max_len), torch.finfo(dtype).min, device=DEV, dtype=dtype)
    mask[..., :p] = 0

    def step():
        with torch.no_grad():
            return model(ids, position_ids=pos, attention_mask=mask, past_key_values=cache,
                         use_cache=True).logits[:, -1]

    def rewind():
        for layer in cache.layers:
            layer.cumulative_length.fill_(p)

    run = step
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = step()
        rewind()

        def run():
            g.replay()
            return out

    out_tokens, out_logits = [ids.clone()], []
    for t in range(steps):
        pos.fill_(p + t)
        mask[..., p + t] = 0
        logits = run().clone()
        ids.copy_(logits.argmax(-1, keepdim=True))
        out_tokens.append(ids.clone())
        out_logits.append(logits)
    return torch.cat([prompt] + out_tokens, 1), torch.stack(out_logits)


@requires_cuda
@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_cuda_graph_decode_step(family):
    # Full-attention layers only (a static sliding-window cache keeps a host-side length).
    extra = dict(layer_types=["full_attention"] * 2) if family == "gemma3" else {}
    stock = tiny_model(family, device=DEV, **extra)
    patched = rt.apply_ropenorm(copy.deepcopy(stock))
    prompt = tokens(2, 6, seed=3, device=DEV)
    eager_tokens, eager_logits = _decode_with_static_cache(patched, prompt, 4, graph=False)
    graph_tokens, graph_logits = _decode_with_static_cache(patched, prompt, 4, graph=True)
    assert torch.equal(graph_tokens, eager_tokens)
    torch.testing.assert_close(graph_logits, eager_logits, rtol=1e-5, atol=1e-5)
    gen = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    assert torch.equal(stock.generate(prompt, **gen), graph_tokens)

