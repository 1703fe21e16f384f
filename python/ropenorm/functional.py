"""Functional API over the ``torch.ops.ropenorm`` operators.

Every function here is a thin Python layer: it turns friendly arguments (strings for enums, None
for absent tensors) into the operator's schema and calls it. The arithmetic, the validation and
the error messages are the C++ core's. Bad input raises ValueError (wrong shape, stride, value,
device), TypeError (unsupported dtype) or RuntimeError (CUDA failure), each naming the argument.

See docs/python.md for the operators and their schemas.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch

from . import _ops

__all__ = [
    "rms_norm",
    "add_rms_norm",
    "rope",
    "apply_rope",
    "apply_rotary_pos_emb",
    "qk_norm_rope",
    "rope_inv_freq",
    "build_rope_cache",
    "rope_parameters_from_hf_config",
]

_ROUNDING = {"exact": 0, "hf_llama": 1}
_STYLE = {"neox": 0, "gptj": 1}
_COS_SIN_KIND = {"cache": 0, "hf_cos_sin": 1, "hf_cos_sin_gathered": 2, "inv_freq": 3}


def _enum(value: Union[str, int], names: Mapping[str, int], arg: str, op: str) -> int:
    if isinstance(value, bool):
        raise TypeError(f"ropenorm.{op}: argument '{arg}': expected one of {list(names)}, "
                        f"received {value!r}")
    if isinstance(value, int):
        return value  # range-checked by the operator
    if isinstance(value, str) and value in names:
        return names[value]
    raise ValueError(
        f"ropenorm.{op}: argument '{arg}': expected one of {list(names)}, received {value!r}"
    )


# ------------------------------------------------------------------------------------------------
# RMSNorm


def rms_norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    rounding: Union[str, int] = "exact",
    return_rstd: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """RMSNorm over the last dim: ``y = x / sqrt(mean(x^2) + eps) * (weight + weight_offset)``.

    Args:
        x: ``[..., N]`` float32/float16/bfloat16 CUDA tensor, last dim contiguous (any other
            strides).
        weight: ``[N]``, any of those dtypes (may differ from x's), or None (factor 1).
        eps: finite, in [1e-12, 1e-2].
        weight_offset: 0 for Llama, 1 for Gemma's ``(1 + w)``; must be 0 without a weight.
        rounding: ``"exact"`` (one rounding of the float32 result) or ``"hf_llama"`` (Hugging
            Face LlamaRMSNorm's: normalise, round to x's dtype, multiply by the weight).
        return_rstd: also return ``rstd = 1 / sqrt(mean(x^2) + eps)`` (float32, ``x.shape[:-1]``).

    Returns:
        y (x's shape and dtype, contiguous), or ``(y, rstd)``.

    Gradients: with respect to x and weight, through the ``rms_norm_backward`` kernel (the
    exact formula whatever ``rounding``; rstd is not differentiable).
    """
    _ops.require("rms_norm")
    y, rstd = torch.ops.ropenorm.rms_norm(
        x, weight, float(eps), float(weight_offset), _enum(rounding, _ROUNDING, "rounding",
                                                          "rms_norm")
    )
    return (y, rstd) if return_rstd else y


def add_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    rounding: Union[str, int] = "exact",
    inplace: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMSNorm: ``s = residual + x`` (rounded to residual's dtype),
    ``y = rms_norm(s)``.

    Args:
        x: ``[..., N]`` float32/float16/bfloat16 CUDA tensor.
        residual: x's shape; x's dtype or float32.
        weight, eps, weight_offset, rounding: as for :func:`rms_norm`.
        inplace: write ``s`` into ``residual`` (returned as the second value) instead of a new
            tensor. The in-place form has no autograd.

    Gradients (out of place): with respect to x, residual and weight, through the
    ``add_rms_norm_backward`` kernel; a gradient reaching s through the second output adds in.

    Returns:
        ``(y, s)``: y in x's dtype, s in residual's dtype.
    """
    op = "add_rms_norm_" if inplace else "add_rms_norm"
    _ops.require(op)
    r = _enum(rounding, _ROUNDING, "rounding", op)
    if inplace:
        y = torch.ops.ropenorm.add_rms_norm_(x, residual, weight, float(eps),
                                             float(weight_offset), r)
        return y, residual
    return torch.ops.ropenorm.add_rms_norm(x, residual, weight, float(eps),
                                           float(weight_offset), r)


# ------------------------------------------------------------------------------------------------
# RoPE


def _cos_sin_kind(op, q, positions, offset, seq_offsets, cos_sin_cache, cos, sin, inv_freq,
                  cos_sin_kind) -> int:
    if cos_sin_kind is not None:
        return _enum(cos_sin_kind, _COS_SIN_KIND, "cos_sin_kind", op)
    given = [name for name, t in (("cos_sin_cache", cos_sin_cache), ("cos", cos), ("sin", sin),
                                  ("inv_freq", inv_freq)) if t is not None]
    if given == ["cos_sin_cache"]:
        return 0
    if given == ["inv_freq"]:
        return 3
    if given == ["cos", "sin"]:
        # Hugging Face's position_embeddings are already gathered per token: [T, R] for a 3-D
        # q, [B, S, R] (or [1, S, R], broadcast over B) for a 4-D q. A [P, R] table is indexed
        # by position. (For a 3-D q without positions, a [T, R] table read at arange(T) is the
        # same thing either way.)
        lead, q_lead = tuple(cos.shape[:-1]), tuple(q.shape[:-2])
        per_token = lead == q_lead or (q.dim() == 4 and lead == (1,) + q_lead[1:])
        gathered = (positions is None and seq_offsets is None and offset == 0
                    and cos.dim() == q.dim() - 1 and per_token)
        return 2 if gathered else 1
    raise ValueError(
        f"ropenorm.{op}: expected exactly one cos/sin source: cos_sin_cache, cos and sin "
        f"together, or inv_freq; received {given if given else 'none'}"
    )


def _rope_args(op, q, *, positions, cos_sin_cache, cos, sin, inv_freq, attention_scaling,
               offset, seq_offsets, style, rotary_dim, check_positions, cos_sin_kind):
    """The rope part of an operator's schema (everything but ``inverse``) from the friendly
    arguments: the cos/sin source inferred from the tensors given, enums as integers."""
    kind = _cos_sin_kind(op, q, positions, offset, seq_offsets, cos_sin_cache, cos, sin,
                         inv_freq, cos_sin_kind)
    if kind == 2 and cos is not None and q.dim() == 4 and cos.dim() == 3 and cos.shape[0] == 1:
        cos = cos.expand(q.shape[0], -1, -1)
        sin = sin.expand(q.shape[0], -1, -1) if sin is not None else None
    return dict(
        positions=positions,
        cos_sin_kind=kind,
        cos_sin_cache=cos_sin_cache,
        cos=cos,
        sin=sin,
        inv_freq=inv_freq,
        attention_scaling=float(attention_scaling),
        offset=int(offset),
        seq_offsets=seq_offsets,
        style=_enum(style, _STYLE, "style", op),
        rotary_dim=0 if rotary_dim is None else int(rotary_dim),
        check_positions=bool(check_positions),
    )


def rope(
    q: torch.Tensor,
    k: Optional[torch.Tensor] = None,
    *,
    positions: Optional[torch.Tensor] = None,
    cos_sin_cache: Optional[torch.Tensor] = None,
    cos: Optional[torch.Tensor] = None,
    sin: Optional[torch.Tensor] = None,
    inv_freq: Optional[torch.Tensor] = None,
    attention_scaling: float = 1.0,
    offset: int = 0,
    seq_offsets: Optional[torch.Tensor] = None,
    style: Union[str, int] = "neox",
    rotary_dim: Optional[int] = None,
    inverse: bool = False,
    check_positions: bool = False,
    inplace: bool = False,
    cos_sin_kind: Optional[Union[str, int]] = None,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Rotary position embedding of q (and k).

    Args:
        q: ``[T, Hq, D]`` or ``[B, S, Hq, D]`` float32/float16/bfloat16 CUDA tensor, last dim
            contiguous, any other strides (a view into a packed QKV buffer works as is).
        k: same leading dims and D as q, q's dtype, any number of heads; or None.
        positions: int32/int64 ``[T]`` (3-D q) or ``[B, S]`` / ``[B * S]`` (4-D q). None means
            ``arange(S) + offset + seq_offsets[b]``.
        cos_sin_cache: ``[P, R]`` table (cos in the first R/2 columns, sin in the last R/2), as
            built by :func:`build_rope_cache`.
        cos, sin: Hugging Face tables, ``[P, R]`` indexed by position, or already gathered per
            token (``[T, R]`` / ``[B, S, R]``, a ``[1, S, R]`` one is broadcast over B).
        inv_freq: ``[R/2]`` float32: cos/sin computed in the kernel (times ``attention_scaling``).
        offset, seq_offsets: implicit positions (see ``positions``).
        style: ``"neox"`` (rotate_half pairs ``(i, i + R/2)``) or ``"gptj"`` (pairs ``(2i, 2i+1)``).
        rotary_dim: R (even, <= D); None means D. Channels R..D-1 pass through.
        inverse: rotate by -angle (the backward pass).
        check_positions: verify every position lies in the table (synchronises the stream; not
            usable inside CUDA graph capture).
        inplace: rotate q (and k) in place and return them; no autograd.
        cos_sin_kind: force the source (``"cache"``, ``"hf_cos_sin"``,
            ``"hf_cos_sin_gathered"``, ``"inv_freq"``) instead of inferring it from the tensors.

    Returns:
        q_out, or ``(q_out, k_out)`` when k is given (new contiguous tensors, or q and k
        themselves when ``inplace``).
    """
    args = _rope_args("rope", q, positions=positions, cos_sin_cache=cos_sin_cache, cos=cos,
                      sin=sin, inv_freq=inv_freq, attention_scaling=attention_scaling,
                      offset=offset, seq_offsets=seq_offsets, style=style,
                      rotary_dim=rotary_dim, check_positions=check_positions,
                      cos_sin_kind=cos_sin_kind)
    args["inverse"] = bool(inverse)
    if inplace:
        if k is None:
            _ops.require("rope_")
            torch.ops.ropenorm.rope_(q, **args)
            return q
        _ops.require("rope_qk_")
        torch.ops.ropenorm.rope_qk_(q, k, **args)
        return q, k
    if k is None:
        _ops.require("rope")
        return torch.ops.ropenorm.rope(q, **args)
    _ops.require("rope_qk")
    return torch.ops.ropenorm.rope_qk(q, k, **args)


#: Alias of :func:`rope`.
apply_rope = rope


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
    unsqueeze_dim: int = 1,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for Hugging Face's ``apply_rotary_pos_emb`` (neox style, full rotary).

    q ``[B, Hq, S, D]``, k ``[B, Hk, S, D]`` (``unsqueeze_dim=1``) or ``[B, S, H, D]``
    (``unsqueeze_dim=2``); cos, sin ``[B or 1, S, D]`` as a Hugging Face rotary embedding returns
    them. Partial rotary: pass cos/sin of width R < D; channels R..D-1 pass through.
    Returns ``(q_embed, k_embed)`` with q's and k's shapes.
    """
    if unsqueeze_dim not in (1, 2):
        raise ValueError(
            f"ropenorm.apply_rotary_pos_emb: argument 'unsqueeze_dim': expected 1 ([B, H, S, D]) "
            f"or 2 ([B, S, H, D]), received {unsqueeze_dim}"
        )
    if unsqueeze_dim == 1:
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    q_out, k_out = rope(q, k, cos=cos, sin=sin, rotary_dim=cos.shape[-1],
                        cos_sin_kind="hf_cos_sin_gathered")
    if unsqueeze_dim == 1:
        q_out, k_out = q_out.transpose(1, 2), k_out.transpose(1, 2)
    return q_out, k_out


# ------------------------------------------------------------------------------------------------
# Fused QK-norm + RoPE


def qk_norm_rope(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    weight_offset: float = 0.0,
    positions: Optional[torch.Tensor] = None,
    cos_sin_cache: Optional[torch.Tensor] = None,
    cos: Optional[torch.Tensor] = None,
    sin: Optional[torch.Tensor] = None,
    inv_freq: Optional[torch.Tensor] = None,
    attention_scaling: float = 1.0,
    offset: int = 0,
    seq_offsets: Optional[torch.Tensor] = None,
    style: Union[str, int] = "neox",
    rotary_dim: Optional[int] = None,
    check_positions: bool = False,
    inplace: bool = False,
    return_rstd: bool = False,
    cos_sin_kind: Optional[Union[str, int]] = None,
) -> Union[Tuple[torch.Tensor, torch.Tensor],
           Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per-head RMSNorm of q and k followed by RoPE, in one pass (Qwen3, OLMo-2, Gemma-3):
    ``q_out = rope(rms_norm(q_head) * (q_weight + weight_offset))``, likewise for k, the
    normalised values kept in float32 between the two steps (one rounding per output element).

    Args:
        q: ``[T, Hq, D]`` or ``[B, S, Hq, D]`` float32/float16/bfloat16 CUDA tensor, last dim
            contiguous, any other strides (views of a packed QKV buffer are read in place, with
            no copy); D even, at most 512.
        k: same leading dims, D and dtype as q, any number of heads (GQA).
        q_weight, k_weight: ``[D]`` each, float32/float16/bfloat16 (independent of q's dtype).
        eps: finite, in [1e-12, 1e-2].
        weight_offset: 0 for Qwen3 / OLMo-2, 1 for Gemma's ``(1 + w)``.
        positions, cos_sin_cache, cos, sin, inv_freq, attention_scaling, offset, seq_offsets,
        style, rotary_dim, check_positions, cos_sin_kind: the rotation, as for :func:`rope`
            (the same cos/sin inference).
        inplace: write the results into q and k (and return them); no autograd.
        return_rstd: also return the per-head ``rstd`` of q and of k (float32,
            ``q.shape[:-1]`` / ``k.shape[:-1]``).

    Returns:
        ``(q_out, k_out)``, or ``(q_out, k_out, q_rstd, k_rstd)`` with ``return_rstd``.

    Gradients (out of place): with respect to q, k, q_weight and k_weight, through the fused
    ``qk_norm_rope_backward`` kernel; none to positions or the cos/sin source.
    """
    op = "qk_norm_rope_" if inplace else "qk_norm_rope"
    _ops.require(op)
    args = _rope_args(op, q, positions=positions, cos_sin_cache=cos_sin_cache, cos=cos, sin=sin,
                      inv_freq=inv_freq, attention_scaling=attention_scaling, offset=offset,
                      seq_offsets=seq_offsets, style=style, rotary_dim=rotary_dim,
                      check_positions=check_positions, cos_sin_kind=cos_sin_kind)
    if inplace:
        q_rstd, k_rstd = torch.ops.ropenorm.qk_norm_rope_(q, k, q_weight, k_weight, float(eps),
                                                          float(weight_offset), **args)
        q_out, k_out = q, k
    else:
        q_out, k_out, q_rstd, k_rstd = torch.ops.ropenorm.qk_norm_rope(
            q, k, q_weight, k_weight, float(eps), float(weight_offset), **args
        )
    return (q_out, k_out, q_rstd, k_rstd) if return_rstd else (q_out, k_out)


# ------------------------------------------------------------------------------------------------
# Rope parameters and the cos/sin cache (computed on the host by the C++ builders)

_CONFIG_DEFAULTS: Dict[str, Any] = dict(
    factor=1.0,
    max_position_embeddings=0,
    original_max_position_embeddings=0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    beta_fast=32.0,
    beta_slow=1.0,
    mscale=0.0,
    mscale_all_dim=0.0,
    attention_factor=0.0,
    truncate=True,
    seq_len=0,
)


def _rotary_dim(op, rotary_dim, head_dim, partial_rotary_factor) -> int:
    if rotary_dim is not None:
        return int(rotary_dim)
    if head_dim is None:
        raise ValueError(f"ropenorm.{op}: give rotary_dim, or head_dim (and partial_rotary_factor)")
    return int(head_dim * partial_rotary_factor)


def _config_args(op: str, rope_type: Optional[str], rope_theta: float, rotary_dim: int,
                 params: Dict[str, Any]) -> Dict[str, Any]:
    unknown = sorted(set(params) - set(_CONFIG_DEFAULTS))
    if unknown:
        raise ValueError(f"ropenorm.{op}: unknown rope parameter(s) {unknown}; accepted: "
                         f"rope_type, rope_theta, rotary_dim / head_dim, partial_rotary_factor, "
                         f"{', '.join(_CONFIG_DEFAULTS)}")
    out: Dict[str, Any] = dict(rope_type=rope_type or "default", rope_theta=float(rope_theta),
                               rotary_dim=rotary_dim)
    for name, default in _CONFIG_DEFAULTS.items():
        value = params.get(name)
        # Hugging Face reads several of these as `value or default`: None means unset.
        if value is None:
            value = default
        out[name] = type(default)(value)
    return out


def rope_inv_freq(
    *,
    rope_type: Optional[str] = "default",
    rope_theta: float = 10000.0,
    rotary_dim: Optional[int] = None,
    head_dim: Optional[int] = None,
    partial_rotary_factor: float = 1.0,
    hf_float32: bool = True,
    device: Optional[Union[str, torch.device]] = None,
    **rope_parameters: Any,
) -> Tuple[torch.Tensor, float]:
    """Inverse frequencies ``[R/2]`` and the attention scaling of a rope configuration.

    ``hf_float32=True`` returns float32 values computed the way Hugging Face does (its float32
    operation order), the ``inv_freq`` source of :func:`rope`; False returns the float64 values.
    Keyword names follow Hugging Face's ``rope_parameters`` (``factor``, ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``,
    ``mscale``, ``mscale_all_dim``, ``attention_factor``, ``truncate``) plus
    ``max_position_embeddings`` and ``seq_len`` for dynamic NTK.
    """
    _ops.require("rope_inv_freq", cuda=False)
    r = _rotary_dim("rope_inv_freq", rotary_dim, head_dim, partial_rotary_factor)
    args = _config_args("rope_inv_freq", rope_type, rope_theta, r, rope_parameters)
    inv_freq, scaling = torch.ops.ropenorm.rope_inv_freq(hf_float32=bool(hf_float32), **args)
    return (inv_freq.to(device) if device is not None else inv_freq), float(scaling)


def build_rope_cache(
    max_positions: int,
    *,
    rope_type: Optional[str] = "default",
    rope_theta: float = 10000.0,
    rotary_dim: Optional[int] = None,
    head_dim: Optional[int] = None,
    partial_rotary_factor: float = 1.0,
    dtype: torch.dtype = torch.float32,
    device: Optional[Union[str, torch.device]] = None,
    first_position: int = 0,
    **rope_parameters: Any,
) -> torch.Tensor:
    """The ``[max_positions, R]`` cos/sin cache of a rope configuration (the ``cos_sin_cache``
    source of :func:`rope`): row p holds ``cos(p * f_i) * s`` for ``i < R/2``, then
    ``sin(p * f_i) * s``, computed in float64 on the host from Hugging Face's float32 frequencies
    ``f_i`` and attention scaling ``s``, each value rounded once to ``dtype``.

    Rows ``first_position .. first_position + max_positions - 1`` when ``first_position`` is set.
    Keyword names as for :func:`rope_inv_freq`. Returned on ``device`` (CPU when None).
    """
    _ops.require("build_rope_cache", cuda=False)
    r = _rotary_dim("build_rope_cache", rotary_dim, head_dim, partial_rotary_factor)
    args = _config_args("build_rope_cache", rope_type, rope_theta, r, rope_parameters)
    cache = torch.ops.ropenorm.build_rope_cache(int(max_positions), dtype,
                                                first_position=int(first_position), **args)
    return cache.to(device) if device is not None else cache


def rope_parameters_from_hf_config(config: Any) -> Dict[str, Any]:
    """Keyword arguments for :func:`build_rope_cache` / :func:`rope_inv_freq` from a Hugging Face
    model config (``rope_parameters``, or the older ``rope_scaling`` + ``rope_theta``;
    ``head_dim`` or ``hidden_size // num_attention_heads``; ``partial_rotary_factor``;
    ``max_position_embeddings``)."""

    def get(name, default=None):
        if isinstance(config, Mapping):
            return config.get(name, default)
        return getattr(config, name, default)

    params = dict(get("rope_parameters") or get("rope_scaling") or {})
    rope_type = params.pop("rope_type", None) or params.pop("type", None) or "default"
    theta = params.pop("rope_theta", None) or get("rope_theta", 10000.0)
    partial = params.pop("partial_rotary_factor", None) or get("partial_rotary_factor", 1.0)
    head_dim = get("head_dim") or (get("hidden_size") // get("num_attention_heads"))
    out: Dict[str, Any] = dict(
        rope_type=rope_type,
        rope_theta=float(theta),
        rotary_dim=int(head_dim * partial),
    )
    max_pos = get("max_position_embeddings")
    if max_pos is not None:
        out["max_position_embeddings"] = int(max_pos)
    for name in _CONFIG_DEFAULTS:
        if name in params and params[name] is not None:
            out[name] = params[name]
    if rope_type == "yarn" and "original_max_position_embeddings" not in out and max_pos:
        # Hugging Face's fallback when the yarn parameters do not name it.
        out["original_max_position_embeddings"] = int(max_pos)
    if not math.isfinite(out["rope_theta"]):
        raise ValueError(f"rope_parameters_from_hf_config: rope_theta {out['rope_theta']} is not "
                         "finite")
    return out
