"""Loading of the compiled operators, their fake (meta) implementations and autograd formulas.

The compiled library ``_ropenorm_ops.so`` registers the ``torch.ops.ropenorm.*`` operators with
torch's dispatcher (CUDA kernels in C++). This module loads it once, and registers in Python what
torch.compile, torch.export and autograd need on top:

- a fake implementation of each tensor op (output shapes, dtypes and strides only);
- autograd for ``rope`` and ``rope_qk``: the backward of a rotation is the inverse rotation with
  the same positions and cos/sin source, ``dq = rope(dq_out, inverse=not inverse)``; no gradient
  flows to positions or to the cos/sin tables;
- autograd for ``rms_norm`` and ``add_rms_norm`` whose backward raises NotImplementedError (the
  RMSNorm backward kernels do not exist yet); the forward works with tensors that require grad.

When the library is missing or cannot be loaded, nothing is registered and ``load_error`` says
why; ``require`` turns that into a RuntimeError at the first call of an op.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

LIBRARY_NAME = "_ropenorm_ops.so"
LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)

#: None when the operators are registered, else the reason they are not.
load_error: Optional[str] = None


def _load() -> Optional[str]:
    if not os.path.exists(LIBRARY_PATH):
        return (
            f"the compiled extension {LIBRARY_PATH} is missing; build and install the package "
            "with `pip install . --no-build-isolation` in an environment with a CUDA build of "
            "torch and scikit-build-core"
        )
    try:
        torch.ops.load_library(LIBRARY_PATH)
    except (OSError, RuntimeError) as exc:
        return (
            f"loading the compiled extension {LIBRARY_PATH} failed ({exc}); it must be built "
            f"against the installed torch {torch.__version__} "
            f"(CUDA {torch.version.cuda or 'none'})"
        )
    return None


load_error = _load()

_cuda_error: Optional[str] = None
_cuda_checked = False


def cuda_error() -> Optional[str]:
    """None when a CUDA device is usable, else why not (checked once)."""
    global _cuda_error, _cuda_checked
    if not _cuda_checked:
        if torch.version.cuda is None:
            _cuda_error = f"the installed torch {torch.__version__} is a build without CUDA"
        elif not torch.cuda.is_available():
            _cuda_error = "no CUDA device is available (torch.cuda.is_available() is False)"
        else:
            _cuda_error = None
        _cuda_checked = True
    return _cuda_error


def require(op: str, cuda: bool = True) -> None:
    """Raises a RuntimeError naming the op when the operators cannot run here."""
    if load_error is not None:
        raise RuntimeError(f"ropenorm.{op} is unavailable: {load_error}")
    if cuda and not torch.compiler.is_compiling():
        reason = cuda_error()
        if reason is not None:
            raise RuntimeError(f"ropenorm.{op} needs a CUDA device: {reason}")


def _contiguous_like(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return t.new_empty(t.shape, dtype=dtype if dtype is not None else t.dtype)


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    # Incoming gradients can be expanded (stride 0) or otherwise strided in the last dim; the
    # kernels read the last dim with stride 1.
    return t if t.dim() == 0 or t.stride(-1) == 1 else t.contiguous()


def _register() -> None:
    # ---- fake implementations --------------------------------------------------------------

    @torch.library.register_fake("ropenorm::rms_norm")
    def _rms_norm_fake(x, weight=None, eps=1e-6, weight_offset=0.0, rounding=0):
        return _contiguous_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)

    @torch.library.register_fake("ropenorm::add_rms_norm")
    def _add_rms_norm_fake(x, residual, weight=None, eps=1e-6, weight_offset=0.0, rounding=0):
        return _contiguous_like(x), _contiguous_like(residual)

    @torch.library.register_fake("ropenorm::add_rms_norm_")
    def _add_rms_norm_inplace_fake(
        x, residual, weight=None, eps=1e-6, weight_offset=0.0, rounding=0
    ):
        return _contiguous_like(x)

    @torch.library.register_fake("ropenorm::rope")
    def _rope_fake(q, *args, **kwargs):
        return _contiguous_like(q)

    @torch.library.register_fake("ropenorm::rope_qk")
    def _rope_qk_fake(q, k, *args, **kwargs):
        return _contiguous_like(q), _contiguous_like(k)

    @torch.library.register_fake("ropenorm::rope_")
    def _rope_inplace_fake(q, *args, **kwargs):
        return None

    @torch.library.register_fake("ropenorm::rope_qk_")
    def _rope_qk_inplace_fake(q, k, *args, **kwargs):
        return None

    # ---- autograd: rope --------------------------------------------------------------------

    # The schema's arguments after q (rope) or q, k (rope_qk), in order.
    rope_arg_names = (
        "positions",
        "cos_sin_kind",
        "cos_sin_cache",
        "cos",
        "sin",
        "inv_freq",
        "attention_scaling",
        "offset",
        "seq_offsets",
        "style",
        "rotary_dim",
        "inverse",
        "check_positions",
    )
    rope_tensor_args = ("positions", "cos_sin_cache", "cos", "sin", "inv_freq", "seq_offsets")

    def _save_rope_args(ctx, args) -> None:
        named = dict(zip(rope_arg_names, args))
        ctx.save_for_backward(*(named[n] for n in rope_tensor_args))
        ctx.rope_scalars = {n: v for n, v in named.items() if n not in rope_tensor_args}

    def _backward_kwargs(ctx) -> dict:
        kwargs = dict(zip(rope_tensor_args, ctx.saved_tensors))
        kwargs.update(ctx.rope_scalars)
        kwargs["inverse"] = not kwargs["inverse"]
        kwargs["check_positions"] = False  # checked by the forward call
        return kwargs

    def _rope_setup(ctx, inputs, output) -> None:
        _save_rope_args(ctx, inputs[1:])

    def _rope_backward(ctx, grad_q):
        dq = None
        if grad_q is not None:
            dq = torch.ops.ropenorm.rope(_last_dim_contiguous(grad_q), **_backward_kwargs(ctx))
        return (dq,) + (None,) * len(rope_arg_names)

    torch.library.register_autograd(
        "ropenorm::rope", _rope_backward, setup_context=_rope_setup
    )

    def _rope_qk_setup(ctx, inputs, output) -> None:
        _save_rope_args(ctx, inputs[2:])

    def _rope_qk_backward(ctx, grad_q, grad_k):
        kwargs = _backward_kwargs(ctx)
        dq = dk = None
        if grad_q is not None and grad_k is not None:
            dq, dk = torch.ops.ropenorm.rope_qk(
                _last_dim_contiguous(grad_q), _last_dim_contiguous(grad_k), **kwargs
            )
        elif grad_q is not None:
            dq = torch.ops.ropenorm.rope(_last_dim_contiguous(grad_q), **kwargs)
        elif grad_k is not None:
            dk = torch.ops.ropenorm.rope(_last_dim_contiguous(grad_k), **kwargs)
        return (dq, dk) + (None,) * len(rope_arg_names)

    torch.library.register_autograd(
        "ropenorm::rope_qk", _rope_qk_backward, setup_context=_rope_qk_setup
    )

    # ---- autograd: RMSNorm (forward only for now) ------------------------------------------

    def _no_setup(ctx, inputs, output) -> None:
        pass

    def _rms_norm_backward(ctx, *grads):
        raise NotImplementedError(
            "ropenorm.rms_norm has no backward pass yet: use it where no gradient flows through "
            "it (inference, torch.no_grad()), or torch.nn.functional.rms_norm for training "
            "(ropenorm.nn.RMSNorm does that switch by itself)"
        )

    def _add_rms_norm_backward(ctx, *grads):
        raise NotImplementedError(
            "ropenorm.add_rms_norm has no backward pass yet: use it where no gradient flows "
            "through it (inference, torch.no_grad()), or the unfused residual add and "
            "torch.nn.functional.rms_norm for training (ropenorm.nn.FusedAddRMSNorm does that "
            "switch by itself)"
        )

    torch.library.register_autograd(
        "ropenorm::rms_norm", _rms_norm_backward, setup_context=_no_setup
    )
    torch.library.register_autograd(
        "ropenorm::add_rms_norm", _add_rms_norm_backward, setup_context=_no_setup
    )


if load_error is None:
    _register()
