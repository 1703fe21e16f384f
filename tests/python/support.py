"""Shared helpers of the Python tests: skip reasons, the ulp error measure, float64 references."""

from __future__ import annotations

from typing import Optional

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not importable: the torch tests need it")

import ropenorm  # noqa: E402

#: Why the host-side builders cannot run here (None: they can).
HOST_REASON: Optional[str] = ropenorm.unavailable_reason(cuda=False)
#: Why the CUDA operators cannot run here (None: they can).
CUDA_REASON: Optional[str] = ropenorm.unavailable_reason(cuda=True)

requires_extension = pytest.mark.skipif(HOST_REASON is not None,
                                        reason=f"ropenorm extension unavailable: {HOST_REASON}")
requires_cuda = pytest.mark.skipif(CUDA_REASON is not None,
                                   reason=f"ropenorm CUDA ops unavailable: {CUDA_REASON}")

# (mantissa bits, smallest normal exponent) of each output dtype.
_FORMAT = {
    torch.bfloat16: (7, -126),
    torch.float16: (10, -14),
    torch.float32: (23, -126),
}

#: The C++ suite's tolerance table (src/reference/tolerance.cpp), in output ulps.
TOL = {
    ("rms_norm", "exact", torch.bfloat16): 1.0,
    ("rms_norm", "exact", torch.float16): 1.0,
    ("rms_norm", "exact", torch.float32): 64.0,
    ("rms_norm", "hf_llama", torch.bfloat16): 2.0,
    ("rms_norm", "hf_llama", torch.float16): 2.0,
    ("rms_norm", "hf_llama", torch.float32): 64.0,
    ("rstd", "exact", torch.float32): 64.0,
    ("rope", "exact", torch.bfloat16): 1.0,
    ("rope", "exact", torch.float16): 1.0,
    ("rope", "exact", torch.float32): 3.0,
    ("qk_norm_rope", "exact", torch.bfloat16): 2.0,
    ("qk_norm_rope", "exact", torch.float16): 2.0,
    ("qk_norm_rope", "exact", torch.float32): 64.0,
    ("qk_norm_rope_rstd", "exact", torch.float32): 64.0,
}
#: Added for the in-kernel cos/sin source: fp32 ulps of |pair| * |scaling|.
ROPE_INV_FREQ_TERM_F32_ULPS = 8.0
#: Added for qk_norm_rope's rotated channels: fp32 ulps of the normalised pair's norm (the
#: norm's fp32 rounding under cancellation in a*c - b*s; the table's pair_term).
QK_PAIR_TERM_F32_ULPS = 16.0
#: The backward entries of the C++ suite's table (float32 gradients): an allowance in fp32 ulps
#: of a scale (the magnitude of the terms a gradient is formed from) is subtracted first, then
#: the rest is measured in ulps of the gradient. Scales: see tests/python/test_autograd_cuda.py.
GRAD_TOL = {
    ("rms_norm_backward", "dx"): 1.0,
    ("rms_norm_backward", "dx_scale_term"): 256.0,
    ("rms_norm_backward", "dw"): 1.0,
    ("rms_norm_backward", "dw_scale_term"): 32.0,
    ("rms_norm_backward", "dw_per_sqrt_rows"): 2.0,
    ("qk_norm_rope_backward", "dq"): 2.0,
    ("qk_norm_rope_backward", "dx_term"): 128.0,
    ("qk_norm_rope_backward", "dw"): 1.0,
    ("qk_norm_rope_backward", "dw_term"): 32.0,
    ("qk_norm_rope_backward", "dw_sum_term"): 4.0,
}


