"""The implementations the peer benchmark runs side by side, behind one interface.

Each implementation maps an op's inputs (the dict ``ops.Op.make_inputs`` returns) to the op's
outputs in the canonical layout (``q_out`` as ``[T, Hq, D]``, and so on), so one reference and
one gradient seed serve all of them:

- ``ropenorm``: the library's torch ops (``ropenorm.rms_norm``, ``add_rms_norm``, ``rope`` with
  positions and the cos/sin cache, ``qk_norm_rope`` where the build has it).
- ``ropenorm_in_place``: the same ops' in-place forms (``inplace=True``: ``add_rms_norm``
  writing s into residual, ``rope`` and ``qk_norm_rope`` writing q and k), forward only, to
  set beside the peers that work in place (Liger-Kernel's RoPE, FlashInfer); not a peer.
- ``torch_eager``: the Hugging Face formulas (``formulas``), eager.
- ``torch_rms_norm``: ``torch.nn.functional.rms_norm`` (with the residual add before it).
- ``torch_compile``: ``torch.compile`` (mode default) of the eager formulas, the token dim
  marked dynamic (unbacked, so 1 is no special case) and every other size static: one
  compilation per op, pass and width serves every token count. The benchmark runs a width's
  shapes largest first, so the compilation and Inductor's first-call autotuning see the large
  shape; compile time stays out of the timings. Should the dynamic compilation fail (a Dynamo
  or Inductor error, forward or backward: Inductor compiles the backward at the first backward
  call), that op and pass fall back to one static compilation per shape, of a copy of the
  function so the other pass keeps its dynamic one (said in the row's note).
- ``liger``: Liger-Kernel's autograd Functions (``LigerRMSNormFunction``,
  ``LigerFusedAddRMSNormFunction`` and ``LigerRopeFunction``; casting mode "llama", Hugging
  Face's rounding), given Hugging Face's per-token cos/sin as its HF integration is.
- ``flashinfer``: ``flashinfer.norm.rmsnorm``, ``fused_add_rmsnorm`` (in place) and
  ``flashinfer.rope.apply_rope_with_cos_sin_cache_inplace``; no autograd. Its norms' rows
  say whether they ran FlashInfer's CUDA or its CuTe DSL kernels (the latter where
  nvidia-cutlass-dsl is installed).

The peers are imported here, guarded: a missing one is reported with the reason and its rows
are left out. Nothing of theirs is copied into this repository.
"""

from __future__ import annotations

import importlib.metadata
import sys
import types
from typing import Callable, Dict, List, Optional, Tuple

import torch

from bench.peers import formulas
from bench.peers.names import IMPL_NAMES, OURS_IN_PLACE
from bench.peers.ops import EPS

Forward = Callable[[Dict[str, torch.Tensor]], Tuple[torch.Tensor, ...]]


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _heads_first(t: torch.Tensor) -> torch.Tensor:
    """[T, H, D] -> the [1, H, T, D] view Hugging Face's attention layout gives (no copy)."""
    return t.unsqueeze(0).transpose(1, 2)


def _tokens_first(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2).squeeze(0)


class Impl:
    """One implementation. ``unavailable`` is None when it can run, else why not."""

    name = ""
    has_autograd = True

    def __init__(self) -> None:
        self.unavailable: Optional[str] = None
        self.version = ""
        self._fwd: Dict[str, Forward] = {}
        self._missing: Dict[str, str] = {}
        self._notes: Dict[str, str] = {}

    def lookup(self, op_name: str) -> Tuple[Optional[Forward], Optional[str]]:
        """(forward, None); or (None, reason) for a row recorded as skipped; or (None, None)
        when this implementation has no such op (no row)."""
        if op_name in self._fwd:
            return self._fwd[op_name], None
        return None, self._missing.get(op_name)

    def note(self, op_name: str, pass_: str = "fwd") -> str:
        return self._notes.get(op_name, "")

    def retry_after(self, op_name: str, pass_: str, exc: BaseException) -> bool:
        """Called when the checked first call of ``op_name`` in ``pass_`` raised ``exc``: True
        when this implementation changed how it runs that op and pass and the call should be
        made once more on fresh inputs."""
        return False

    def start_group(self, group: Tuple) -> None:
        """Called when the benchmark moves to another op or width."""


