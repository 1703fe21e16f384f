"""torch.nn modules over the ropenorm operators.

- :class:`RMSNorm`: drop-in for ``torch.nn.RMSNorm`` (same constructor, same ``weight``
  parameter and state_dict).
- :class:`FusedAddRMSNorm`: residual add + RMSNorm in one pass, returning ``(y, residual)``.
- :class:`RotaryEmbedding`: a rope configuration with its cos/sin cache as a buffer.
- :class:`QKNormRoPE`: the fused per-head RMSNorm of q and k and their rotation (Qwen3, OLMo-2,
  Gemma-3), with the two norm weights as parameters.

The modules run the ropenorm kernels on CUDA tensors, in training too (the operators have
backward kernels). The two norm modules compute with torch's own operations for CPU tensors,
so a model keeps working there: the ropenorm kernels are CUDA only.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple, Union

import torch
from torch import nn

from . import functional as F_rn

__all__ = ["RMSNorm", "FusedAddRMSNorm", "RotaryEmbedding", "QKNormRoPE"]

_ShapeT = Union[int, Tuple[int, ...], torch.Size]


def _needs_grad(*tensors: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


# The CPU path of the norm modules (the kernels are CUDA only).
def _torch_rms_norm(x, weight, eps, weight_offset, normalized_shape):
    w = weight
    if w is not None and weight_offset != 0.0:
        w = w + weight_offset
    if w is not None and w.dtype != x.dtype:
        # ropenorm returns x's dtype; do the same on this path.
        return torch.nn.functional.rms_norm(x.float(), normalized_shape, w.float(), eps).to(x.dtype)
    return torch.nn.functional.rms_norm(x, normalized_shape, w, eps)


class RMSNorm(nn.Module):
    """Drop-in for ``torch.nn.RMSNorm``: ``y = x / sqrt(mean(x^2) + eps) * weight`` over the last
    ``len(normalized_shape)`` dims.

    Same constructor and state (a ``weight`` parameter of ``normalized_shape``, ones at init,
    absent when ``elementwise_affine=False``), so state_dicts load both ways. ``eps=None`` means
    ``torch.finfo(x.dtype).eps``, as in torch. Extras (keyword-only): ``weight_offset`` (1 for
    Gemma's ``(1 + w)``) and ``rounding`` (``"exact"`` or ``"hf_llama"``).

    Differences: the output has x's dtype (torch promotes with the weight's dtype), and eps must
    lie in [1e-12, 1e-2] on the ropenorm path. CUDA tensors run the ropenorm kernels, forward and
    backward; CPU tensors run ``torch.nn.functional.rms_norm``.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(
        self,
        normalized_shape: _ShapeT,
        eps: Optional[float] = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Optional[torch.dtype] = None,
        *,
        weight_offset: float = 0.0,
        rounding: str = "exact",
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        self.rounding = rounding
        if elementwise_affine:
            self.weight = nn.Parameter(
                torch.empty(self.normalized_shape, device=device, dtype=dtype)
            )
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        if not x.is_cuda:
            return _torch_rms_norm(x, self.weight, eps, self.weight_offset, self.normalized_shape)
        k = len(self.normalized_shape)
        shape = x.shape
        weight = self.weight
        if k != 1:
            # Normalise over the last k dims as one row.
            x = x.reshape(*shape[: x.dim() - k], -1)
            weight = weight.reshape(-1) if weight is not None else None
        y = F_rn.rms_norm(x, weight, eps, weight_offset=self.weight_offset,
                          rounding=self.rounding)
        return y.reshape(shape) if k != 1 else y

    def extra_repr(self) -> str:
        s = "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(
            **self.__dict__
        )
        if self.weight_offset != 0.0:
            s += f", weight_offset={self.weight_offset}"
        if self.rounding != "exact":
            s += f", rounding={self.rounding!r}"
        return s