def round_to(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 -> dtype, correctly rounded (to nearest even), with no double rounding.

    float64 -> float32 is rounded to odd first, then to dtype: float32 keeps at least two more
    bits than float16 or bfloat16, so the second rounding is the correct one.
    """
    ref = ref.double()
    if dtype == torch.float64:
        return ref
    t = ref.float()
    if dtype == torch.float32:
        return t
    inexact = t.double() != ref
    away = t.double().abs() > ref.abs()
    t = torch.where(inexact & away, torch.nextafter(t, torch.zeros_like(t)), t)
    bits = t.view(torch.int32)
    bits = torch.where(inexact & torch.isfinite(t), bits | 1, bits)
    return bits.view(torch.float32).to(dtype)


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ulp of dtype at the (dtype-representable) values v, as float64."""
    p, emin = _FORMAT[dtype]
    v = v.double()
    _, e = torch.frexp(v)
    e = torch.clamp(e.to(torch.int64) - 1, min=emin)
    e = torch.where(v == 0, torch.full_like(e, emin), e)
    return torch.ldexp(torch.ones_like(v), e - p)


def ulp_error(got: torch.Tensor, ref: torch.Tensor, allow: Optional[torch.Tensor] = None,
              unit: Optional[torch.dtype] = None) -> torch.Tensor:
    """|got - round(ref)| in ulps of got's dtype (or unit's) at round(ref), per element; an
    absolute allowance is subtracted first. NaN/inf mismatches count as inf."""
    rounded = round_to(ref, got.dtype).double()
    g = got.double()
    diff = (g - rounded).abs()
    if allow is not None:
        diff = torch.clamp(diff - allow.double(), min=0.0)
    err = diff / ulp(rounded, unit or got.dtype)
    same = (g == rounded) | (torch.isnan(g) & torch.isnan(rounded))
    err = torch.where(same, torch.zeros_like(err), err)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))


def assert_ulps(got: torch.Tensor, ref: torch.Tensor, max_ulp: float, what: str,
                allow: Optional[torch.Tensor] = None) -> None:
    err = ulp_error(got, ref, allow)
    worst = float(err.max()) if err.numel() else 0.0
    if worst > max_ulp:
        i = int(err.flatten().argmax())
        raise AssertionError(
            f"{what}: {worst:.3g} ulps > {max_ulp} (element {i}: got "
            f"{float(got.flatten()[i].double())!r}, reference {float(ref.flatten()[i])!r})"
        )


# ---- float64 references -------------------------------------------------------------------

def rms_norm_ref(x, weight, eps, weight_offset=0.0, rounding="exact"):
    """(y as float64, rstd as float64)."""
    x64 = x.double()
    rstd = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    w = (weight.double() + weight_offset) if weight is not None else None
    if rounding == "exact":
        y = x64 * rstd
        if w is not None:
            y = y * w
    else:
        t = round_to(x64 * rstd, x.dtype).double()
        y = t * w if w is not None else t
    return y, rstd.squeeze(-1)


def rope_pairs(d_rot: int, style: str):
    h = d_rot // 2
    if style == "neox":
        return torch.arange(h), torch.arange(h) + h
    return torch.arange(h) * 2, torch.arange(h) * 2 + 1


def rope_ref(x, c, s, style, rotary_dim, inverse=False):
    """x [..., H, D]; c, s [..., R/2] per token (float64, broadcast over heads)."""
    x64 = x.double()
    out = x64.clone()
    ia, ib = rope_pairs(rotary_dim, style)
    ia, ib = ia.to(x.device), ib.to(x.device)
    a, b = x64[..., ia], x64[..., ib]
    c, s = c.double().unsqueeze(-2), s.double().unsqueeze(-2)
    if inverse:
        s = -s
    out[..., ia] = a * c - b * s
    out[..., ib] = a * s + b * c
    return out


def qk_norm_rope_ref(x, weight, eps, weight_offset, c, s, style, rotary_dim):
    """Per-head RMSNorm over the last dim then RoPE, float64: (out, rstd, normalised, allow).

    ``allow`` is the pair-term allowance of the rotated channels (QK_PAIR_TERM_F32_ULPS fp32
    ulps of the normalised pair's norm), 0 on the pass-through channels.
    """
    n, rstd = rms_norm_ref(x, weight, eps, weight_offset)
    out = rope_ref(n, c, s, style, rotary_dim)
    ia, ib = rope_pairs(rotary_dim, style)
    ia, ib = ia.to(x.device), ib.to(x.device)
    norm = torch.sqrt(n[..., ia] ** 2 + n[..., ib] ** 2)
    pair_allow = QK_PAIR_TERM_F32_ULPS * ulp(norm.float(), torch.float32)
    allow = torch.zeros_like(n)
    allow[..., ia] = pair_allow
    allow[..., ib] = pair_allow
    return out, rstd, n, allow