class Ropenorm(Impl):
    name = "ropenorm"
    inplace = False  # RopenormInPlace: the same calls with inplace=True, forward only

    def __init__(self) -> None:
        super().__init__()
        import ropenorm

        self.unavailable = ropenorm.unavailable_reason()
        self.version = getattr(ropenorm, "__version__", "")
        rn, ip = ropenorm, self.inplace
        if not ip:  # rms_norm has no in-place form
            self._fwd["rms_norm"] = lambda i: (rn.rms_norm(i["x"], i["w"], EPS),)
        self._fwd["add_rms_norm"] = lambda i: tuple(
            rn.add_rms_norm(i["x"], i["residual"], i["w"], EPS, inplace=ip))
        self._fwd["rope"] = lambda i: tuple(
            rn.rope(i["q"], i["k"], positions=i["positions"], cos_sin_cache=i["cache"],
                    inplace=ip))
        if hasattr(rn, "qk_norm_rope"):
            self._fwd["qk_norm_rope"] = lambda i: tuple(rn.qk_norm_rope(
                i["q"], i["k"], i["q_weight"], i["k_weight"], EPS, positions=i["positions"],
                cos_sin_cache=i["cache"], inplace=ip))
        else:
            self._missing["qk_norm_rope"] = "ropenorm.qk_norm_rope is not in this build"
        where = "in place; " if ip else ""
        self._notes["rope"] = where + "cos/sin cache f32 [P, D] + int64 positions"
        self._notes["qk_norm_rope"] = self._notes["rope"]
        if ip:
            self._notes["add_rms_norm"] = "in place (s into residual)"


class RopenormInPlace(Ropenorm):
    name = OURS_IN_PLACE
    has_autograd = False
    inplace = True


class TorchEager(Impl):
    name = "torch_eager"

    def __init__(self) -> None:
        super().__init__()
        self.version = torch.__version__
        self._fwd.update(eager_forwards())
        for op in ("rope", "qk_norm_rope"):
            self._notes[op] = "HF cos/sin per token (bf16), gathered once outside the timing"
        self._notes["rms_norm"] = "HF LlamaRMSNorm rounding (normalise, round, times w)"
        self._notes["add_rms_norm"] = self._notes["rms_norm"]


def eager_forwards() -> Dict[str, Forward]:
    return {
        "rms_norm": lambda i: (formulas.hf_rms_norm(i["x"], i["w"], EPS),),
        "add_rms_norm": lambda i: formulas.hf_add_rms_norm(i["x"], i["residual"], i["w"], EPS),
        "rope": lambda i: formulas.hf_apply_rotary_pos_emb(i["q"], i["k"], i["hf_cos"],
                                                           i["hf_sin"]),
        "qk_norm_rope": lambda i: formulas.hf_qk_norm_rope(
            i["q"], i["k"], i["q_weight"], i["k_weight"], i["hf_cos"], i["hf_sin"], EPS),
    }


class TorchRmsNorm(Impl):
    name = "torch_rms_norm"

    def __init__(self) -> None:
        super().__init__()
        self.version = torch.__version__
        f = torch.nn.functional.rms_norm

        def fused(i):
            s = i["residual"] + i["x"]
            return f(s, (s.shape[-1],), i["w"], EPS), s

        self._fwd["rms_norm"] = lambda i: (f(i["x"], (i["x"].shape[-1],), i["w"], EPS),)
        self._fwd["add_rms_norm"] = fused
        self._notes["add_rms_norm"] = "residual + x, then F.rms_norm"


