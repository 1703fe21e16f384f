"""Fused add forward through torch: kernel time against the call's event time (H200).

The peers benchmark (bench/peers, cold L2) times ropenorm's add_rms_norm forward through its torch
op about 3 us slower at M = 4096 than the main job times the same kernel through the C++ API, and
slower than Liger-Kernel's forward there. This script repeats the peers benchmark's cold-L2
sample (a spin, an L2 flush by reading twice the L2, events around one call) for ropenorm's op
and Liger-Kernel's, and records each sample under torch.profiler: per implementation and shape
the median event time and the median duration of each kernel the call ran, so that the time
outside the kernels shows. bf16, contiguous [M, N], eps 1e-6, out of place, no gradients.
With the argument "fwd_bwd" it records the forward + backward sample instead (x, residual and
weight requiring gradients, torch.autograd.grad of (y, s) with random seeds, as the peers
benchmark's fwd_bwd pass) at few rows of 4095 and 4096 columns, where the peers runs put
ropenorm's odd widths several microseconds behind its even ones; each kernel of the sample with
its median duration and count per sample, and a timeline per sample: each kernel's median start
and end from the first kernel's start, the span and the busy time (kernels launched with
programmatic dependent launch may start before their predecessor ends and wait inside, so their
durations overlap). torch's reduction kernels are left out of the lists (the L2 flush is one; so
is Liger-Kernel's sum of its dw partials). With the argument "plain" it records the plain
RMSNorm forward (ropenorm.rms_norm against Liger-Kernel's LigerRMSNormFunction) at the forward's
shapes instead.
Not part of the test suite or the main job:
    PYTHONPATH=python:<liger site> python3 bench/experiments/peers_kernel_times.py [fwd_bwd|plain]
"""

import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import ropenorm

SHAPES = [(4096, 4096), (4096, 5120), (4096, 7168), (4096, 8192), (32768, 4096)]
FWD_BWD_SHAPES = [(1, 4095), (1, 4096), (32, 4095), (32, 4096), (512, 4095), (512, 4096)]
SAMPLES = 25


def impls(plain=False):
    """The calls timed, (x, residual, weight) -> outputs; plain: the RMSNorm of x alone."""
    if plain:
        out = {"ropenorm": lambda x, r, w: ropenorm.rms_norm(x, w, 1e-6)}
    else:
        out = {"ropenorm": lambda x, r, w: ropenorm.add_rms_norm(x, r, w, 1e-6)}
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as exc:  # not installed here
        print(f"liger: not importable ({exc})")
        return out
    if plain:
        out["liger"] = lambda x, r, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    else:
        out["liger"] = lambda x, r, w: LigerFusedAddRMSNormFunction.apply(
            x, r, w, 1e-6, 0.0, "llama", False)
    return out


def main() -> int:
    fwd_bwd = len(sys.argv) > 1 and sys.argv[1] == "fwd_bwd"
    plain = len(sys.argv) > 1 and sys.argv[1] == "plain"
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(max(2 * l2, 128 << 20) // 4, device="cuda").uniform_()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
          f"{', forward + backward' if fwd_bwd else ''}{', plain RMSNorm' if plain else ''}")
    for m, n in FWD_BWD_SHAPES if fwd_bwd else SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=fwd_bwd)
        r = torch.randn(m, n, device="cuda", dtype=torch.bfloat16, requires_grad=fwd_bwd)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16, requires_grad=fwd_bwd)
        seeds = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        for name, impl in impls(plain).items():
            if fwd_bwd:
                def fn(impl=impl):
                    return torch.autograd.grad(impl(x, r, w), [x, r, w], seeds)
            else:
                def fn(impl=impl):
                    with torch.no_grad():
                        return impl(x, r, w)
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            events = []
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(SAMPLES):
                    torch.cuda.synchronize()
                    torch.cuda._sleep(200_000)
                    torch.sum(flush)
                    a.record()
                    out = fn()
                    b.record()
                    b.synchronize()
                    events.append(a.elapsed_time(b) * 1e3)
                    del out
            kernels = {}
            for e in prof.events():
                low = e.name.lower()
                if e.device_type == torch.autograd.DeviceType.CUDA and "sleep" not in low \
                        and "spin" not in low and not (low.startswith("void at::native::reduce")):
                    kernels.setdefault(e.name[:60], []).append(e.device_time)
            ks = "; ".join(f"{k}: {statistics.median(v):.2f} us x{len(v) / SAMPLES:g}"
                           for k, v in kernels.items())
            print(f"{name:9s} M={m:6d} N={n:5d} event {statistics.median(events):8.2f} us | {ks}")
            if fwd_bwd:
                print(f"{'':9s} timeline: {timeline(prof)}")
    return 0


def timeline(prof) -> str:
    """Per sample, the kernels after the L2 flush (a torch reduction) on one time axis from the
    first one's start: each kernel's median start and end, the median span (first start to last
    end) and the median busy time (the union of the kernels' intervals: overlapping kernels count
    once, gaps where the device waited for the host not at all)."""
    samples, cur, flush_next = [], None, False
    kernels = sorted((e for e in prof.events()
                      if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    for e in kernels:
        low = e.name.lower()
        if "sleep" in low or "spin" in low:  # a sample's spin, then its flush, then the call
            cur, flush_next = None, True
        elif flush_next:
            if low.startswith("void at::native::reduce"):
                cur, flush_next = [], False
                samples.append(cur)
        elif cur is not None:
            cur.append((e.name[:40], e.time_range.start, e.time_range.end))
    starts, ends, spans, busy = {}, {}, [], []
    for ks in samples:
        if not ks:
            continue
        t0 = ks[0][1]
        for nm, a, b in ks:
            starts.setdefault(nm, []).append(a - t0)
            ends.setdefault(nm, []).append(b - t0)
        spans.append(max(b for _, _, b in ks) - t0)
        union, reach = 0.0, t0
        for _, a, b in ks:
            if b > reach:
                union += b - max(a, reach)
                reach = b
        busy.append(union)
    parts = [f"{nm} {statistics.median(starts[nm]):.2f}-{statistics.median(ends[nm]):.2f}"
             for nm in starts]
    return (f"span {statistics.median(spans):.2f} us, busy {statistics.median(busy):.2f} us | "
            + "; ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
