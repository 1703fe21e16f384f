"""The operators on machines with several GPUs.

- Cross-device: every ``torch.ops.ropenorm.*`` tensor operator, forward and backward, on
  tensors of a device other than the current one (and under a non-default stream) gives bitwise
  the result it gives with everything on cuda:0, on the tensors' device; autograd through the
  functional API likewise; a call mixing devices is a ValueError naming the argument.
- Tensor parallel (torch.distributed, NCCL, one process per GPU, tests/python/multi_gpu_worker.py):
  q/k heads split across ranks for qk_norm_rope, rows split across ranks for rms_norm forward and
  backward, compared with the single-GPU results.
- With a single GPU, the same cross-device code path with everything on cuda:0.

Each test skips with its reason ("needs 2 CUDA devices (found N)") where it cannot run; the file
imports without torch, without the compiled extension and without a GPU. Fresh random data on
every run (the seed is in each failure message).
"""

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import pytest

try:
    import torch
except ImportError:  # the tests skip, with the reason
    torch = None

import ropenorm

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "multi_gpu_worker.py")


def _device_count() -> int:
    return torch.cuda.device_count() if torch is not None else 0


def skip_reason(needed: int) -> Optional[str]:
    """Why a test that needs `needed` CUDA devices cannot run here (None: it can)."""
    found = _device_count()
    if found < needed:
        noun = "CUDA device" if needed == 1 else "CUDA devices"
        why = "" if torch is not None else ": PyTorch is not importable"
        return f"needs {needed} {noun} (found {found}){why}"
    reason = ropenorm.unavailable_reason()
    return None if reason is None else f"ropenorm CUDA ops unavailable: {reason}"


TWO_GPU_REASON = skip_reason(2)
ONE_GPU_REASON = skip_reason(1)
requires_two_gpus = pytest.mark.skipif(TWO_GPU_REASON is not None, reason=str(TWO_GPU_REASON))
requires_a_gpu = pytest.mark.skipif(ONE_GPU_REASON is not None, reason=str(ONE_GPU_REASON))

EPS = 1e-6
# Small shapes: rows [M, N]; q/k [T, HQ|HK, D]; cos/sin tables of P positions.
M, N = 16, 256
T, HQ, HK, D, P = 16, 4, 2, 64, 64
#: GPU cycles of torch.cuda._sleep queued on the stream before the inputs are written (~10 ms): an
#: operator that ran on any other stream would read the poisoned inputs.
SLEEP_CYCLES = 20_000_000


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


# ------------------------------------------------------------------------------------------------
# The operators: inputs (CPU tensors, recreated on any device), the call, and the result to compare


@dataclass(frozen=True)
class OpCase:
    #: CPU inputs from a generator.
    make: Callable[["torch.Generator"], Dict[str, "torch.Tensor"]]
    #: Calls the operator on the inputs (all on one device); returns its outputs, then the inputs
    #: it writes in place.
    call: Callable[[Dict[str, "torch.Tensor"]], List["torch.Tensor"]]
    #: (input moved to another device, regex of the argument name its error gives).
    mixed: Tuple[str, str]
    #: Inputs written in place (unchanged after a refused call).
    writes: Tuple[str, ...] = field(default=())


