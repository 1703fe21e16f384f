"""One rank of the tensor-parallel checks of tests/python/test_multi_gpu.py (NCCL, one process
per GPU), started by that test with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT).

    python multi_gpu_worker.py INPUTS_PT OUT_DIR

Reads the inputs the test saved (CPU tensors), runs on cuda:LOCAL_RANK and writes
OUT_DIR/rank<RANK>.pt (CPU tensors), which the test compares with single-GPU results:

- heads: q [T, Hq, D] and k [T, Hk, D] split by heads across the ranks (Hq / world q heads and
  Hk / world k heads each, as views of the rank's packed QKV buffer), ropenorm.qk_norm_rope on
  each rank's shard with the same weights, cache and positions, outputs and per-head rstd
  all-gathered along the head dim;
- rows: x [M, N] split by rows (sequence parallel), ropenorm.rms_norm forward and backward
  through autograd on each rank's rows; y and dx all-gathered along the rows, the weight
  gradient kept as computed locally and all-reduced (sum), as data-parallel training reduces it.
"""

import os
import sys
from datetime import timedelta

# NVLink SHARP (NVLS) multicast off, in NCCL, torch's symmetric memory and NVSHMEM: these checks
# need plain collectives only, and multicast set-up fails where the fabric does not provide it.
NCCL_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
os.environ.update(NCCL_ENV)

import torch  # noqa: E402  (after the environment above, which NCCL reads when it loads)
import torch.distributed as dist  # noqa: E402

import ropenorm  # noqa: E402

#: Bound on process-group set-up and on every collective.
COLLECTIVE_TIMEOUT_S = 60


def _gather(t, dim):
    """The ranks' tensors t concatenated along dim, in rank order."""
    parts = [t.new_empty(t.shape) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return torch.cat(parts, dim=dim)


def _shard(t, dim, rank, world):
    size = t.shape[dim] // world
    return t.narrow(dim, rank * size, size).contiguous()


def _heads(inputs, rank, world, device):
    # The rank's packed QKV projection output [T, (hq + 2 hk) D] (v is not read), q and k views.
    q = _shard(inputs["q"], 1, rank, world)
    k = _shard(inputs["k"], 1, rank, world)
    t, hq, d = q.shape
    hk = k.shape[1]
    qkv = torch.cat([q.flatten(1), k.flatten(1), torch.zeros_like(k).flatten(1)], 1).to(device)
    q = qkv[:, : hq * d].view(t, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(t, hk, d)
    shared = {name: inputs[name].to(device) for name in ("wq", "wk", "cache", "positions")}
    q_out, k_out, q_rstd, k_rstd = ropenorm.qk_norm_rope(
        q, k, shared["wq"], shared["wk"], inputs["eps"], positions=shared["positions"],
        cos_sin_cache=shared["cache"], return_rstd=True)
    return {
        "q_out": _gather(q_out, 1).cpu(),
        "k_out": _gather(k_out, 1).cpu(),
        "q_rstd": _gather(q_rstd, 1).cpu(),
        "k_rstd": _gather(k_rstd, 1).cpu(),
    }


def _rows(inputs, rank, world, device):
    x = _shard(inputs["x"], 0, rank, world).to(device).requires_grad_()
    dy = _shard(inputs["dy"], 0, rank, world).to(device)
    w = inputs["w"].to(device).requires_grad_()
    y = ropenorm.rms_norm(x, w, inputs["eps"])
    y.backward(dy)
    dw_local = w.grad.detach().clone()
    dw_sum = w.grad.detach().clone()
    dist.all_reduce(dw_sum, op=dist.ReduceOp.SUM)
    return {
        "y": _gather(y.detach(), 0).cpu(),
        "dx": _gather(x.grad, 0).cpu(),
        "dw_local": dw_local.cpu(),
        "dw_sum": dw_sum.cpu(),
    }


def main(inputs_path: str, out_dir: str) -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S), device_id=device)
    try:
        inputs = torch.load(inputs_path, map_location="cpu")
        result = {"rank": rank, "device": str(device)}
        result.update({f"heads_{k}": v for k, v in _heads(inputs, rank, world, device).items()})
        result.update({f"rows_{k}": v for k, v in _rows(inputs, rank, world, device).items()})
        torch.cuda.synchronize(device)
        torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
