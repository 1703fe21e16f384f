"""The ops the peer benchmark times: shapes, inputs, the bytes model and the references.

Every op has the same interface (``Op``): its standard and quick shapes (bf16, the shapes of
/work/shared/DESIGN.md section 5; grouped by width, largest token count first, so that
torch.compile's one compilation per width is tuned on the large shape), whether a shape is
timed by CUDA-graph replay (decode-sized) or cold-L2 events, fresh random inputs, the gradient
seeds, which inputs are differentiated, the fewest bytes each pass must move (each input read
once, each output written once; the same figure for every implementation, so GB/s compares
time) and the float64 references.

Passes: ``fwd`` (the outputs) and ``fwd_bwd`` (forward, then the gradients of
``sum(out * seed)`` with respect to the differentiated inputs, through torch.autograd.grad).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import torch

from bench.peers import formulas, reference
from bench.peers.names import OP_NAMES
from bench.peers.reference import Expected

EPS = 1e-6
ROPE_THETA = 500000.0
#: cos/sin cache rows (positions are drawn uniformly below this; at least T).
MIN_CACHE_ROWS = 4096
Q_HEADS, K_HEADS = 32, 8

RMS_NS = (4096, 5120, 7168, 8192, 4095)
RMS_MS = (1, 32, 512, 4096, 32768)
RMS_QUICK_NS = (4096, 4095)
RMS_QUICK_MS = (1, 512, 4096)
ROPE_DS = (128, 64, 256)
ROPE_TS = (1, 64, 1024, 16384, 65536)
ROPE_QUICK_DS = (128,)
ROPE_QUICK_TS = (1, 1024, 16384)
#: Shapes at or under these sizes are timed by CUDA-graph replay (decode), larger ones cold-L2.
GRAPH_MAX_M = 512
GRAPH_MAX_T = 64

#: Tiny shapes for the CPU dry run (``--dry-run-cpu``), which exercises the harness only.
DRY_RMS = ((3, 64), (1, 64), (3, 63))
DRY_ROPE = ((1, 16), (5, 16))
DRY_HEADS = (4, 2)

Shape = Dict[str, int]
Inputs = Dict[str, torch.Tensor]


def shape_str(shape: Shape) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


@dataclass
class Op:
    """Base of the op definitions; see the module docstring."""

    name: str
    fwd_outputs: Tuple[str, ...]
    diff_inputs: Tuple[str, ...]

    def shapes(self, quick: bool, dry_run: bool = False) -> List[Shape]:
        raise NotImplementedError

    def uses_graph(self, shape: Shape) -> bool:
        raise NotImplementedError

    def bytes(self, shape: Shape, pass_: str) -> int:
        raise NotImplementedError

    def elements(self, shape: Shape) -> int:
        """Activation elements (inputs + outputs of one pass), for the memory estimate."""
        raise NotImplementedError

    def compile_group(self, shape: Shape) -> Tuple:
        """Shapes of one group share a torch.compile cache (the token count is dynamic)."""
        raise NotImplementedError

    def make_inputs(self, shape: Shape, device: torch.device, gen: torch.Generator) -> Inputs:
        raise NotImplementedError

    def seeds(self, inputs: Inputs, gen: torch.Generator) -> List[torch.Tensor]:
        """One gradient seed per forward output, in fwd_outputs order."""
        raise NotImplementedError

    def expected(self, inputs: Inputs, pass_: str, seeds: Sequence[torch.Tensor]
                 ) -> List[Expected]:
        raise NotImplementedError


def _randn(shape, device, gen, dtype=torch.bfloat16, scale=1.0, offset=0.0) -> torch.Tensor:
    t = torch.randn(shape, device=device, generator=gen, dtype=torch.float32)
    return (t * scale + offset).to(dtype)


class RmsNormOp(Op):
    def __init__(self, fused: bool):
        if fused:
            super().__init__("add_rms_norm", ("y", "s"), ("x", "residual", "w"))
        else:
            super().__init__("rms_norm", ("y",), ("x", "w"))
        self.fused = fused

    def shapes(self, quick, dry_run=False):
        if dry_run:
            return [{"M": m, "N": n} for m, n in DRY_RMS]
        ns, ms = (RMS_QUICK_NS, RMS_QUICK_MS) if quick else (RMS_NS, RMS_MS)
        return [{"M": m, "N": n} for n in ns for m in sorted(ms, reverse=True)]

    def uses_graph(self, shape):
        return shape["M"] <= GRAPH_MAX_M

    def bytes(self, shape, pass_):
        m, n, e = shape["M"], shape["N"], 2
        if pass_ == "fwd":
            return e * ((4 if self.fused else 2) * m * n + n)
        # forward (saving rstd, fp32) + backward: read dy (and ds), the norm input, w and rstd;
        # write dx (the fused op's dx and dresidual are one value) and dw.
        rows = (8 if self.fused else 5) * m * n
        return e * (rows + 3 * n) + 8 * m

    def elements(self, shape):
        return shape["M"] * shape["N"] * (6 if self.fused else 4)

    def compile_group(self, shape):
        return (self.name, shape["N"])

    def make_inputs(self, shape, device, gen):
        m, n = shape["M"], shape["N"]
        out = {"x": _randn((m, n), device, gen),
               "w": _randn((n,), device, gen, scale=0.5, offset=1.0)}
        if self.fused:
            out["residual"] = _randn((m, n), device, gen)
        return out

    def seeds(self, inputs, gen):
        x = inputs["x"]
        return [_randn(x.shape, x.device, gen) for _ in self.fwd_outputs]

    def expected(self, inputs, pass_, seeds):
        x, w = inputs["x"], inputs["w"]
        if self.fused:
            r = inputs["residual"]
            if pass_ == "fwd":
                return reference.add_rms_norm_forward(x, r, w, EPS)
            return reference.add_rms_norm_fwd_bwd(x, r, w, EPS, seeds[0], seeds[1])
        if pass_ == "fwd":
            return reference.rms_norm_forward(x, w, EPS)
        return reference.rms_norm_fwd_bwd(x, w, EPS, seeds[0])


class RopeOp(Op):
    """rope (neox, cos/sin cache) and qk_norm_rope (per-head RMSNorm of q and k, then rope)."""

    def __init__(self, with_norm: bool):
        if with_norm:
            super().__init__("qk_norm_rope", ("q_out", "k_out"),
                             ("q", "k", "q_weight", "k_weight"))
        else:
            super().__init__("rope", ("q_out", "k_out"), ("q", "k"))
        self.with_norm = with_norm
        self.heads = (Q_HEADS, K_HEADS)

    def shapes(self, quick, dry_run=False):
        if dry_run:
            hq, hk = DRY_HEADS
            return [{"T": t, "Hq": hq, "Hk": hk, "D": d} for t, d in DRY_ROPE]
        ds, ts = (ROPE_QUICK_DS, ROPE_QUICK_TS) if quick else (ROPE_DS, ROPE_TS)
        hq, hk = self.heads
        return [{"T": t, "Hq": hq, "Hk": hk, "D": d} for d in ds for t in sorted(ts, reverse=True)]

    def uses_graph(self, shape):
        return shape["T"] <= GRAPH_MAX_T

    def bytes(self, shape, pass_):
        t, d, e = shape["T"], shape["D"], 2
        heads = shape["Hq"] + shape["Hk"]
        table = t * d * 4 + t * 8  # the f32 cache rows the tokens read, int64 positions
        weights = 2 * d * e if self.with_norm else 0
        fwd = 2 * t * heads * d * e + table + weights
        if pass_ == "fwd":
            return fwd
        if not self.with_norm:
            return 2 * fwd  # the backward is the inverse rotation: the same traffic
        # backward: read dy and x (or the saved rstd: 4 bytes per head vector, written and read),
        # write dx; the table again; read the weights, write their gradients.
        return fwd + 3 * t * heads * d * e + table + 2 * weights + 8 * t * heads

    def elements(self, shape):
        return shape["T"] * (shape["Hq"] + shape["Hk"]) * shape["D"] * 4

    def compile_group(self, shape):
        return (self.name, shape["D"])

    def make_inputs(self, shape, device, gen):
        t, hq, hk, d = shape["T"], shape["Hq"], shape["Hk"], shape["D"]
        rows = max(t, MIN_CACHE_ROWS)
        cache = formulas.rope_cache(rows, d, ROPE_THETA).to(device)
        positions = torch.randint(0, rows, (t,), device=device, generator=gen, dtype=torch.int64)
        out = {"q": _randn((t, hq, d), device, gen), "k": _randn((t, hk, d), device, gen),
               "positions": positions, "cache": cache}
        # Hugging Face's position_embeddings, computed once per forward outside the layers.
        out["hf_cos"], out["hf_sin"] = formulas.hf_cos_sin(cache, positions, torch.bfloat16)
        if self.with_norm:
            out["q_weight"] = _randn((d,), device, gen, scale=0.5, offset=1.0)
            out["k_weight"] = _randn((d,), device, gen, scale=0.5, offset=1.0)
        return out

    def seeds(self, inputs, gen):
        return [_randn(inputs[n].shape, inputs[n].device, gen) for n in ("q", "k")]

    def expected(self, inputs, pass_, seeds):
        q, k, pos, cache = inputs["q"], inputs["k"], inputs["positions"], inputs["cache"]
        if not self.with_norm:
            if pass_ == "fwd":
                return reference.rope_forward(q, k, pos, cache)
            return reference.rope_fwd_bwd(q, k, pos, cache, seeds[0], seeds[1])
        wq, wk = inputs["q_weight"], inputs["k_weight"]
        if pass_ == "fwd":
            return reference.qk_norm_rope_forward(q, k, wq, wk, EPS, pos, cache)
        return reference.qk_norm_rope_fwd_bwd(q, k, wq, wk, EPS, pos, cache, seeds[0], seeds[1])


ALL_OPS = (RmsNormOp(False), RmsNormOp(True), RopeOp(False), RopeOp(True))
OPS_BY_NAME = {op.name: op for op in ALL_OPS}
assert tuple(OPS_BY_NAME) == OP_NAMES
