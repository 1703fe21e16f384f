"""The ropenorm calls behind the patched Hugging Face modules, and when each one may run.

Every function here takes the tensors a Hugging Face forward has at hand and either runs the
ropenorm kernel or returns None, in which case the caller runs the stock code. The kernel runs
when the tensors are CUDA tensors of a kernel dtype and, where a gradient is needed, the op has
a working backward (checked once by :func:`probe_backward`, since the RMSNorm and QK-norm + RoPE
backward passes come after their forwards). Anything else (CPU tensors, float64, a weight dtype
the stock code would promote to) takes the stock path, so a patched model works wherever the
stock one does.

The operators are called directly (``torch.ops.ropenorm.*``, positional arguments of the schemas
in docs/python.md) rather than through :mod:`ropenorm.functional`: a decode step calls them a few
dozen times, and the functional layer's argument parsing is most of an op's host time there.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

import ropenorm

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ROUNDING = {"exact": 0, "hf_llama": 1}
_HF_GATHERED = 2  # cos_sin_kind: Hugging Face cos/sin, gathered per token ([B, S, R])

#: op name -> whether autograd through it works ("rope" always does).
_backward: Dict[str, bool] = {"rms_norm": False, "add_rms_norm": False, "qk_norm_rope": False}


def has_fused_qk_norm_rope() -> bool:
    """Whether this ropenorm has the fused QK-norm + RoPE op (``ropenorm.qk_norm_rope``)."""
    return hasattr(ropenorm, "qk_norm_rope")


def probe_backward() -> Dict[str, bool]:
    """Finds out once, with a tiny CUDA call of each op, which ops have a working backward.

    An op whose backward raises NotImplementedError (registered before its kernels exist) is
    not used where a gradient is needed. Without CUDA nothing runs (and nothing is needed: the
    kernels run on CUDA tensors only)."""
    if not ropenorm.available():
        return dict(_backward)
    dev = torch.device("cuda", torch.cuda.current_device())

    def works(fn) -> bool:
        try:
            with torch.enable_grad():
                # [B=2, S=3, H=1, D=8] inputs a and b, a [D] weight.
                a, b = (torch.randn(2, 3, 1, 8, device=dev, requires_grad=True) for _ in "ab")
                w = torch.randn(8, device=dev, requires_grad=True)
                outs = fn(a, b, w)
                sum(o.float().sum() for o in outs).backward()
            return True
        except NotImplementedError:
            return False

    cos = torch.ones(2, 3, 8, device=dev)
    sin = torch.zeros(2, 3, 8, device=dev)
    _backward["rms_norm"] = works(
        lambda a, b, w: torch.ops.ropenorm.rms_norm(a, w, 1e-6, 0.0, 0)[:1])
    _backward["add_rms_norm"] = works(
        lambda a, b, w: torch.ops.ropenorm.add_rms_norm(a, b, w, 1e-6, 0.0, 0))
    if has_fused_qk_norm_rope():
        _backward["qk_norm_rope"] = works(
            lambda a, b, w: ropenorm.qk_norm_rope(a, b, w, w, 1e-6, cos=cos, sin=sin,
                                                  cos_sin_kind="hf_cos_sin_gathered"))
    return dict(_backward)


def _no_grad_needed(*tensors: torch.Tensor) -> bool:
    if not torch.is_grad_enabled():
        return True
    for t in tensors:
        if t.requires_grad:
            return False
    return True


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, weight_offset: float,
             rounding: int, same_dtype: bool) -> Optional[torch.Tensor]:
    """``y = x * r * (w + o)`` over the last dim, or None (run the stock norm)."""
    if not (x.is_cuda and x.dtype in KERNEL_DTYPES and weight.dtype in KERNEL_DTYPES):
        return None
    if same_dtype and weight.dtype != x.dtype:
        return None
    if not (_backward["rms_norm"] or _no_grad_needed(x, weight)):
        return None
    return torch.ops.ropenorm.rms_norm(x, weight, eps, weight_offset, rounding)[0]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 weight_offset: float, rounding: int,
                 same_dtype: bool) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """``(rms_norm(residual + x), residual + x)``, or None (run the stock add and norm)."""
    if not (x.is_cuda and x.dtype in KERNEL_DTYPES and weight.dtype in KERNEL_DTYPES):
        return None
    if residual.dtype != x.dtype or (same_dtype and weight.dtype != x.dtype):
        return None
    if not (_backward["add_rms_norm"] or _no_grad_needed(x, residual, weight)):
        return None
    return torch.ops.ropenorm.add_rms_norm(x, residual, weight, eps, weight_offset, rounding)


def _expand_batch(t: torch.Tensor, batch: int) -> torch.Tensor:
    # Hugging Face's cos/sin are [1, S, R] when every sequence has the same positions.
    return t if t.shape[0] == batch else t.expand(batch, -1, -1)


def rope_bshd(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """Rotates q ``[B, S, Hq, D]`` and k ``[B, S, Hk, D]`` (any strides, last dim contiguous) by
    Hugging Face's gathered cos/sin ``[B or 1, S, R]``; channels R..D-1 pass through. Returns
    new contiguous ``[B, S, H, D]`` tensors, or None (run the stock rotation)."""
    if not (q.is_cuda and q.dtype in KERNEL_DTYPES and k.dtype == q.dtype and cos.is_cuda
            and cos.dtype in KERNEL_DTYPES and sin.dtype == cos.dtype):
        return None
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        return None
    b = q.shape[0]
    return torch.ops.ropenorm.rope_qk(
        q, k, None, _HF_GATHERED, None, _expand_batch(cos, b), _expand_batch(sin, b), None, 1.0,
        0, None, 0, cos.shape[-1], False, False)


def qk_norm_rope_bshd(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                      k_weight: torch.Tensor, eps: float, weight_offset: float,
                      cos: torch.Tensor,
                      sin: torch.Tensor) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """Per-head RMSNorm then RoPE of q ``[B, S, Hq, D]`` and k ``[B, S, Hk, D]`` (views of the
    projections, no copy) in one pass, or None (run the stock norms and rotation)."""
    if not (q.is_cuda and q.dtype in KERNEL_DTYPES and k.dtype == q.dtype and cos.is_cuda
            and cos.dtype in KERNEL_DTYPES and sin.dtype == cos.dtype
            and q_weight.dtype in KERNEL_DTYPES and k_weight.dtype in KERNEL_DTYPES):
        return None
    if q.stride(-1) != 1 or k.stride(-1) != 1:
        return None
    if not (_backward["qk_norm_rope"] or _no_grad_needed(q, k, q_weight, k_weight)):
        return None
    b = q.shape[0]
    return ropenorm.qk_norm_rope(
        q, k, q_weight, k_weight, eps, weight_offset=weight_offset, cos=_expand_batch(cos, b),
        sin=_expand_batch(sin, b), rotary_dim=cos.shape[-1], cos_sin_kind="hf_cos_sin_gathered")
