"""float64 references of every op the peer benchmark times, with each output's allowance.

Computed in torch on the same inputs every implementation receives (upcast to float64), from the
formulas of the contract (README.md, /work/shared/DESIGN.md section 1), not from any kernel or peer
code. Each output comes as an ``Expected``: the float64 values, an optional absolute allowance,
the tolerance in output ulps beyond it, and optionally the value whose ulp is the unit. Every
implementation is judged against the same ``Expected``: a peer that computes another function,
or the same one less accurately, shows its actual error and fails where it exceeds the allowance.

The tolerances and allowances are the C++ table's (src/reference/tolerance.cpp, which gives the
reasons; the entry names are in the constants below):

- rms_norm / add_rms_norm y: 1 ulp; add_rms_norm s: 0 (bitwise).
- rope q_out / k_out: 1 ulp; its gradients dq / dk are the inverse rotation: the same 1 ulp.
- qk_norm_rope q_out / k_out: 2 ulps beyond 16 fp32 ulps of each rotated pair's norm.
- RMSNorm backward dx (and dresidual): 1 ulp beyond 256 fp32 ulps of
  ``S = r (|g| + |xh| (|c| + r mean|g x|)) + |ds|``; dw: 1 ulp beyond (32 + 2 sqrt(M)) fp32 ulps
  of max|dw|.
- qk_norm_rope backward dq / dk: 1 ulp beyond 128 fp32 ulps of ``S_j = r (P_j |w_j| + |xh_j| M)``
  (P_j the norm of the rotated-gradient pair holding j, M = sum_i P_i |w_i| |xh_i| / D); dw: in
  ulps of max|dw|, 1 beyond (32 + 4 sqrt(head vectors)) fp32 ulps of max|dw|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

from bench.peers.ulp import fp32_ulps, round_to

#: qk_norm_rope pair_term: fp32 ulps of each rotated pair's norm.
QK_PAIR_FP32_ULPS = 16.0
#: rms_norm_backward dx_scale_term, dw_scale_term, dw_per_sqrt_rows (fp32 ulps).
RMS_DX_SCALE_ULPS = 256.0
RMS_DW_SCALE_ULPS = 32.0
RMS_DW_PER_SQRT_ROWS = 2.0
#: qk_norm_rope_backward dx_term, dw_term, dw_sum_term (fp32 ulps).
QK_DX_TERM_ULPS = 128.0
QK_DW_TERM_ULPS = 32.0
QK_DW_SUM_TERM_ULPS = 4.0


@dataclass
class Expected:
    """One output's float64 reference, absolute allowance (or None), tolerance in ulps beyond
    it, and the value whose ulp is the unit (None: each element's own)."""

    name: str
    ref: torch.Tensor
    allow: Optional[torch.Tensor]
    tol_ulp: float
    unit_at: Optional[float] = None


def _max_abs(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64, device=like.device)


# ---- RMSNorm ----------------------------------------------------------------------------------

def _rms(x64: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)


def _rms_norm_backward(x64, w64, dy64, eps):
    """dx, its scale S, and dw (summed over every leading dim) of y = x * r * w."""
    r = _rms(x64, eps)
    xh = x64 * r
    g = dy64 * w64
    c = (g * xh).mean(-1, keepdim=True)
    dx = r * (g - xh * c)
    scale = r * (g.abs() + xh.abs() * (c.abs() + r * (g * x64).abs().mean(-1, keepdim=True)))
    dw = (dy64 * xh).reshape(-1, x64.shape[-1]).sum(0)
    return dx, scale, dw


def _rms_dw(dw: torch.Tensor, rows: int) -> Expected:
    ulps = RMS_DW_SCALE_ULPS + RMS_DW_PER_SQRT_ROWS * math.sqrt(rows)
    return Expected("dw", dw, fp32_ulps(_scalar(_max_abs(dw), dw), ulps), 1.0)


def rms_norm_forward(x: torch.Tensor, w: torch.Tensor, eps: float) -> List[Expected]:
    x64 = x.double()
    return [Expected("y", x64 * _rms(x64, eps) * w.double(), None, 1.0)]


def rms_norm_fwd_bwd(x: torch.Tensor, w: torch.Tensor, eps: float, dy: torch.Tensor
                     ) -> List[Expected]:
    dx, scale, dw = _rms_norm_backward(x.double(), w.double(), dy.double(), eps)
    rows = x.numel() // x.shape[-1]
    return [Expected("dx", dx, fp32_ulps(scale, RMS_DX_SCALE_ULPS), 1.0), _rms_dw(dw, rows)]


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
    dn, scale, dw = _rms_norm_backward(s, w.double(), dy.double(), eps)
    d = dn + ds.double()
    allow = fp32_ulps(scale + ds.double().abs(), RMS_DX_SCALE_ULPS)
    rows = x.numel() // x.shape[-1]
    return [Expected("dx", d, allow, 1.0), Expected("dresidual", d, allow, 1.0),
            _rms_dw(dw, rows)]


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
    return [Expected("dq", dq, None, 1.0), Expected("dk", dk, None, 1.0)]


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
    output gradient gives g_n, then the per-head RMSNorm backward; dw sums over tokens and heads.
    """
    c, s = cos_sin_per_token(cache, positions)
    half = c.shape[-1]
    dx_out, dw_out = [], []
    for tag, x, w, dy in (("q", q, q_weight, dq_out), ("k", k, k_weight, dk_out)):
        x64, w64, dy64 = x.double(), w.double(), dy.double()
        g_n = _rotate(dy64, c, s, inverse=True)
        dx, _, dw = _rms_norm_backward(x64, w64, g_n, eps)
        r = _rms(x64, eps)
        xh = (x64 * r).abs()
        scale = _pair_norm(dy64, half) * w64.abs()  # a rotation keeps each pair's norm
        m = (scale * xh).mean(-1, keepdim=True)
        dx_out.append(Expected("d" + tag, dx, fp32_ulps(r * (scale + xh * m), QK_DX_TERM_ULPS),
                               1.0))
        vectors = x.numel() // x.shape[-1]
        top = _max_abs(dw)
        ulps = QK_DW_TERM_ULPS + QK_DW_SUM_TERM_ULPS * math.sqrt(vectors)
        dw_out.append(Expected("d" + tag + "_weight", dw, fp32_ulps(_scalar(top, dw), ulps), 1.0,
                               unit_at=top if top > 0 else None))
    return dx_out + dw_out
