"""The peers' formulas, written as Hugging Face transformers writes them, and the cos/sin cache.

These are what "torch eager" runs and what torch.compile compiles: LlamaRMSNorm's forward
(normalise in float32, round to the input dtype, multiply by the weight in the weight's dtype),
the decoder layer's residual add, ``rotate_half`` / ``apply_rotary_pos_emb`` (neox style) with
cos/sin gathered per token in the activations' dtype (LlamaRotaryEmbedding returns them in
x's dtype), and Qwen3's per-head q_norm / k_norm before the rotation.

The cos/sin cache ``[P, R]`` (cos in the first R/2 columns, sin in the last R/2; the layout of
ropenorm, vLLM and FlashInfer) is built here from Hugging Face's float32 inverse frequencies with
float64 angles, so every implementation and the reference read the same table.
"""

from __future__ import annotations

from typing import Tuple

import torch


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


def hf_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The decoder layer's ``hidden = residual + hidden`` followed by the next RMSNorm."""
    s = residual + x
    return hf_rms_norm(s, weight, eps), s


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate_half: ``cat(-x2, x1)`` of the two halves of the last dim."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                            sin: torch.Tensor, unsqueeze_dim: int = 1
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """apply_rotary_pos_emb; here q is [T, Hq, D], k [T, Hk, D], cos/sin [T, D] (per token)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def hf_qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                    k_weight: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, eps: float
                    ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Qwen3Attention: q_norm / k_norm (RMSNorm over each head's D channels), then the rotation."""
    return hf_apply_rotary_pos_emb(hf_rms_norm(q, q_weight, eps), hf_rms_norm(k, k_weight, eps),
                                   cos, sin)


def hf_inv_freq(rotary_dim: int, theta: float) -> torch.Tensor:
    """The default rope's float32 inverse frequencies, as Hugging Face computes them."""
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64).to(torch.float32) / rotary_dim
    return 1.0 / (theta ** exponent)


def rope_cache(max_positions: int, rotary_dim: int, theta: float,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """``[P, R]`` float32 cos | sin table: angle = p * inv_freq[i] in float64, rounded once."""
    inv_freq = hf_inv_freq(rotary_dim, theta).to(torch.float64)
    pos = torch.arange(max_positions, dtype=torch.float64)
    angle = pos[:, None] * inv_freq[None, :]
    return torch.cat((angle.cos(), angle.sin()), dim=-1).to(torch.float32).to(device)


def hf_cos_sin(cache: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """cos/sin per token in Hugging Face's layout (``cat(freqs, freqs)``), in dtype: [T, R]."""
    half = cache.shape[-1] // 2
    rows = cache[positions]
    cos = rows[:, :half]
    sin = rows[:, half:]
    return torch.cat((cos, cos), dim=-1).to(dtype), torch.cat((sin, sin), dim=-1).to(dtype)
