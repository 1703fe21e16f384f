"""Timing on the device: the copy-bandwidth ceiling, cold-L2 event timing and CUDA-graph replay.

- ``copy_bandwidth_gbps``: a 1 GiB device-to-device tensor copy, median of 20 after warm-up,
  counting bytes read plus bytes written.
- ``CudaTimer.cold_l2``: one call per sample between two CUDA events; before each sample the L2
  is evicted by *reading* a buffer of twice its size (at least 128 MiB; a read, not a memset, so
  no dirty lines are left for the timed call to write back). The GPU is kept busy with a spin
  kernel (``torch.cuda._sleep``) while the host enqueues the sample, so the host's launch
  overhead does not open gaps inside the timed region (the spin runs before the first event).
- ``CudaTimer.graph``: ``per_graph`` calls captured in one CUDA graph (after warm-up on a side
  stream, as torch's graph documentation prescribes, so autograd and allocator state exist); a
  sample is one replay between two events, divided by ``per_graph``. Inputs stay in L2 across
  the calls of a replay, as they do for a decode step.
- ``HostTimer``: the host clock, for the CPU dry run only (tests the harness, measures nothing).

Every figure is the median, min and max of ``samples`` (>= 20) samples taken after warm-up.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, List

import torch

MIN_FLUSH_BYTES = 128 << 20
#: Longest spin kept in front of a sample (µs); host enqueue times beyond it show as gaps.
MAX_PAD_US = 5000.0


@dataclass
class Timing:
    kind: str
    median_us: float
    min_us: float
    max_us: float
    samples: int


def summarize(kind: str, us: List[float]) -> Timing:
    return Timing(kind, statistics.median(us), min(us), max(us), len(us))


def copy_bandwidth_gbps(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy rate (GB/s, read + write) of a large tensor, median of reps."""
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        dst.copy_(src)
    us = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        us.append(a.elapsed_time(b) * 1e3)
    del src, dst
    return 2.0 * nbytes / (statistics.median(us) * 1e3)


class CudaTimer:
    def __init__(self, samples: int = 25, per_graph: int = 20, warmup: int = 3) -> None:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.samples = samples
        self.per_graph = per_graph
        self.warmup = max(warmup, 2)
        self.l2_bytes = int(props.L2_cache_size)
        self.flush_bytes = max(2 * self.l2_bytes, MIN_FLUSH_BYTES)
        self._flush_buf = torch.empty(self.flush_bytes // 4, dtype=torch.float32,
                                      device="cuda").uniform_()
        self._sink = None
        self._a = torch.cuda.Event(enable_timing=True)
        self._b = torch.cuda.Event(enable_timing=True)
        self.cycles_per_us = self._calibrate_spin()

    def _calibrate_spin(self) -> float:
        if not hasattr(torch.cuda, "_sleep"):
            return 0.0
        torch.cuda._sleep(1000)
        cycles = 2_000_000
        self._a.record()
        torch.cuda._sleep(cycles)
        self._b.record()
        self._b.synchronize()
        us = self._a.elapsed_time(self._b) * 1e3
        return cycles / us if us > 0 else 0.0

    def _spin(self, us: float) -> None:
        if self.cycles_per_us > 0 and us > 0:
            torch.cuda._sleep(int(us * self.cycles_per_us))

    def _flush_l2(self) -> None:
        self._sink = torch.sum(self._flush_buf)

    def _warm(self, fn: Callable) -> float:
        """Warm-up calls; returns the host's enqueue time of one call (µs, the larger of the
        last two)."""
        host = []
        for _ in range(self.warmup):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            host.append((time.perf_counter() - t0) * 1e6)
            del out
        torch.cuda.synchronize()
        return max(host[-2:])

    def cold_l2(self, fn: Callable) -> Timing:
        pad = min(MAX_PAD_US, 2.0 * self._warm(fn) + 30.0)
        us = []
        out = None
        for _ in range(self.samples):
            out = None
            torch.cuda.synchronize()
            self._spin(pad)
            self._flush_l2()
            self._a.record()
            out = fn()
            self._b.record()
            self._b.synchronize()
            us.append(self._a.elapsed_time(self._b) * 1e3)
        del out
        return summarize("cold_l2", us)

    def graph(self, fn: Callable) -> Timing:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                out = fn()
                del out
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            outs = [fn() for _ in range(self.per_graph)]  # distinct outputs, as in a real step
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        us = []
        for _ in range(self.samples):
            torch.cuda.synchronize()
            self._spin(50.0)
            self._a.record()
            g.replay()
            self._b.record()
            self._b.synchronize()
            us.append(self._a.elapsed_time(self._b) * 1e3 / self.per_graph)
        del outs, g
        return summarize("cuda_graph", us)


class HostTimer:
    """The CPU dry run's stand-in: host clock around each call."""

    def __init__(self, samples: int = 20, warmup: int = 2) -> None:
        self.samples = samples
        self.warmup = warmup
        self.l2_bytes = 0
        self.flush_bytes = 0
        self.per_graph = 1

    def _time(self, fn: Callable) -> Timing:
        for _ in range(self.warmup):
            fn()
        us = []
        for _ in range(self.samples):
            t0 = time.perf_counter()
            fn()
            us.append((time.perf_counter() - t0) * 1e6)
        return summarize("host_clock", us)

    def cold_l2(self, fn: Callable) -> Timing:
        return self._time(fn)

    def graph(self, fn: Callable) -> Timing:
        return self._time(fn)
