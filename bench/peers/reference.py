"""float64 references of every op the peer benchmark times, with each output's allowance.

Computed in torch on the same inputs every implementation receives (upcast to float64), from the
formulas of the contract (README.md, /work/shared/DESIGN.md section 1), not from any kernel or peer
code. Each output comes as an ``Expected``: the float64 values, an optional absolute allowance
and the tolerance in output ulps beyond it. Every implementation is judged against the same
``Expected``: a peer that computes another function, or the same one less accurately, shows its
actual error and fails where it exceeds the allowance.

Tolerances (output ulps; the forward ones are the C++ table's, src/reference/tolerance.cpp):

- rms_norm / add_rms_norm y: 1 (one rounding of an fp32 result lands on the correctly rounded
  value or, next to a tie, its neighbour); add_rms_norm s: 0 (fp32 add, one rounding: bitwise).
- rope q_out / k_out: 1 (fp32 difference of products, one rounding).
- qk_norm_rope q_out / k_out: 2, plus 16 fp32 ulps of each rotated pair's norm (the fp32 norm's
  rounding under cancellation in ``a c - b s``).
- gradients (dx, dresidual, dw, dq, dk, dq_weight, dk_weight): 1, plus ``GRAD_REL_ALLOW`` times
  the sum of the magnitudes of the terms that make up the element (an fp32 reduction over up to
  2^15 rows, or a difference under cancellation, carries error relative to those terms, not to
  the result). The C++ table has no backward entries yet; this allowance is the benchmark's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from bench.peers.ulp import fp32_ulps, round_to

#: Relative allowance of gradient elements, against the magnitudes of their terms: 2^-17 is 128
#: fp32 ulps, ample for fp32 accumulation, and 32 times finer than a bf16 ulp.
GRAD_REL_ALLOW = 2.0 ** -17
#: qk_norm_rope: fp32 ulps of each rotated pair's norm (the C++ table's pair_term).
QK_PAIR_FP32_ULPS = 16.0


@dataclass
class Expected:
    """One output's float64 reference, absolute allowance (or None) and tolerance in ulps."""

    name: str
    ref: torch.Tensor
    allow: Optional[torch.Tensor]
    tol_ulp: float


# ---- RMSNorm ----------------------------------------------------------------------------------

def _rms(x64: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)


def _rms_norm_backward(x64, w64, dy64, eps, reduce_dims):
    """dx, dw of y = x * r * w (r = rsqrt(mean(x^2) + eps)) and each one's term magnitudes."""
    r = _rms(x64, eps)
    xh = x64 * r
    g = dy64 * w64
    c = (g * xh).mean(-1, keepdim=True)
    dx = r * (g - xh * c)
    dx_mag = r * (g.abs() + xh.abs() * (g * xh).abs().mean(-1, keepdim=True))
    dw = (dy64 * xh).sum(dim=reduce_dims)
    dw_mag = (dy64 * xh).abs().sum(dim=reduce_dims)
    return dx, dx_mag, dw, dw_mag


def rms_norm_forward(x: torch.Tensor, w: torch.Tensor, eps: float) -> List[Expected]:
    x64 = x.double()
    return [Expected("y", x64 * _rms(x64, eps) * w.double(), None, 1.0)]


def rms_norm_fwd_bwd(x: torch.Tensor, w: torch.Tensor, eps: float, dy: torch.Tensor
                     ) -> List[Expected]:
    dx, dx_mag, dw, dw_mag = _rms_norm_backward(x.double(), w.double(), dy.double(), eps,
                                                tuple(range(x.dim() - 1)))
    return [Expected("dx", dx, GRAD_REL_ALLOW * dx_mag, 1.0),
            Expected("dw", dw, GRAD_REL_ALLOW * dw_mag, 1.0)]


