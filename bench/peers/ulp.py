"""The error measure of the peer benchmark: outputs against a float64 reference, in output ulps.

An output element's error is ``|got - round(ref)| / ulp(round(ref))``, where ``round`` is the
correctly rounded (to nearest even) conversion of the float64 reference to the output's dtype and
``ulp`` the spacing of that dtype at that value. 0 means correctly rounded; 1 one step away. An
absolute allowance (for terms that no output ulp bounds, e.g. fp32 reduction error under
cancellation) is subtracted from the difference first. NaN or inf where the reference differs
counts as an infinite error. This is the measure of the C++ receipts (src/reference/tolerance.cpp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

# (explicit mantissa bits, smallest normal exponent) of each output dtype.
_FORMAT = {
    torch.bfloat16: (7, -126),
    torch.float16: (10, -14),
    torch.float32: (23, -126),
}

#: Elements per chunk when summarising large tensors (bounds the float64 temporaries).
CHUNK_ELEMENTS = 1 << 25


def round_to(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 -> dtype, correctly rounded to nearest even, without double rounding.

    The value is first rounded to float32 with round-to-odd (truncate toward zero, then set the
    last bit when inexact); float32 keeps at least two bits more than bfloat16 and float16, so
    the second, ordinary rounding to dtype is then the correct one.
    """
    ref = ref.double()
    if dtype == torch.float64:
        return ref
    t = ref.float()
    if dtype == torch.float32:
        return t
    back = t.double()
    inexact = back != ref
    away = back.abs() > ref.abs()
    t = torch.where(inexact & away, torch.nextafter(t, torch.zeros_like(t)), t)
    bits = t.view(torch.int32)
    bits = torch.where(inexact & torch.isfinite(t), bits | 1, bits)
    return bits.view(torch.float32).to(dtype)


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of dtype at |v| (float64): 2^(max(e, emin) - p) with |v| in [2^e, 2^(e+1))."""
    p, emin = _FORMAT[dtype]
    v = v.double()
    _, e = torch.frexp(v)
    e = torch.clamp(e.to(torch.int64) - 1, min=emin)
    e = torch.where(v == 0, torch.full_like(e, emin), e)
    return torch.ldexp(torch.ones_like(v), e - p)


def ulp_error(got: torch.Tensor, ref: torch.Tensor, allow: Optional[torch.Tensor] = None,
              unit_at: Optional[float] = None) -> torch.Tensor:
    """Per-element error of got against the float64 ref, in ulps of got's dtype (float64): the
    ulp at each element's correctly rounded reference, or at ``unit_at`` when given (errors
    measured against the largest element, as for weight gradients)."""
    rounded = round_to(ref, got.dtype).double()
    g = got.double()
    diff = (g - rounded).abs()
    if allow is not None:
        diff = torch.clamp(diff - allow.double(), min=0.0)
    if unit_at is None:
        err = diff / ulp(rounded, got.dtype)
    else:
        err = diff / ulp(torch.tensor(unit_at, dtype=torch.float64), got.dtype).to(diff.device)
    same = (g == rounded) | (torch.isnan(g) & torch.isnan(rounded))
    err = torch.where(same, torch.zeros_like(err), err)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, math.inf))


@dataclass
class ErrorStats:
    """One output's errors: the largest (ulps), the share correctly rounded, the relative L2."""

    max_ulp: float
    frac_exact: float
    rel_l2: float
    elements: int

    def within(self, tol_ulp: float) -> bool:
        return self.max_ulp <= tol_ulp


def error_stats(got: torch.Tensor, ref: torch.Tensor, allow: Optional[torch.Tensor] = None,
                unit_at: Optional[float] = None) -> ErrorStats:
    """Summarises ulp_error over every element, in chunks; shapes must match."""
    if tuple(got.shape) != tuple(ref.shape):
        raise ValueError(f"error_stats: output shape {tuple(got.shape)} != reference shape "
                         f"{tuple(ref.shape)}")
    g = got.reshape(-1)
    r = ref.reshape(-1)
    a = allow.expand(ref.shape).reshape(-1) if allow is not None else None
    n = g.numel()
    worst, exact, diff2, ref2 = 0.0, 0, 0.0, 0.0
    for start in range(0, n, CHUNK_ELEMENTS):
        stop = min(n, start + CHUNK_ELEMENTS)
        gc, rc = g[start:stop], r[start:stop].double()
        err = ulp_error(gc, rc, a[start:stop] if a is not None else None, unit_at)
        worst = max(worst, float(err.max()))
        exact += int((gc.double() == round_to(rc, gc.dtype).double()).sum())
        d = gc.double() - rc
        diff2 += float((d * d).sum())
        ref2 += float((rc * rc).sum())
    if n == 0:
        return ErrorStats(0.0, 1.0, 0.0, 0)
    if math.isnan(diff2) or math.isinf(diff2):
        rel = math.inf
    else:
        rel = math.sqrt(diff2 / ref2) if ref2 > 0 else (0.0 if diff2 == 0 else math.inf)
    return ErrorStats(worst, exact / n, rel, n)


def fp32_ulps(value: torch.Tensor, count: float) -> torch.Tensor:
    """``count`` float32 ulps of |value| (float64): an absolute allowance for fp32-level error."""
    return count * ulp(value.abs(), torch.float32)