class TorchCompile(Impl):
    """torch.compile of the eager formulas; dim 0 (tokens) of the listed inputs is dynamic."""

    name = "torch_compile"
    _ARGS = {
        "rms_norm": (("x", "w"), ("x",)),
        "add_rms_norm": (("x", "residual", "w"), ("x", "residual")),
        "rope": (("q", "k", "hf_cos", "hf_sin"), ("q", "k", "hf_cos", "hf_sin")),
        "qk_norm_rope": (("q", "k", "q_weight", "k_weight", "hf_cos", "hf_sin"),
                         ("q", "k", "hf_cos", "hf_sin")),
    }

    def __init__(self) -> None:
        super().__init__()
        import torch._dynamo

        self.version = torch.__version__
        cfg = torch._dynamo.config
        cfg.automatic_dynamic_shapes = False  # only the marked token dim is dynamic
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, limit):
                setattr(cfg, limit, 256)
        if hasattr(cfg, "accumulated_recompile_limit"):
            cfg.accumulated_recompile_limit = 4096
        self._eager = {
            "rms_norm": lambda x, w: (formulas.hf_rms_norm(x, w, EPS),),
            "add_rms_norm": lambda x, r, w: formulas.hf_add_rms_norm(x, r, w, EPS),
            "rope": formulas.hf_apply_rotary_pos_emb,
            "qk_norm_rope": lambda q, k, wq, wk, c, s: formulas.hf_qk_norm_rope(q, k, wq, wk, c,
                                                                                s, EPS),
        }
        self._compiled = {op: torch.compile(fn) for op, fn in self._eager.items()}
        # (op, pass) -> why the dynamic compilation was given up, and the static compilation
        self._static: Dict[Tuple[str, str], Tuple[str, Callable]] = {}
        for op in self._eager:
            self._fwd[op] = self._wrap(op)

    def note(self, op_name, pass_="fwd"):
        given_up = self._static.get((op_name, pass_))
        if given_up is not None:
            return ("torch.compile mode default, static per shape (dynamic compilation failed: "
                    f"{given_up[0]})")
        return "torch.compile mode default, token dim dynamic (unbacked)"

    def retry_after(self, op_name, pass_, exc):
        from torch._dynamo.exc import TorchDynamoException  # InductorError is one

        if (op_name not in self._eager or (op_name, pass_) in self._static
                or not isinstance(exc, TorchDynamoException)):
            return False
        # Compiled from a copy of the function's code: Dynamo keeps compilations per code object,
        # so the failed one is not reused and the op's other pass keeps its dynamic compilation.
        static = torch.compile(_own_code(self._eager[op_name]), dynamic=False)
        self._static[(op_name, pass_)] = (_error_line(exc), static)
        return True

    def _wrap(self, op: str) -> Forward:
        names, dynamic = self._ARGS[op]

        def call(i):
            pass_ = "fwd_bwd" if torch.is_grad_enabled() else "fwd"
            given_up = self._static.get((op, pass_))
            args = [i[n] for n in names]
            if given_up is not None:
                return tuple(given_up[1](*args))
            for n in dynamic:
                _mark_unbacked(i[n])
            return tuple(self._compiled[op](*args))

        return call

    def start_group(self, group):
        torch._dynamo.reset()