def _add(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """s = x + residual as the contract defines it: exact sum, one rounding to residual's dtype."""
    return round_to(x.double() + residual.double(), residual.dtype).double()


def add_rms_norm_forward(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
                         ) -> List[Expected]:
    s = _add(x, residual)
    return [Expected("y", s * _rms(s, eps) * w.double(), None, 1.0),
            Expected("s", s, None, 0.0)]


def add_rms_norm_fwd_bwd(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float,
                         dy: torch.Tensor, ds: torch.Tensor) -> List[Expected]:
    """Gradients of (y, s) with seeds (dy, ds): both inputs get ds + the norm's dx."""
    s = _add(x, residual)
    dn, dn_mag, dw, dw_mag = _rms_norm_backward(s, w.double(), dy.double(), eps,
                                                tuple(range(x.dim() - 1)))
    d = dn + ds.double()
    d_allow = GRAD_REL_ALLOW * (dn_mag + ds.double().abs())
    return [Expected("dx", d, d_allow, 1.0), Expected("dresidual", d, d_allow, 1.0),
            Expected("dw", dw, GRAD_REL_ALLOW * dw_mag, 1.0)]


# ---- RoPE -------------------------------------------------------------------------------------

def cos_sin_per_token(cache: torch.Tensor, positions: torch.Tensor
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The float64 values of the cache rows each token reads: c, s of shape [T, 1, R/2]."""
    rows = cache[positions].double()
    half = cache.shape[-1] // 2
    return rows[:, None, :half], rows[:, None, half:]


def _rotate(x64: torch.Tensor, c: torch.Tensor, s: torch.Tensor, inverse: bool = False
            ) -> torch.Tensor:
    """Neox pairs (i, i + R/2): (a, b) -> (a c - b s, a s + b c); inverse uses -s."""
    half = c.shape[-1]
    a, b = x64[..., :half], x64[..., half:2 * half]
    if inverse:
        s = -s
    out = [a * c - b * s, a * s + b * c]
    if x64.shape[-1] > 2 * half:
        out.append(x64[..., 2 * half:])
    return torch.cat(out, dim=-1)


def rope_forward(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor,
                 cache: torch.Tensor) -> List[Expected]:
    c, s = cos_sin_per_token(cache, positions)
    return [Expected("q_out", _rotate(q.double(), c, s), None, 1.0),
            Expected("k_out", _rotate(k.double(), c, s), None, 1.0)]


def rope_fwd_bwd(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cache: torch.Tensor,
                 dq_out: torch.Tensor, dk_out: torch.Tensor) -> List[Expected]:
    """The gradient of a rotation is the inverse rotation of the output gradient."""
    c, s = cos_sin_per_token(cache, positions)
    dq = _rotate(dq_out.double(), c, s, inverse=True)
    dk = _rotate(dk_out.double(), c, s, inverse=True)
    return [Expected("dq", dq, GRAD_REL_ALLOW * _pair_norm(dq_out.double(), c.shape[-1]), 1.0),
            Expected("dk", dk, GRAD_REL_ALLOW * _pair_norm(dk_out.double(), c.shape[-1]), 1.0)]


def _pair_norm(x64: torch.Tensor, half: int) -> torch.Tensor:
    """|(x_i, x_{i+R/2})| placed at both channels of each pair (pass-through channels: |x|)."""
    a, b = x64[..., :half], x64[..., half:2 * half]
    n = torch.sqrt(a * a + b * b)
    out = [n, n]
    if x64.shape[-1] > 2 * half:
        out.append(x64[..., 2 * half:].abs())
    return torch.cat(out, dim=-1)


# ---- QK-norm + RoPE ---------------------------------------------------------------------------

def qk_norm_rope_forward(q, k, q_weight, k_weight, eps, positions, cache) -> List[Expected]:
    c, s = cos_sin_per_token(cache, positions)
    half = c.shape[-1]
    out = []
    for name, x, w in (("q_out", q, q_weight), ("k_out", k, k_weight)):
        x64 = x.double()
        n = x64 * _rms(x64, eps) * w.double()
        out.append(Expected(name, _rotate(n, c, s), fp32_ulps(_pair_norm(n, half),
                                                              QK_PAIR_FP32_ULPS), 2.0))
    return out


def qk_norm_rope_fwd_bwd(q, k, q_weight, k_weight, eps, positions, cache, dq_out, dk_out
                         ) -> List[Expected]:
    """Gradients of q' = rope(rms_norm_per_head(q, wq)) (and k'): the inverse rotation of the
    output gradient, then the per-head RMSNorm backward; dw sums over tokens and heads."""
    c, s = cos_sin_per_token(cache, positions)
    grads: Dict[str, Expected] = {}
    for tag, x, w, dy in (("q", q, q_weight, dq_out), ("k", k, k_weight, dk_out)):
        g = _rotate(dy.double(), c, s, inverse=True)
        g_mag = _pair_norm(dy.double(), c.shape[-1])
        dx, dx_mag, dw, dw_mag = _rms_norm_backward(x.double(), w.double(), g, eps,
                                                    tuple(range(x.dim() - 1)))
        # The rotation mixes a pair before the norm's backward sees it: bound each term by the
        # pair's magnitude (|g_i| <= |pair|) so the allowance covers the rotated values.
        _, dx_mag2, _, dw_mag2 = _rms_norm_backward(x.double(), w.double(), g_mag, eps,
                                                    tuple(range(x.dim() - 1)))
        grads["d" + tag] = Expected("d" + tag, dx, GRAD_REL_ALLOW * torch.maximum(dx_mag, dx_mag2),
                                    1.0)
        grads["d" + tag + "_weight"] = Expected(
            "d" + tag + "_weight", dw, GRAD_REL_ALLOW * torch.maximum(dw_mag, dw_mag2), 1.0)
    return [grads["dq"], grads["dk"], grads["dq_weight"], grads["dk_weight"]]
