"""Loading of the compiled operators, their fake (meta) implementations and autograd formulas.

The compiled library ``_ropenorm_ops.so`` registers the ``torch.ops.ropenorm.*`` operators with
torch's dispatcher (CUDA kernels in C++). This module loads it once, and registers in Python what
torch.compile, torch.export and autograd need on top:

- a fake implementation of each tensor op (output shapes, dtypes and strides only);
- autograd for ``rope`` and ``rope_qk``: the backward of a rotation is the inverse rotation with
  the same positions and cos/sin source, ``dq = rope(dq_out, inverse=not inverse)``; no gradient
  flows to positions or to the cos/sin tables;
- autograd for ``rms_norm``, ``add_rms_norm`` and ``qk_norm_rope`` through their backward
  operators (``rms_norm_backward``, ``add_rms_norm_backward``, ``qk_norm_rope_backward``): the
  forward saves its inputs (``add_rms_norm``: the sum s) and the weights, plus the rstd it
  returns, marked non-differentiable; weight gradients are computed only when a weight needs one.
  The backward operators have no autograd of their own (no double backward through the norms).

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
            "with `python3 -m pip install . --no-build-isolation` in an environment with a CUDA "
            "build of torch and scikit-build-core, or, in the source tree, run scripts/build "
            "with that torch importable"
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


def _weight_grad_like(weight: Optional[torch.Tensor], wanted: bool,
                      like: torch.Tensor) -> torch.Tensor:
    # A weight gradient, or the 0-element placeholder the backward operators return instead.
    if wanted and weight is not None:
        return _contiguous_like(weight)
    return like.new_empty((0,))


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

    @torch.library.register_fake("ropenorm::rms_norm_backward")
    def _rms_norm_backward_fake(dy, x, weight=None, rstd=None, eps=1e-6, weight_offset=0.0,
                                weight_grad=True):
        return _contiguous_like(x), _weight_grad_like(weight, weight_grad, x)

    @torch.library.register_fake("ropenorm::add_rms_norm_backward")
    def _add_rms_norm_backward_fake(dy, ds, s, weight=None, rstd=None, eps=1e-6,
                                    weight_offset=0.0, weight_grad=True, residual_grad=True):
        return (_contiguous_like(s, dy.dtype),
                _contiguous_like(s) if residual_grad else s.new_empty((0,)),
                _weight_grad_like(weight, weight_grad, s))

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

    @torch.library.register_fake("ropenorm::qk_norm_rope")
    def _qk_norm_rope_fake(q, k, q_weight, k_weight, *args, **kwargs):
        return (_contiguous_like(q), _contiguous_like(k),
                q.new_empty(q.shape[:-1], dtype=torch.float32),
                k.new_empty(k.shape[:-1], dtype=torch.float32))

    @torch.library.register_fake("ropenorm::qk_norm_rope_")
    def _qk_norm_rope_inplace_fake(q, k, q_weight, k_weight, *args, **kwargs):
        return (q.new_empty(q.shape[:-1], dtype=torch.float32),
                k.new_empty(k.shape[:-1], dtype=torch.float32))

    @torch.library.register_fake("ropenorm::qk_norm_rope_backward")
    def _qk_norm_rope_backward_fake(dq_out, dk_out, q, k, q_weight, k_weight, q_rstd=None,
                                    k_rstd=None, eps=1e-6, weight_offset=0.0, positions=None,
                                    cos_sin_kind=0, cos_sin_cache=None, cos=None, sin=None,
                                    inv_freq=None, attention_scaling=1.0, offset=0,
                                    seq_offsets=None, style=0, rotary_dim=0,
                                    check_positions=False, weight_grad=True):
        return (_contiguous_like(q), _contiguous_like(k),
                _weight_grad_like(q_weight, weight_grad, q),
                _weight_grad_like(k_weight, weight_grad, k))

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

    # ---- autograd: RMSNorm ------------------------------------------------------------------

    def _rms_norm_setup(ctx, inputs, output) -> None:
        x, weight, eps, weight_offset, _rounding = inputs
        _y, rstd = output
        ctx.mark_non_differentiable(rstd)
        ctx.save_for_backward(x, weight, rstd)
        ctx.norm_scalars = (eps, weight_offset)

    def _rms_norm_backward(ctx, grad_y, grad_rstd):
        x, weight, rstd = ctx.saved_tensors
        if grad_y is None:
            return None, None, None, None, None
        eps, weight_offset = ctx.norm_scalars
        weight_grad = weight is not None and ctx.needs_input_grad[1]
        dx, dweight = torch.ops.ropenorm.rms_norm_backward(
            _last_dim_contiguous(grad_y), x, weight, rstd, eps, weight_offset, weight_grad
        )
        return dx, (dweight if weight_grad else None), None, None, None

    torch.library.register_autograd(
        "ropenorm::rms_norm", _rms_norm_backward, setup_context=_rms_norm_setup
    )

    def _add_rms_norm_setup(ctx, inputs, output) -> None:
        x, _residual, weight, eps, weight_offset, _rounding = inputs
        _y, s = output
        # The backward reads the sum s (its r is recomputed from s inside the backward kernel:
        # add_rms_norm's schema returns no rstd).
        ctx.save_for_backward(s, weight)
        ctx.norm_scalars = (eps, weight_offset)
        ctx.x_dtype = x.dtype

    def _add_rms_norm_backward(ctx, grad_y, grad_s):
        s, weight = ctx.saved_tensors
        if grad_y is None and grad_s is None:
            return None, None, None, None, None, None
        if grad_y is None:
            # Only the residual output was used: s = x + residual passes its gradient through.
            return grad_s.to(ctx.x_dtype), grad_s, None, None, None, None
        eps, weight_offset = ctx.norm_scalars
        weight_grad = weight is not None and ctx.needs_input_grad[2]
        ds = _last_dim_contiguous(grad_s) if grad_s is not None else None
        # x and residual of one dtype take the same gradient (s = x + residual): one tensor
        # serves both, as torch's own add returns one gradient for both operands, and the
        # kernel writes the rows once instead of twice.
        shared = ctx.x_dtype == s.dtype
        dx, dresidual, dweight = torch.ops.ropenorm.add_rms_norm_backward(
            _last_dim_contiguous(grad_y), ds, s, weight, None, eps, weight_offset, weight_grad,
            not shared
        )
        return (dx, dx if shared else dresidual, (dweight if weight_grad else None), None, None,
                None)

    torch.library.register_autograd(
        "ropenorm::add_rms_norm", _add_rms_norm_backward, setup_context=_add_rms_norm_setup
    )

    # ---- autograd: fused QK-norm + RoPE -----------------------------------------------------

    # The schema's arguments after q, k, q_weight, k_weight, in order.
    qk_arg_names = ("eps", "weight_offset") + tuple(n for n in rope_arg_names if n != "inverse")

    def _qk_norm_rope_setup(ctx, inputs, output) -> None:
        q, k, q_weight, k_weight = inputs[:4]
        _q_out, _k_out, q_rstd, k_rstd = output
        ctx.mark_non_differentiable(q_rstd, k_rstd)
        named = dict(zip(qk_arg_names, inputs[4:]))
        ctx.save_for_backward(q, k, q_weight, k_weight, q_rstd, k_rstd,
                              *(named[n] for n in rope_tensor_args))
        ctx.qk_scalars = {n: v for n, v in named.items() if n not in rope_tensor_args}

    def _qk_norm_rope_backward(ctx, grad_q, grad_k, grad_q_rstd, grad_k_rstd):
        q, k, q_weight, k_weight, q_rstd, k_rstd, *rope_tensors = ctx.saved_tensors
        nones = (None,) * len(qk_arg_names)
        if grad_q is None and grad_k is None:
            return (None, None, None, None) + nones
        # One fused pass computes both; an unused output's gradient is zero.
        dq_out = _last_dim_contiguous(grad_q) if grad_q is not None else torch.zeros_like(q)
        dk_out = _last_dim_contiguous(grad_k) if grad_k is not None else torch.zeros_like(k)
        kwargs = dict(zip(rope_tensor_args, rope_tensors))
        kwargs.update(ctx.qk_scalars)
        kwargs["check_positions"] = False  # checked by the forward call
        weight_grad = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
        dq, dk, dq_weight, dk_weight = torch.ops.ropenorm.qk_norm_rope_backward(
            dq_out, dk_out, q, k, q_weight, k_weight, q_rstd, k_rstd,
            weight_grad=weight_grad, **kwargs
        )
        return (
            dq,
            dk,
            dq_weight if ctx.needs_input_grad[2] else None,
            dk_weight if ctx.needs_input_grad[3] else None,
        ) + nones

    torch.library.register_autograd(
        "ropenorm::qk_norm_rope", _qk_norm_rope_backward, setup_context=_qk_norm_rope_setup
    )


if load_error is None:
    _register()