def _own_code(fn: Callable) -> Callable:
    """fn with a copy of its code object (the same globals, defaults and closure)."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def _mark_unbacked(t: torch.Tensor) -> None:
    mark = torch._dynamo.decorators.mark_unbacked
    try:
        mark(t, 0, hint_override=int(t.shape[0]))
    except TypeError:  # an older torch without hint_override
        mark(t, 0)


class Liger(Impl):
    name = "liger"

    def __init__(self) -> None:
        super().__init__()
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            from liger_kernel.ops.rope import LigerRopeFunction
        except Exception as exc:  # ImportError, or triton failing to initialise
            self.unavailable = f"liger_kernel is not importable ({_error_line(exc)})"
            return
        self.version = _dist_version("liger_kernel", "liger-kernel")
        norm = LigerRMSNormFunction.apply
        add_norm = LigerFusedAddRMSNormFunction.apply
        rope = LigerRopeFunction.apply

        def rotate(q, k, i):
            qo, ko = rope(_heads_first(q), _heads_first(k), i["hf_cos"], i["hf_sin"])
            return _tokens_first(qo), _tokens_first(ko)

        # Positional arguments: eps, offset, casting_mode, in_place (of the backward's dY).
        self._fwd["rms_norm"] = lambda i: (norm(i["x"], i["w"], EPS, 0.0, "llama", False),)
        self._fwd["add_rms_norm"] = lambda i: tuple(
            add_norm(i["x"], i["residual"], i["w"], EPS, 0.0, "llama", False))
        self._fwd["rope"] = lambda i: rotate(i["q"], i["k"], i)
        self._fwd["qk_norm_rope"] = lambda i: rotate(
            norm(i["q"], i["q_weight"], EPS, 0.0, "llama", False),
            norm(i["k"], i["k_weight"], EPS, 0.0, "llama", False), i)
        self._notes["rms_norm"] = "casting_mode llama (HF rounding)"
        self._notes["add_rms_norm"] = self._notes["rms_norm"]
        self._notes["rope"] = "in place on q and k; HF cos/sin per token (bf16)"
        self._notes["qk_norm_rope"] = "LigerRMSNorm per head + LigerRope (2 + 1 launches)"


class FlashInfer(Impl):
    name = "flashinfer"
    has_autograd = False

    def __init__(self) -> None:
        super().__init__()
        try:
            import flashinfer
            from flashinfer.norm import fused_add_rmsnorm, rmsnorm
            from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace
        except Exception as exc:
            self.unavailable = f"flashinfer is not importable ({_error_line(exc)})"
            return
        self.version = getattr(flashinfer, "__version__", "")
        norms = {True: "CUDA norm kernels", False: "CuTe DSL norm kernels"}.get(
            _flashinfer_cuda_norm(), "")

        def add(i):
            fused_add_rmsnorm(i["x"], i["residual"], i["w"], EPS)  # residual += x; x = norm
            return i["x"], i["residual"]

        def rotate(q, k, i):
            t, d = q.shape[0], q.shape[-1]
            apply_rope_with_cos_sin_cache_inplace(i["positions"], q.view(t, -1), k.view(t, -1), d,
                                                  i["cache"], True)
            return q, k

        def norm_heads(x, w):
            return rmsnorm(x.reshape(-1, x.shape[-1]), w, EPS).view(x.shape)

        self._fwd["rms_norm"] = lambda i: (rmsnorm(i["x"], i["w"], EPS),)
        self._fwd["add_rms_norm"] = add
        self._fwd["rope"] = lambda i: rotate(i["q"], i["k"], i)
        self._fwd["qk_norm_rope"] = lambda i: rotate(norm_heads(i["q"], i["q_weight"]),
                                                     norm_heads(i["k"], i["k_weight"]), i)
        self._notes["rms_norm"] = norms
        self._notes["add_rms_norm"] = _joined("in place (residual += x; x = y)", norms)
        self._notes["rope"] = "in place; cos/sin cache f32 [P, D] + int64 positions"
        self._notes["qk_norm_rope"] = _joined("rmsnorm per head + rope in place (3 launches)",
                                              norms)


def _flashinfer_cuda_norm() -> Optional[bool]:
    """Whether FlashInfer's norms run its CUDA kernels (True) or its CuTe DSL ones (False, where
    nvidia-cutlass-dsl is installed and targets the device), as FlashInfer decides it; None for
    a FlashInfer that has only the CUDA ones."""
    norm = sys.modules.get("flashinfer.norm")
    decided = getattr(norm, "_USE_CUDA_NORM", None)
    per_device = getattr(norm, "_use_cuda_norm", None)
    if per_device is not None and torch.cuda.is_available():
        try:
            decided = bool(per_device(torch.device("cuda")))
        except Exception:  # the probe is FlashInfer's private helper: keep the module's flag
            pass
    return decided


def _joined(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _dist_version(*names: str) -> str:
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


IMPL_CLASSES = (Ropenorm, RopenormInPlace, TorchEager, TorchRmsNorm, TorchCompile, Liger,
                FlashInfer)
assert tuple(c.name for c in IMPL_CLASSES) == IMPL_NAMES


def load(names: List[str]) -> List[Impl]:
    """The implementations named, constructed (peers imported) in the standard order."""
    out = []
    for cls in IMPL_CLASSES:
        if cls.name in names:
            try:
                out.append(cls())
            except Exception as exc:  # a peer that fails while being set up
                impl = Impl()
                impl.name = cls.name
                impl.unavailable = f"setting up {cls.name} failed ({_error_line(exc)})"
                out.append(impl)
    return out