class FusedAddRMSNorm(nn.Module):
    """``forward(x, residual) -> (rms_norm(residual + x), residual + x)`` in one pass.

    The sum is rounded to residual's dtype (as the unfused ``residual + x``), the norm computed
    from it. ``inplace=True`` writes the sum into ``residual`` and returns it, when no gradient
    is needed; while one is (grad mode on and x, residual or the weight requires grad), the sum
    is returned as a new tensor and residual is left as it was, since autograd cannot follow an
    in-place update. The ``weight`` parameter is a ``[hidden_size]`` vector of ones at init.
    CUDA tensors run the ropenorm kernels, forward and backward; CPU tensors run torch's
    operations.
    """

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Optional[torch.dtype] = None,
        *,
        weight_offset: float = 0.0,
        rounding: str = "exact",
        inplace: bool = False,
    ) -> None:
        super().__init__()
        self.hidden_size = int(hidden_size)
        self.eps = float(eps)
        self.weight_offset = float(weight_offset)
        self.rounding = rounding
        self.inplace = inplace
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        inplace = self.inplace and not _needs_grad(x, residual, self.weight)
        if not x.is_cuda:
            s = residual + x.to(residual.dtype)
            y = _torch_rms_norm(s, self.weight, self.eps, self.weight_offset, (self.hidden_size,))
            if y.dtype != x.dtype:
                y = y.to(x.dtype)
            if inplace:
                residual.copy_(s)
                return y, residual
            return y, s
        return F_rn.add_rms_norm(x, residual, self.weight, self.eps,
                                 weight_offset=self.weight_offset, rounding=self.rounding,
                                 inplace=inplace)

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.eps}, weight_offset={self.weight_offset}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding with a precomputed cos/sin cache.

    Args:
        head_dim: D of q and k.
        max_position_embeddings: rows of the cache (positions 0 .. P-1).
        rope_theta, rope_type, partial_rotary_factor and ``**rope_parameters``: the rope
            configuration, named as in Hugging Face (see :func:`ropenorm.build_rope_cache`).
        style: ``"neox"`` (Hugging Face) or ``"gptj"`` (interleaved pairs).
        cache_dtype: dtype of the cache (float32 by default; bfloat16/float16 halve its reads).
        device: where the cache lives.

    ``forward(q, k=None, positions=None, offset=0, seq_offsets=None, inplace=False)`` returns
    q_out or ``(q_out, k_out)``; see :func:`ropenorm.rope`. The cache is a non-persistent buffer
    (rebuilt from the configuration, not saved in the state_dict).
    """

    def __init__(
        self,
        head_dim: int,
        max_position_embeddings: int,
        rope_theta: float = 10000.0,
        rope_type: str = "default",
        partial_rotary_factor: float = 1.0,
        *,
        style: str = "neox",
        cache_dtype: torch.dtype = torch.float32,
        device: Any = None,
        check_positions: bool = False,
        **rope_parameters: Any,
    ) -> None:
        super().__init__()
        self.head_dim = int(head_dim)
        self.rotary_dim = int(head_dim * partial_rotary_factor)
        self.max_position_embeddings = int(max_position_embeddings)
        self.rope_theta = float(rope_theta)
        self.rope_type = rope_type
        self.style = style
        self.check_positions = check_positions
        rope_parameters.setdefault("max_position_embeddings", self.max_position_embeddings)
        self.rope_parameters = dict(rope_parameters)
        cache = F_rn.build_rope_cache(
            self.max_position_embeddings,
            rope_type=rope_type,
            rope_theta=rope_theta,
            rotary_dim=self.rotary_dim,
            dtype=cache_dtype,
            device=device,
            **rope_parameters,
        )
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    @classmethod
    def from_hf_config(cls, config: Any, **kwargs: Any) -> "RotaryEmbedding":
        """From a Hugging Face model config (rope_parameters / rope_scaling, rope_theta,
        head_dim, partial_rotary_factor, max_position_embeddings)."""
        p = F_rn.rope_parameters_from_hf_config(config)
        head_dim = (getattr(config, "head_dim", None)
                    or config.hidden_size // config.num_attention_heads)
        rotary_dim = p.pop("rotary_dim")
        max_pos = p.pop("max_position_embeddings")
        return cls(head_dim, max_pos, rope_theta=p.pop("rope_theta"),
                   rope_type=p.pop("rope_type"), partial_rotary_factor=rotary_dim / head_dim,
                   **p, **kwargs)

    def forward(
        self,
        q: torch.Tensor,
        k: Optional[torch.Tensor] = None,
        positions: Optional[torch.Tensor] = None,
        offset: int = 0,
        seq_offsets: Optional[torch.Tensor] = None,
        inplace: bool = False,
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        return F_rn.rope(
            q,
            k,
            positions=positions,
            cos_sin_cache=self.cos_sin_cache,
            offset=offset,
            seq_offsets=seq_offsets,
            style=self.style,
            rotary_dim=self.rotary_dim,
            check_positions=self.check_positions,
            inplace=inplace,
        )

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
                f"max_position_embeddings={self.max_position_embeddings}, "
                f"rope_type={self.rope_type!r}, rope_theta={self.rope_theta}, style={self.style!r}")


class QKNormRoPE(nn.Module):
    """Fused per-head RMSNorm of q and k, then RoPE (Qwen3, OLMo-2, Gemma-3 attention).

    ``q_out = rope(rms_norm(q_head) * (q_weight + weight_offset))`` and likewise for k, in one
    kernel (:func:`ropenorm.qk_norm_rope`), with a fused backward.

    Args:
        head_dim: D of q and k (even, at most 512).
        eps: of both norms, in [1e-12, 1e-2].
        weight_offset: 0 for Qwen3 / OLMo-2, 1 for Gemma's ``(1 + w)``. The weights start at
            ``1 - weight_offset``, so the factor ``w + weight_offset`` starts at 1.
        device, dtype: of the two weights.
        max_position_embeddings: when given, the module builds a cos/sin cache of that many
            positions (a non-persistent buffer ``cos_sin_cache``, as :class:`RotaryEmbedding`)
            from ``rope_theta``, ``rope_type``, ``partial_rotary_factor``, ``cache_dtype`` and
            ``**rope_parameters``, used when forward is given no cos/sin source. When None, every
            forward call passes one (``cos``/``sin``, ``cos_sin_cache`` or ``inv_freq``).
        partial_rotary_factor: R = head_dim * factor rotary channels (also without a cache).
        style: ``"neox"`` (Hugging Face) or ``"gptj"``.
        check_positions: verify positions against the table (synchronises; see
            :func:`ropenorm.rope`).

    Parameters: ``q_weight`` and ``k_weight``, ``[head_dim]`` each. They are Hugging Face's
    ``self_attn.q_norm.weight`` and ``self_attn.k_norm.weight``: copy them in with
    :meth:`load_hf_norms` (or map those state_dict keys onto ``q_weight`` / ``k_weight``).

    ``forward(q, k, positions=None, cos=None, sin=None, cos_sin_cache=None, inv_freq=None,
    attention_scaling=1.0, offset=0, seq_offsets=None, inplace=False, return_rstd=False)``
    returns ``(q_out, k_out)`` (plus the rstds with ``return_rstd``); q ``[T, Hq, D]`` or
    ``[B, S, Hq, D]``, k likewise, any strides with the last dim contiguous (views of a packed
    QKV buffer), Hugging Face's gathered ``cos``/``sin`` (``position_embeddings``) accepted.
    """

    def __init__(
        self,
        head_dim: int,
        eps: float = 1e-6,
        weight_offset: float = 0.0,
        device: Any = None,
        dtype: Optional[torch.dtype] = None,
        *,
        max_position_embeddings: Optional[int] = None,
        rope_theta: float = 10000.0,
        rope_type: str = "default",
        partial_rotary_factor: float = 1.0,
        style: str = "neox",
        cache_dtype: torch.dtype = torch.float32,
        check_positions: bool = False,
        **rope_parameters: Any,
    ) -> None:
        super().__init__()
        self.head_dim = int(head_dim)
        self.eps = float(eps)
        self.weight_offset = float(weight_offset)
        self.rotary_dim = int(head_dim * partial_rotary_factor)
        self.style = style
        self.check_positions = check_positions
        self.q_weight = nn.Parameter(torch.empty(self.head_dim, device=device, dtype=dtype))
        self.k_weight = nn.Parameter(torch.empty(self.head_dim, device=device, dtype=dtype))
        self.reset_parameters()
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = float(rope_theta)
        self.rope_type = rope_type
        if max_position_embeddings is not None:
            rope_parameters.setdefault("max_position_embeddings", int(max_position_embeddings))
            cache = F_rn.build_rope_cache(
                int(max_position_embeddings),
                rope_type=rope_type,
                rope_theta=rope_theta,
                rotary_dim=self.rotary_dim,
                dtype=cache_dtype,
                device=device,
                **rope_parameters,
            )
            self.register_buffer("cos_sin_cache", cache, persistent=False)
        else:
            if rope_parameters:
                raise ValueError(
                    "ropenorm.QKNormRoPE: rope parameters "
                    f"{sorted(rope_parameters)} need max_position_embeddings (the module builds "
                    "its cos/sin cache from them)"
                )
            self.register_buffer("cos_sin_cache", None, persistent=False)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.q_weight.fill_(1.0 - self.weight_offset)
            self.k_weight.fill_(1.0 - self.weight_offset)

    @classmethod
    def from_hf_config(cls, config: Any, **kwargs: Any) -> "QKNormRoPE":
        """From a Hugging Face model config: head_dim, rms_norm_eps and the rope configuration
        (with a cos/sin cache of max_position_embeddings positions). Copy the norm weights in
        with :meth:`load_hf_norms`."""
        p = F_rn.rope_parameters_from_hf_config(config)
        head_dim = (getattr(config, "head_dim", None)
                    or config.hidden_size // config.num_attention_heads)
        rotary_dim = p.pop("rotary_dim")
        kwargs.setdefault("eps", getattr(config, "rms_norm_eps", 1e-6))
        return cls(head_dim, max_position_embeddings=p.pop("max_position_embeddings"),
                   rope_theta=p.pop("rope_theta"), rope_type=p.pop("rope_type"),
                   partial_rotary_factor=rotary_dim / head_dim, **p, **kwargs)

    def load_hf_norms(self, q_norm: nn.Module, k_norm: nn.Module) -> "QKNormRoPE":
        """Copies the ``weight`` of Hugging Face's ``q_norm`` and ``k_norm`` modules (e.g.
        Qwen3RMSNorm) into ``q_weight`` and ``k_weight``; returns self."""
        for name, src in (("q_norm", q_norm), ("k_norm", k_norm)):
            w = getattr(src, "weight", None)
            if w is None or tuple(w.shape) != (self.head_dim,):
                raise ValueError(
                    f"ropenorm.QKNormRoPE.load_hf_norms: argument '{name}': expected a module "
                    f"with a [{self.head_dim}] weight, received "
                    f"{None if w is None else list(w.shape)}"
                )
        with torch.no_grad():
            self.q_weight.copy_(q_norm.weight)
            self.k_weight.copy_(k_norm.weight)
        return self

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        positions: Optional[torch.Tensor] = None,
        cos: Optional[torch.Tensor] = None,
        sin: Optional[torch.Tensor] = None,
        cos_sin_cache: Optional[torch.Tensor] = None,
        inv_freq: Optional[torch.Tensor] = None,
        attention_scaling: float = 1.0,
        offset: int = 0,
        seq_offsets: Optional[torch.Tensor] = None,
        inplace: bool = False,
        return_rstd: bool = False,
    ) -> Union[Tuple[torch.Tensor, torch.Tensor],
               Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
        if cos is None and sin is None and cos_sin_cache is None and inv_freq is None:
            cos_sin_cache = self.cos_sin_cache
            if cos_sin_cache is None:
                raise ValueError(
                    "ropenorm.QKNormRoPE: no cos/sin source: pass cos and sin, cos_sin_cache or "
                    "inv_freq, or build the module with max_position_embeddings"
                )
        return F_rn.qk_norm_rope(
            q,
            k,
            self.q_weight,
            self.k_weight,
            self.eps,
            weight_offset=self.weight_offset,
            positions=positions,
            cos_sin_cache=cos_sin_cache,
            cos=cos,
            sin=sin,
            inv_freq=inv_freq,
            attention_scaling=attention_scaling,
            offset=offset,
            seq_offsets=seq_offsets,
            style=self.style,
            rotary_dim=self.rotary_dim,
            check_positions=self.check_positions,
            inplace=inplace,
            return_rstd=return_rstd,
        )

    def extra_repr(self) -> str:
        s = (f"head_dim={self.head_dim}, eps={self.eps}, rotary_dim={self.rotary_dim}, "
             f"style={self.style!r}")
        if self.weight_offset != 0.0:
            s += f", weight_offset={self.weight_offset}"
        if self.max_position_embeddings is not None:
            s += (f", max_position_embeddings={self.max_position_embeddings}, "
                  f"rope_type={self.rope_type!r}, rope_theta={self.rope_theta}")
        return s