def _rand(gen, *shape, dtype, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def _rstd(x):
    return torch.rsqrt(x.double().pow(2).mean(-1) + EPS).float()


def _norm_inputs(gen):
    return dict(
        x=_rand(gen, M, N, dtype=torch.bfloat16, scale=2.0),
        residual=_rand(gen, M, N, dtype=torch.float32),
        w=_rand(gen, N, dtype=torch.bfloat16),
        dy=_rand(gen, M, N, dtype=torch.bfloat16),
        ds=_rand(gen, M, N, dtype=torch.float32),
    )


def _qkv_inputs(gen, rotary_dim=D):
    """A packed bf16 QKV buffer [T, (HQ + 2 HK) D], weights (bf16 and f32), positions and a
    cos/sin cache [P, R]."""
    return dict(
        qkv=_rand(gen, T, (HQ + 2 * HK) * D, dtype=torch.bfloat16, scale=1.5),
        wq=_rand(gen, D, dtype=torch.bfloat16),
        wk=_rand(gen, D, dtype=torch.float32),
        positions=torch.randint(0, P, (T,), generator=gen, dtype=torch.int64),
        cache=ropenorm.build_rope_cache(P, rotary_dim=rotary_dim, rope_theta=500000.0),
    )


def _q(t):
    return t["qkv"][:, : HQ * D].view(T, HQ, D)


def _k(t):
    return t["qkv"][:, HQ * D : (HQ + HK) * D].view(T, HK, D)


def _norm_inputs_with_rstd(gen):
    t = _norm_inputs(gen)
    t["rstd"] = _rstd(t["x"])
    return t


def _qk_backward_inputs(gen):
    t = _qkv_inputs(gen)
    q, k = _q(t), _k(t)
    t.update(q_rstd=_rstd(q), k_rstd=_rstd(k), dq_out=_rand(gen, T, HQ, D, dtype=q.dtype),
             dk_out=_rand(gen, T, HK, D, dtype=k.dtype))
    return t


def _hf_table_inputs(gen):
    """_qkv_inputs with Hugging Face cos/sin tables [P, D] instead of the cache, int32 positions."""
    t = _qkv_inputs(gen)
    t["positions"] = t["positions"].int()
    c, s = t.pop("cache").chunk(2, dim=-1)
    t.update(cos=torch.cat([c, c], -1), sin=torch.cat([s, s], -1))
    return t


def _inv_freq_inputs(gen):
    return dict(q=_rand(gen, T, HQ, D, dtype=torch.float32),
                inv_freq=ropenorm.rope_inv_freq(rotary_dim=D, rope_theta=10000.0)[0])


def _ops():
    return torch.ops.ropenorm


def _call_rms_norm(t):
    return list(_ops().rms_norm(t["x"], t["w"], EPS, 0.0, 0))


def _call_add_rms_norm(t):
    return list(_ops().add_rms_norm(t["x"], t["residual"], t["w"], EPS, 1.0, 0))


def _call_add_rms_norm_inplace(t):
    y = _ops().add_rms_norm_(t["x"], t["residual"], t["w"], EPS, 0.0, 1)
    return [y, t["residual"]]


def _call_rope(t):
    return [_ops().rope(_q(t), positions=t["positions"], cos_sin_kind=0,
                        cos_sin_cache=t["cache"])]


def _call_rope_qk(t):
    return list(_ops().rope_qk(_q(t), _k(t), positions=t["positions"], cos_sin_kind=0,
                               cos_sin_cache=t["cache"], style=1, rotary_dim=D // 2))


def _call_rope_inplace(t):
    # The in-kernel cos/sin source, implicit positions arange(T) + 5.
    _ops().rope_(t["q"], cos_sin_kind=3, inv_freq=t["inv_freq"], offset=5)
    return [t["q"]]


def _call_rope_qk_inplace(t):
    _ops().rope_qk_(_q(t), _k(t), positions=t["positions"], cos_sin_kind=1, cos=t["cos"],
                    sin=t["sin"])
    return [t["qkv"]]


def _call_qk_norm_rope(t):
    return list(_ops().qk_norm_rope(_q(t), _k(t), t["wq"], t["wk"], EPS, 0.0,
                                    positions=t["positions"], cos_sin_kind=0,
                                    cos_sin_cache=t["cache"]))


def _call_qk_norm_rope_inplace(t):
    rstds = _ops().qk_norm_rope_(_q(t), _k(t), t["wq"], t["wk"], EPS, 1.0,
                                 positions=t["positions"], cos_sin_kind=0,
                                 cos_sin_cache=t["cache"], style=1, rotary_dim=D // 2)
    return list(rstds) + [t["qkv"]]


def _call_rms_norm_backward(t):
    return list(_ops().rms_norm_backward(t["dy"], t["x"], t["w"], t["rstd"], EPS, 0.0, True))


def _call_add_rms_norm_backward(t):
    # s is the fused add's saved sum (here: the f32 residual input); r recomputed from s.
    return list(_ops().add_rms_norm_backward(t["dy"], t["ds"], t["residual"], t["w"], None, EPS,
                                             1.0, True))


def _call_qk_norm_rope_backward(t):
    return list(_ops().qk_norm_rope_backward(
        t["dq_out"], t["dk_out"], _q(t), _k(t), t["wq"], t["wk"], t["q_rstd"], t["k_rstd"], EPS,
        0.0, positions=t["positions"], cos_sin_kind=0, cos_sin_cache=t["cache"],
        weight_grad=True))


#: Every tensor operator of the extension, forward and backward, with one call of each.
CASES: Dict[str, OpCase] = {
    "rms_norm": OpCase(_norm_inputs, _call_rms_norm, ("w", "'weight'")),
    "add_rms_norm": OpCase(_norm_inputs, _call_add_rms_norm, ("residual", "'residual'")),
    "add_rms_norm_": OpCase(_norm_inputs, _call_add_rms_norm_inplace, ("w", "'weight'"),
                            writes=("residual",)),
    "rope": OpCase(_qkv_inputs, _call_rope, ("positions", "'positions'")),
    "rope_qk": OpCase(lambda gen: _qkv_inputs(gen, rotary_dim=D // 2), _call_rope_qk,
                      ("cache", "'(cos_sin_)?cache'")),
    "rope_": OpCase(_inv_freq_inputs, _call_rope_inplace, ("inv_freq", "'inv_freq'"),
                    writes=("q",)),
    "rope_qk_": OpCase(_hf_table_inputs, _call_rope_qk_inplace, ("sin", "'sin'"),
                       writes=("qkv",)),
    "qk_norm_rope": OpCase(_qkv_inputs, _call_qk_norm_rope, ("wk", "'k_weight'")),
    "qk_norm_rope_": OpCase(lambda gen: _qkv_inputs(gen, rotary_dim=D // 2),
                            _call_qk_norm_rope_inplace, ("wq", "'q_weight'"),
                            writes=("qkv",)),
    "rms_norm_backward": OpCase(_norm_inputs_with_rstd, _call_rms_norm_backward,
                                ("rstd", "'rstd'")),
    "add_rms_norm_backward": OpCase(_norm_inputs, _call_add_rms_norm_backward, ("ds", "'ds'")),
    "qk_norm_rope_backward": OpCase(_qk_backward_inputs, _call_qk_norm_rope_backward,
                                    ("k_rstd", "'k_rstd'")),
}

#: The operators registered when this file was imported (an operator that is not is skipped with
#: the reason).
REGISTERED = frozenset(n for n in CASES if torch is not None and hasattr(torch.ops.ropenorm, n))


def _require_op(op: str) -> None:
    if op not in REGISTERED:
        pytest.skip(f"torch.ops.ropenorm.{op} is not registered by the loaded extension")


# ------------------------------------------------------------------------------------------------
# Running a case and comparing results bitwise


def _to(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()}


def _poison(t):
    """Like t, NaN for floating point (zeros for integer tensors: positions stay in range)."""
    return torch.full_like(t, float("nan")) if t.is_floating_point() else torch.zeros_like(t)


def _bits(t):
    t = t.detach().cpu().contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    return t


def assert_bitwise(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (
            f"{what}: result {i} is {g.dtype} {list(g.shape)}, expected {w.dtype} {list(w.shape)}")
        gb, wb = _bits(g), _bits(w)
        if not torch.equal(gb, wb):
            differ = (gb != wb).flatten()
            j = int(differ.nonzero()[0])
            raise AssertionError(
                f"{what}: result {i}: {int(differ.sum())} of {g.numel()} elements differ bitwise "
                f"(first, flat index {j}: got {float(g.detach().flatten()[j].float())!r}, "
                f"expected {float(w.detach().flatten()[j].float())!r})")


def reference(case: OpCase, inputs):
    """The results with every tensor on cuda:0, cuda:0 current, its default stream."""
    with torch.cuda.device(0):
        out = case.call(_to(inputs, "cuda:0"))
        torch.cuda.synchronize(0)
    return [t.cpu() for t in out]


@contextlib.contextmanager
def _current(device: int, stream):
    """`device` current and `stream` the current stream of its own device (which may be another
    one: torch keeps a current stream per device)."""
    if stream.device.index == device:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            yield
    else:
        with torch.cuda.stream(stream), torch.cuda.device(device):
            yield


def run_on(case: OpCase, inputs, tensor_device: int, current_device: int, side_stream: bool):
    """Runs case on tensors of cuda:tensor_device with cuda:current_device current and, as the
    tensors' device's current stream, its default stream or a new one.

    The inputs are NaN-poisoned copies that are written on that stream only after a GPU sleep,
    and only that stream is synchronised before the results are read: an operator that runs on
    any other stream (or device) reads the poison, or runs before its inputs exist.
    """
    dev = torch.device("cuda", tensor_device)
    true_inputs = _to(inputs, dev)
    work = {k: _poison(v) for k, v in true_inputs.items()}
    torch.cuda.synchronize(dev)
    stream = torch.cuda.Stream(device=dev) if side_stream else torch.cuda.default_stream(dev)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
        for k, v in work.items():
            v.copy_(true_inputs[k])
    with _current(current_device, stream):
        out = case.call(work)
        assert torch.cuda.current_device() == current_device, "the call changed the device"
        assert torch.cuda.current_stream(dev) == stream, "the call changed the current stream"
    stream.synchronize()
    for t in out:
        assert t.device == dev, f"a result is on {t.device}, its inputs on {dev}"
    return out


# ------------------------------------------------------------------------------------------------
# 1. Cross-device (two GPUs)

#: (device of the tensors, current device, the tensors' device's current stream is a new one).
LAYOUTS = {
    "tensors_cuda1_current_cuda0": (1, 0, False),
    "tensors_cuda0_current_cuda1": (0, 1, False),
    "tensors_cuda1_current_cuda1_side_stream": (1, 1, True),
    "tensors_cuda1_current_cuda0_side_stream_of_cuda1": (1, 0, True),
}


@requires_two_gpus
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op", list(CASES))
def test_op_on_a_device_other_than_the_current_one(op, layout):
    _require_op(op)
    seed = _seed()
    case = CASES[op]
    inputs = case.make(torch.Generator().manual_seed(seed))
    want = reference(case, inputs)
    tensor_device, current_device, side_stream = LAYOUTS[layout]
    got = run_on(case, inputs, tensor_device, current_device, side_stream)
    assert_bitwise(got, want, f"{op} {layout} (seed {seed}) against cuda:0")


def _rms_norm_grads(device, seed):
    gen = torch.Generator().manual_seed(seed)
    t = _to(_norm_inputs(gen), device)
    x = t["x"].requires_grad_()
    w = t["w"].float().requires_grad_()  # weight dtype differs from x's
    res = t["residual"].requires_grad_()
    y = ropenorm.rms_norm(x, w, EPS)
    y2, s = ropenorm.add_rms_norm(y, res, w, EPS)
    torch.autograd.backward([y2, s], [t["dy"], t["ds"]])
    return [y2.detach(), s.detach(), x.grad, w.grad, res.grad]


def _qk_norm_rope_grads(device, seed):
    gen = torch.Generator().manual_seed(seed)
    t = _to(_qk_backward_inputs(gen), device)
    qkv = t["qkv"].requires_grad_()
    wq, wk = t["wq"].requires_grad_(), t["wk"].requires_grad_()
    q_out, k_out = ropenorm.qk_norm_rope(_q(t), _k(t), wq, wk, EPS, positions=t["positions"],
                                         cos_sin_cache=t["cache"])
    torch.autograd.backward([q_out, k_out], [t["dq_out"], t["dk_out"]])
    return [q_out.detach(), k_out.detach(), qkv.grad, wq.grad, wk.grad]


#: The autograd chains: (run on a device -> outputs and gradients, the operators they use).
CHAINS = {
    "rms_norm_then_add_rms_norm": (_rms_norm_grads, ("rms_norm", "add_rms_norm",
                                                     "rms_norm_backward", "add_rms_norm_backward")),
    "qk_norm_rope": (_qk_norm_rope_grads, ("qk_norm_rope", "qk_norm_rope_backward")),
}


@requires_two_gpus
@pytest.mark.parametrize("current_device", [0, 1])
@pytest.mark.parametrize("chain", list(CHAINS))
def test_autograd_on_cuda1_matches_cuda0(chain, current_device):
    grads, ops = CHAINS[chain]
    for op in ops:
        _require_op(op)
    seed = _seed()
    with torch.cuda.device(0):
        want = [t.cpu() for t in grads("cuda:0", seed)]
    with torch.cuda.device(current_device):
        got = grads("cuda:1", seed)
        assert torch.cuda.current_device() == current_device
    torch.cuda.synchronize(1)
    assert all(t.device == torch.device("cuda:1") for t in got), "outputs and gradients on cuda:1"
    assert_bitwise(got, want, f"{chain} outputs and gradients on cuda:1 (current cuda:"
                   f"{current_device}, seed {seed}) against cuda:0")


@requires_two_gpus
@pytest.mark.parametrize("current_device", [0, 1])
@pytest.mark.parametrize("op", list(CASES))
def test_mixed_devices_raise_value_error_naming_the_argument(op, current_device):
    _require_op(op)
    case = CASES[op]
    moved, name = case.mixed
    tensors = _to(case.make(torch.Generator().manual_seed(_seed())), "cuda:0")
    tensors[moved] = tensors[moved].to("cuda:1")
    before = {k: tensors[k].clone() for k in case.writes}
    with torch.cuda.device(current_device):
        with pytest.raises(Exception) as info:
            case.call(tensors)
    message = str(info.value)
    assert isinstance(info.value, ValueError), (
        f"{op} with '{moved}' on cuda:1 and the other tensors on cuda:0: expected a ValueError "
        f"(docs/python.md, Errors), received {type(info.value).__name__}: {message}")
    assert re.search(name, message) and "cuda:1" in message, (
        f"{op}: the error must name the argument ({name}) and its device: {message}")
    torch.cuda.synchronize(0)
    for k, t in before.items():
        assert torch.equal(_bits(tensors[k]), _bits(t)), f"{op}: a refused call wrote '{k}'"


# ------------------------------------------------------------------------------------------------
# 2. Tensor parallel with torch.distributed (NCCL, one process per GPU)

WORLD = 2
#: NVLink SHARP (NVLS) multicast off (set here and in each worker): plain collectives only.
NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
#: Bound on the whole distributed run (start-up, NCCL set-up, collectives, exit).
DISTRIBUTED_TIMEOUT_S = 90
# Heads: q [TP_T, 32, 128], k [TP_T, 8, 128] (16 q / 4 k heads per rank). Rows: x [TP_M, TP_N].
TP_T, TP_HQ, TP_HK, TP_D, TP_P = 6, 32, 8, 128, 64
TP_M, TP_N = 32, 256
#: Allowed |dw(two ranks, all-reduced) - dw(one GPU)|, in fp32 ulps of max|dw(one GPU)|: the two
#: are fp32 sums of the same per-row terms in different orders (each rank reduces its rows, then
#: one add across the ranks), so they agree only to a few roundings of the sum.
DW_ALLREDUCE_F32_ULPS = 16.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tp_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    return dict(
        eps=EPS,
        q=_rand(gen, TP_T, TP_HQ, TP_D, dtype=torch.bfloat16, scale=2.0),
        k=_rand(gen, TP_T, TP_HK, TP_D, dtype=torch.bfloat16, scale=2.0),
        wq=_rand(gen, TP_D, dtype=torch.bfloat16),
        wk=_rand(gen, TP_D, dtype=torch.bfloat16),
        positions=torch.randint(0, TP_P, (TP_T,), generator=gen, dtype=torch.int64),
        cache=ropenorm.build_rope_cache(TP_P, rotary_dim=TP_D, rope_theta=1e6),
        x=_rand(gen, TP_M, TP_N, dtype=torch.bfloat16, scale=2.0),
        w=_rand(gen, TP_N, dtype=torch.float32),
        dy=_rand(gen, TP_M, TP_N, dtype=torch.bfloat16),
    )


def _tail(path, chars=4000):
    with open(path, errors="replace") as f:
        return f.read()[-chars:]


def _run_workers(tmp_dir, inputs_path):
    """Starts the ranks (torchrun's environment, a free localhost port), waits at most
    DISTRIBUTED_TIMEOUT_S, and returns each rank's results."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(ropenorm.__file__)))
    env = dict(os.environ, **NCCL_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    procs, logs = [], []
    try:
        for rank in range(WORLD):
            log_path = os.path.join(tmp_dir, f"rank{rank}.log")
            logs.append(log_path)
            with open(log_path, "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, WORKER, inputs_path, tmp_dir],
                    env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=log,
                    stderr=subprocess.STDOUT, cwd=HERE))
        deadline = time.monotonic() + DISTRIBUTED_TIMEOUT_S
        for rank, proc in enumerate(procs):
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"rank {rank} did not finish within {DISTRIBUTED_TIMEOUT_S} s; its "
                            f"log:\n{_tail(logs[rank])}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for rank, proc in enumerate(procs):
        if proc.returncode != 0:
            pytest.fail(f"rank {rank} exited with {proc.returncode}; its log:\n{_tail(logs[rank])}")
    return [torch.load(os.path.join(tmp_dir, f"rank{r}.pt"), map_location="cpu")
            for r in range(WORLD)]


@pytest.fixture(scope="module")
def tensor_parallel(tmp_path_factory):
    """(seed, inputs, each rank's results) of one distributed run of the worker."""
    for op in ("qk_norm_rope", "rms_norm", "rms_norm_backward"):
        _require_op(op)
    tmp_dir = str(tmp_path_factory.mktemp("tensor_parallel"))
    seed = _seed()
    inputs = _tp_inputs(seed)
    inputs_path = os.path.join(tmp_dir, "inputs.pt")
    torch.save(inputs, inputs_path)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in NCCL_ENV.items():
            mp.setenv(k, v)
        results = _run_workers(tmp_dir, inputs_path)
    return seed, inputs, results


@requires_two_gpus
def test_tensor_parallel_heads_qk_norm_rope_matches_one_gpu(tensor_parallel):
    seed, inputs, results = tensor_parallel
    with torch.cuda.device(0):
        t = _to({k: inputs[k] for k in ("q", "k", "wq", "wk", "positions", "cache")}, "cuda:0")
        want = ropenorm.qk_norm_rope(t["q"], t["k"], t["wq"], t["wk"], EPS,
                                     positions=t["positions"], cos_sin_cache=t["cache"],
                                     return_rstd=True)
    want = [w.cpu() for w in want]
    for r in results:
        got = [r["heads_q_out"], r["heads_k_out"], r["heads_q_rstd"], r["heads_k_rstd"]]
        # Per-head op: splitting the heads must not change a bit.
        assert_bitwise(got, want, f"rank {r['rank']} ({r['device']}): all-gathered head shards "
                       f"(q_out, k_out, q_rstd, k_rstd; seed {seed}) against one GPU")


@requires_two_gpus
def test_sequence_parallel_rms_norm_forward_backward_matches_one_gpu(tensor_parallel):
    seed, inputs, results = tensor_parallel

    def one_gpu(rows):
        x = inputs["x"][rows].to("cuda:0").requires_grad_()
        w = inputs["w"].to("cuda:0").requires_grad_()
        y = ropenorm.rms_norm(x, w, EPS)
        y.backward(inputs["dy"][rows].to("cuda:0"))
        return y.detach().cpu(), x.grad.cpu(), w.grad.cpu()

    with torch.cuda.device(0):
        y, dx, dw = one_gpu(slice(None))
        shard = TP_M // WORLD
        dw_rank = [one_gpu(slice(r * shard, (r + 1) * shard))[2] for r in range(WORLD)]
    for r in results:
        what = f"rank {r['rank']} ({r['device']}, seed {seed})"
        # Row-local: y and dx rows are bitwise those of one GPU.
        assert_bitwise([r["rows_y"], r["rows_dx"]], [y, dx], f"{what}: all-gathered y, dx rows")
        # The rank's own dw is the one-GPU dw of its rows; NCCL's sum of two fp32 vectors is one
        # fp32 add per element.
        assert_bitwise([r["rows_dw_local"]], [dw_rank[r["rank"]]], f"{what}: dw of its rows")
        assert_bitwise([r["rows_dw_sum"]], [dw_rank[0] + dw_rank[1]], f"{what}: all-reduced dw")
        # Against the one-GPU dw of all rows: the same terms summed in another order.
        scale = dw.abs().max().double()
        ulp = torch.ldexp(torch.ones((), dtype=torch.float64),
                          torch.frexp(scale)[1] - 1 - 23)
        err = float((r["rows_dw_sum"].double() - dw.double()).abs().max() / ulp)
        assert err <= DW_ALLREDUCE_F32_ULPS, (
            f"{what}: all-reduced dw differs from one GPU's by {err:.3g} fp32 ulps of max|dw| "
            f"(allowed {DW_ALLREDUCE_F32_ULPS})")


# ------------------------------------------------------------------------------------------------
# 3. One GPU: the same code path with everything on cuda:0, and the skip reasons


@requires_a_gpu
@pytest.mark.parametrize("op", list(CASES))
def test_op_on_cuda0_under_explicit_device_and_side_stream(op):
    _require_op(op)
    seed = _seed()
    case = CASES[op]
    inputs = case.make(torch.Generator().manual_seed(seed))
    want = reference(case, inputs)
    got = run_on(case, inputs, tensor_device=0, current_device=0, side_stream=True)
    assert_bitwise(got, want, f"{op} under torch.cuda.device(0) and a side stream (seed {seed})")


#: Set in the environment of the pytest run that test_multi_gpu_tests_report_their_skip_reason
#: starts, which must not start another.
PROBE_ENV = "ROPENORM_MULTI_GPU_SKIP_PROBE"


@pytest.mark.skipif(TWO_GPU_REASON is None,
                    reason="2 CUDA devices and the ops are available: the multi-GPU tests run")
@pytest.mark.skipif(os.environ.get(PROBE_ENV) == "1",
                    reason="inside the pytest run this test started")
def test_multi_gpu_tests_report_their_skip_reason():
    """Where they cannot run, this file's multi-GPU tests are reported skipped with the reason."""
    repo = os.path.dirname(os.path.dirname(HERE))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", os.path.abspath(__file__), "-q", "-rs",
         "-p", "no:cacheprovider", "-k", "not op_on_cuda0 and not report_their_skip_reason"],
        cwd=repo, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, **{PROBE_ENV: "1"}))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"pytest exited with {proc.returncode}:\n{out[-4000:]}"
    skipped = re.findall(r"^SKIPPED \[(\d+)\] [^:]+:\d+: (.*)$", out, flags=re.M)
    assert skipped and all(reason == TWO_GPU_REASON for _, reason in skipped), out[-4000:]
    ran = int(re.search(r"(\d+) skipped", out).group(1))
    assert ran == sum(int(n) for n, _ in skipped) and ran >= 4 * len(CASES), out[-4000:]
    assert not re.search(r"\d+ (passed|failed|error)", out), out[-4000:]
