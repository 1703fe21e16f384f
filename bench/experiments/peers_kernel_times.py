"""Fused add forward through torch: kernel time against the call's event time (H200).

The peers benchmark (bench/peers, cold L2) times ropenorm's add_rms_norm forward through its torch
op about 3 us slower at M = 4096 than the main job times the same kernel through the C++ API, and
slower than Liger-Kernel's forward there. This script repeats the peers benchmark's cold-L2
sample (a spin, an L2 flush by reading twice the L2, events around one call) for ropenorm's op
and Liger-Kernel's, and records each sample under torch.profiler: per implementation and shape
the median event time and the median duration of each kernel the call ran, so that the time
outside the kernels shows. bf16, contiguous [M, N], eps 1e-6, out of place, no gradients.
Not part of the test suite or the main job:
    PYTHONPATH=python:<liger site> python3 bench/experiments/peers_kernel_times.py
"""

import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import ropenorm

SHAPES = [(4096, 4096), (4096, 5120), (4096, 7168), (4096, 8192), (32768, 4096)]
SAMPLES = 25


def impls():
    out = {"ropenorm": lambda x, r, w: ropenorm.add_rms_norm(x, r, w, 1e-6)}
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    except Exception as exc:  # not installed here
        print(f"liger: not importable ({exc})")
    else:
        out["liger"] = lambda x, r, w: LigerFusedAddRMSNormFunction.apply(
            x, r, w, 1e-6, 0.0, "llama", False)
    return out


def main() -> int:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 128 << 20) // 4, device="cuda").uniform_()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        for name, fn in impls().items():
            for _ in range(3):
                fn(x, r, w)
            torch.cuda.synchronize()
            events = []
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(SAMPLES):
                    torch.cuda.synchronize()
                    torch.cuda._sleep(200_000)
                    torch.sum(flush)
                    a.record()
                    out = fn(x, r, w)
                    b.record()
                    b.synchronize()
                    events.append(a.elapsed_time(b) * 1e3)
                    del out
            kernels = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA and "sum" not in e.name.lower() \
                        and "sleep" not in e.name.lower() and "reduce" not in e.name.lower():
                    kernels.setdefault(e.name[:60], []).append(e.device_time)
            ks = "; ".join(f"{k}: {statistics.median(v):.2f} us x{len(v)}"
                           for k, v in kernels.items())
            print(f"{name:9s} M={m:6d} N={n:5d} event {statistics.median(events):8.2f} us | {ks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
