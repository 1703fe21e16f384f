"""ropenorm: RMSNorm, fused add + RMSNorm, rotary position embedding (RoPE) and fused QK-norm +
RoPE CUDA kernels for PyTorch, forward and backward.

``import ropenorm`` always works. When PyTorch is not importable, the compiled extension is
missing, or no CUDA device is usable, calling an op raises a RuntimeError that says which;
``ropenorm.available()`` and ``ropenorm.unavailable_reason()`` tell beforehand.

Operators: ``torch.ops.ropenorm.*`` (see docs/python.md); functional API: :mod:`ropenorm.functional`
(re-exported here); modules: :mod:`ropenorm.nn`.
"""

from __future__ import annotations

from typing import Optional

__version__ = "0.1.0"

__all__ = [
    "available",
    "unavailable_reason",
    "rms_norm",
    "add_rms_norm",
    "rope",
    "apply_rope",
    "apply_rotary_pos_emb",
    "qk_norm_rope",
    "rope_inv_freq",
    "build_rope_cache",
    "rope_parameters_from_hf_config",
    "RMSNorm",
    "FusedAddRMSNorm",
    "RotaryEmbedding",
    "QKNormRoPE",
]

try:
    import torch  # noqa: F401
except ImportError as _exc:  # pragma: no cover - exercised only without torch
    _torch_error: Optional[str] = f"PyTorch is not importable ({_exc}); install torch first"
else:
    _torch_error = None


def unavailable_reason(cuda: bool = True) -> Optional[str]:
    """None when the CUDA operators can run here, else why not.

    With ``cuda=False``: only whether the host-side builders (build_rope_cache, rope_inv_freq)
    can run.
    """
    if _torch_error is not None:
        return _torch_error
    from . import _ops

    if _ops.load_error is not None:
        return _ops.load_error
    return _ops.cuda_error() if cuda else None


def available(cuda: bool = True) -> bool:
    """True when the operators (``cuda=False``: the host-side builders) can run here."""
    return unavailable_reason(cuda) is None


if _torch_error is None:
    from . import _ops  # noqa: F401  (loads the extension, registers fakes and autograd)
    from . import functional, nn
    from .functional import (
        add_rms_norm,
        apply_rope,
        apply_rotary_pos_emb,
        build_rope_cache,
        qk_norm_rope,
        rms_norm,
        rope,
        rope_inv_freq,
        rope_parameters_from_hf_config,
    )
    from .nn import FusedAddRMSNorm, QKNormRoPE, RMSNorm, RotaryEmbedding
else:  # pragma: no cover - exercised only without torch

    def _unavailable(name: str):
        def call(*args, **kwargs):
            raise RuntimeError(f"ropenorm.{name} is unavailable: {_torch_error}")

        call.__name__ = name
        call.__qualname__ = name
        return call

    rms_norm = _unavailable("rms_norm")
    add_rms_norm = _unavailable("add_rms_norm")
    rope = _unavailable("rope")
    apply_rope = _unavailable("apply_rope")
    apply_rotary_pos_emb = _unavailable("apply_rotary_pos_emb")
    qk_norm_rope = _unavailable("qk_norm_rope")
    rope_inv_freq = _unavailable("rope_inv_freq")
    build_rope_cache = _unavailable("build_rope_cache")
    rope_parameters_from_hf_config = _unavailable("rope_parameters_from_hf_config")
    RMSNorm = _unavailable("RMSNorm")
    FusedAddRMSNorm = _unavailable("FusedAddRMSNorm")
    RotaryEmbedding = _unavailable("RotaryEmbedding")
    QKNormRoPE = _unavailable("QKNormRoPE")
