"""torch.nn modules over the ropenorm operators.

- :class:`RMSNorm`: drop-in for ``torch.nn.RMSNorm`` (same constructor, same ``weight``
  parameter and state_dict).
- :class:`FusedAddRMSNorm`: residual add + RMSNorm in one pass, returning ``(y, residual)``.
- :class:`RotaryEmbedding`: a rope configuration with its cos/sin cache as a buffer.

The RMSNorm backward kernels do not exist yet: while a gradient is needed (grad mode on and an
input or the weight requires grad), the two norm modules compute with torch's own operations
instead, and on CPU tensors too, so a model keeps working everywhere; the ropenorm kernels run
for CUDA inference.
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple, Union

import torch
from torch import nn

from . import functional as F_rn

__all__ = ["RMSNorm", "FusedAddRMSNorm", "RotaryEmbedding"]

_ShapeT = Union[int, Tuple[int, ...], torch.Size]


def _needs_grad(*tensors: Optional[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


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
    lie in [1e-12, 1e-2] on the ropenorm path.
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
        if not x.is_cuda or _needs_grad(x, self.weight):
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
    from it. ``inplace=True`` writes the sum into ``residual`` and returns it (inference only).
    The ``weight`` parameter is a ``[hidden_size]`` vector of ones at init.
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
        if not x.is_cuda or _needs_grad(x, residual, self.weight):
            s = residual + x.to(residual.dtype)
            y = _torch_rms_norm(s, self.weight, self.eps, self.weight_offset, (self.hidden_size,))
            if y.dtype != x.dtype:
                y = y.to(x.dtype)
            if self.inplace and not _needs_grad(x, residual, self.weight):
                residual.copy_(s)
                return y, residual
            return y, s
        return F_rn.add_rms_norm(x, residual, self.weight, self.eps,
                                 weight_offset=self.weight_offset, rounding=self.rounding,
                                 inplace=self.inplace)

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
    ):
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
