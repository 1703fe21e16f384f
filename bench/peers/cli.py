"""The peer benchmark's run: options, the skip rules, the loop over ops, shapes, passes and
implementations, the receipts, the plot and the tables.

Without torch, without a CUDA device or without a built ropenorm package it prints why it is
skipped and exits 0. Exit status otherwise: 1 when a ropenorm row (its in-place forms' rows
too) fails its accuracy check or raises (other than NotImplementedError, which records the row
as skipped with the reason; peers outside their tolerance, or raising, are flagged in their
rows and are not failures of this run), 2 when the receipts do not re-read as written, else 0.

Per shape: fresh random inputs and float64 references (once per pass); per implementation: its
own copy of the inputs (some peers work in place), the allocator poisoned with NaN blocks of the
outputs' sizes, one checked call (for torch_compile this call compiles; its time is reported in
the note and stays out of the timings), then the timing (``timing``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional, Sequence

from bench.peers import device as devinfo
from bench.peers.names import IMPL_NAMES, OP_NAMES, OUR_NAMES, OURS, OURS_IN_PLACE, PASSES

DEFAULT_OUT_DIR = os.path.join(devinfo.REPO_ROOT, "bench", "results")
#: Device bytes the run needs per activation element of a shape (inputs, per-impl copies,
#: float64 references and their temporaries), for the memory cap.
BYTES_PER_ELEMENT_ESTIMATE = 24
MEMORY_FRACTION = 0.8


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m bench.peers",
        description="Time ropenorm's torch ops against torch eager (Hugging Face formulas), "
                    "torch.nn.functional.rms_norm, torch.compile, Liger-Kernel and FlashInfer "
                    "on one GPU (and ropenorm's in-place forward forms beside them); check "
                    "every output against float64; write receipts.")
    p.add_argument("--quick", action="store_true", help="a few shapes only")
    p.add_argument("--out-dir", default=DEFAULT_OUT_DIR, help="folder for the receipts and plot")
    p.add_argument("--ops", default=",".join(OP_NAMES),
                   help="comma-separated ops (default: %(default)s)")
    p.add_argument("--impls", default=",".join(IMPL_NAMES),
                   help="comma-separated implementations (default: %(default)s)")
    p.add_argument("--passes", default=",".join(PASSES), help="fwd, fwd_bwd or both")
    p.add_argument("--samples", type=int, default=25, help="timed samples per row (>= 20)")
    p.add_argument("--per-graph", type=int, default=20, help="calls captured per CUDA graph")
    p.add_argument("--max-elements", type=int, default=0,
                   help="skip (cap) shapes with more activation elements than this (0: only "
                        "the device-memory estimate caps)")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="tiny shapes on the CPU with the host clock: tests the harness, "
                        "measures nothing")
    a = p.parse_args(argv)
    for flag, values, known in (("--ops", a.ops, OP_NAMES), ("--impls", a.impls, IMPL_NAMES),
                                ("--passes", a.passes, PASSES)):
        bad = [v for v in values.split(",") if v not in known]
        if bad:
            p.error(f"{flag}: unknown {bad}; choose from {list(known)}")
    if a.samples < 20:
        p.error(f"--samples: expected at least 20, received {a.samples}")
    if a.per_graph < 1:
        p.error(f"--per-graph: expected at least 1, received {a.per_graph}")
    return a


def environment_problem(cuda: bool) -> Optional[str]:
    """Why the benchmark cannot run here (None: it can)."""
    try:
        import torch
    except ImportError as exc:
        return f"PyTorch is not importable ({exc})"
    if not cuda:
        return None
    if not torch.cuda.is_available():
        return (f"no usable CUDA device (torch {torch.__version__}, built for CUDA "
                f"{torch.version.cuda or 'none'}: torch.cuda.is_available() is False)")
    try:
        import ropenorm
    except ImportError as exc:
        return f"the ropenorm package is not importable ({exc})"
    reason = ropenorm.unavailable_reason()
    if reason:
        return (f"ropenorm's ops are unavailable ({reason}); build the package with "
                "`python3 -m pip install . --no-build-isolation`")
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    problem = environment_problem(cuda=not args.dry_run_cpu)
    if problem:
        print(f"peers benchmark skipped: {problem}", flush=True)
        return 0
    return Runner(args).run()


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from bench.peers import impls, ops, timing

        self.torch = torch
        self.args = args
        self.dry = args.dry_run_cpu
        self.device = torch.device("cpu" if self.dry else "cuda")
        self.ops = [ops.OPS_BY_NAME[n] for n in args.ops.split(",")]
        self.passes = args.passes.split(",")
        self.impls = impls.load(args.impls.split(","))
        if self.dry:
            for impl in self.impls:
                if impl.name in OUR_NAMES and impl.unavailable is None:
                    impl.unavailable = "its kernels are CUDA only; the CPU dry run tests the harness"
        self.timing = timing
        self.rows: List[Dict[str, Any]] = []
        self.capped: List[str] = []
        self.copy_gbps = 0.0
        self.timer = None

    # ---- the run -------------------------------------------------------------------------

    def run(self) -> int:
        torch = self.torch
        t_start = time.perf_counter()
        name = "cpu-dry-run" if self.dry else torch.cuda.get_device_name()
        print(f"peers benchmark on {name}: torch {torch.__version__}, CUDA "
              f"{torch.version.cuda or 'n/a'}, commit {devinfo.source_commit()}", flush=True)
        for impl in self.impls:
            state = f"unavailable: {impl.unavailable}" if impl.unavailable else "ok"
            print(f"  {impl.name:<18} {impl.version or '':<22} {state}", flush=True)
        if self.dry:
            self.timer = self.timing.HostTimer()
        else:
            self.copy_gbps = self.timing.copy_bandwidth_gbps()
            print(f"copy bandwidth (device-to-device, read + write): {self.copy_gbps:.1f} GB/s",
                  flush=True)
            self.timer = self.timing.CudaTimer(self.args.samples, self.args.per_graph)
            print(f"L2 {self.timer.l2_bytes >> 20} MiB, flushed by reading "
                  f"{self.timer.flush_bytes >> 20} MiB; spin calibration "
                  f"{self.timer.cycles_per_us:.0f} cycles/us", flush=True)
        print(_row_header(), flush=True)
        seed = 20261201
        for op in self.ops:
            t_op = time.perf_counter()
            group = None
            for shape in op.shapes(self.args.quick, self.dry):
                if self._capped(op, shape):
                    continue
                if op.compile_group(shape) != group:
                    group = op.compile_group(shape)
                    for impl in self.impls:
                        impl.start_group(group)
                seed += 1
                self._run_shape(op, shape, seed)
            print(f"-- {op.name}: {time.perf_counter() - t_op:.1f} s", flush=True)
        return self._finish(name, time.perf_counter() - t_start)

    def _capped(self, op, shape) -> bool:
        from bench.peers.ops import shape_str

        elems = op.elements(shape)
        reason = None
        if self.args.max_elements and elems > self.args.max_elements:
            reason = f"{elems} activation elements > --max-elements {self.args.max_elements}"
        elif not self.dry:
            free, _ = self.torch.cuda.mem_get_info()
            need = elems * BYTES_PER_ELEMENT_ESTIMATE
            if need > MEMORY_FRACTION * free:
                reason = (f"needs about {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free on the "
                          "device")
        if reason:
            self.capped.append(f"{op.name} {shape_str(shape)}: {reason}")
            print(f"capped: {op.name} {shape_str(shape)} ({reason})", flush=True)
        return reason is not None

    def _run_shape(self, op, shape, seed: int) -> None:
        torch = self.torch
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        inputs = op.make_inputs(shape, self.device, gen)
        for pass_ in self.passes:
            seeds = op.seeds(inputs, gen) if pass_ == "fwd_bwd" else []
            expected = op.expected(inputs, pass_, seeds)
            for impl in self.impls:
                row = self._run_impl(op, impl, shape, pass_, inputs, seeds, expected)
                if row is not None:
                    self.rows.append(row)
                    print(_row_line(row), flush=True)
            del expected, seeds
        del inputs
        if not self.dry:
            torch.cuda.empty_cache()

    def _run_impl(self, op, impl, shape, pass_, inputs, seeds, expected
                  ) -> Optional[Dict[str, Any]]:
        if impl.unavailable:
            return None
        fwd, missing = impl.lookup(op.name)
        if fwd is None and missing is None:
            return None
        if pass_ == "fwd_bwd" and not impl.has_autograd:
            return None
        row = {"op": op.name, "impl": impl.name, "dtype": "bf16", "shape": dict(shape),
               "pass": pass_, "bytes": op.bytes(shape, pass_), "skipped": False,
               "passed": False, "timing": ""}
        notes = [impl.note(op.name, pass_)]
        if fwd is None:
            return _skipped(row, notes, missing)
        try:
            fn, outs, first = self._first_call(impl, op, fwd, inputs, seeds, pass_, expected)
            notes[0] = impl.note(op.name, pass_)
            self._check(row, notes, outs, expected)
            del outs
            if impl.name == "torch_compile":
                notes.append(f"first call (compiles) {first:.1f} s, not timed")
        except NotImplementedError as exc:
            return _skipped(row, notes, f"not implemented: {_error_line(exc)}")
        except Exception as exc:
            notes[0] = impl.note(op.name, pass_)  # the form that failed last
            return self._failed(row, notes, "failed", exc)
        try:
            t = self._time(op, shape, fn, notes)
        except Exception as exc:
            return self._failed(row, notes, "timing failed", exc)
        row.update(timing=t.kind, median_us=t.median_us, min_us=t.min_us, max_us=t.max_us,
                   samples=t.samples)
        row["gbps"] = row["bytes"] / (t.median_us * 1e3) if t.median_us > 0 else None
        row["pct_of_copy"] = (100.0 * row["gbps"] / self.copy_gbps
                              if self.copy_gbps > 0 and row["gbps"] is not None else None)
        row["note"] = "; ".join(n for n in notes if n)
        return row

    # ---- pieces ---------------------------------------------------------------------------

    def _first_call(self, impl, op, fwd, inputs, seeds, pass_, expected):
        """The checked call on fresh copies of the inputs: (callable, outputs, seconds). When
        it raises and the implementation changes how it runs the op (``Impl.retry_after``:
        torch_compile giving up a failed dynamic compilation), it is made once more."""
        try:
            return self._call_once(op, fwd, inputs, seeds, pass_, expected)
        except NotImplementedError:
            raise
        except Exception as exc:
            if not impl.retry_after(op.name, pass_, exc):
                raise
        # Out of the handler, so the failed attempt's inputs and graph are freed first.
        self._recover()
        return self._call_once(op, fwd, inputs, seeds, pass_, expected)

    def _call_once(self, op, fwd, inputs, seeds, pass_, expected):
        fn = self._callable(op, fwd, inputs, seeds, pass_)
        self._poison(expected)
        t0 = time.perf_counter()
        outs = fn()
        self._sync()
        return fn, outs, time.perf_counter() - t0

    def _callable(self, op, fwd, inputs, seeds, pass_):
        torch = self.torch
        inp = {}
        for k, v in inputs.items():
            c = v.detach().clone()
            if pass_ == "fwd_bwd" and k in op.diff_inputs:
                c.requires_grad_(True)
            inp[k] = c
        if pass_ == "fwd":
            def fn():
                with torch.no_grad():
                    return fwd(inp)
            return fn
        diff = [inp[n] for n in op.diff_inputs]
        sd = [s.clone() for s in seeds]  # a peer's backward may work in place on its seed

        def fn_bwd():
            outs = fwd(inp)
            return torch.autograd.grad(outs, diff, sd)
        return fn_bwd

    def _poison(self, expected) -> None:
        """Best effort to hand the outputs NaN-filled memory: allocate blocks of their sizes
        filled with NaN and free them, so the caching allocator gives them out next."""
        torch = self.torch
        blocks = [torch.full(e.ref.shape, float("nan"), dtype=torch.bfloat16, device=self.device)
                  for e in expected]
        del blocks

    def _check(self, row, notes, outs, expected) -> None:
        from bench.peers.ulp import error_stats

        outs = tuple(outs)
        if len(outs) != len(expected):
            raise RuntimeError(f"{len(outs)} outputs, expected {len(expected)}")
        parts, worst, exact, total, rel = [], None, 0.0, 0, 0.0
        passed = True
        for got, e in zip(outs, expected):
            got = got.detach()
            if got.dtype != self.torch.bfloat16:
                notes.append(f"{e.name} is {got.dtype}")
            s = error_stats(got, e.ref, e.allow, e.unit_at)
            ok = s.within(e.tol_ulp)
            passed = passed and ok
            parts.append(f"{e.name} {s.max_ulp:.3g}/{e.tol_ulp:g}")
            margin = s.max_ulp - e.tol_ulp
            if worst is None or margin > worst[0]:
                worst = (margin, s.max_ulp, e.tol_ulp)
            exact += s.frac_exact * s.elements
            total += s.elements
            rel = max(rel, s.rel_l2)
        row["max_err_ulp"] = worst[1]
        row["tol_ulp"] = worst[2]
        row["frac_exact"] = exact / total if total else 1.0
        row["rel_err"] = rel
        row["passed"] = passed
        notes.append("err/tol ulp: " + " ".join(parts))
        if rel > 1e-2 or rel != rel:
            notes.append(f"WRONG: relative L2 error {rel:.3g}")

    def _time(self, op, shape, fn, notes):
        if op.uses_graph(shape):
            try:
                return self.timer.graph(fn)
            except Exception as exc:
                self._recover()
                notes.append(f"graph capture failed ({_error_line(exc)}); timed cold-L2")
        return self.timer.cold_l2(fn)

    def _failed(self, row, notes, what: str, exc: BaseException) -> Dict[str, Any]:
        """A call that raised: a peer's row is recorded as skipped with the reason; ropenorm's
        as failed (it is this library's error)."""
        self._recover()
        if os.environ.get("ROPENORM_PEERS_TRACEBACK"):
            traceback.print_exc()
        row = _skipped(row, notes, f"{what}: {_error_line(exc)}")
        if row["impl"] in OUR_NAMES:
            row["skipped"] = False
        return row

    def _sync(self) -> None:
        if not self.dry:
            self.torch.cuda.synchronize()

    def _recover(self) -> None:
        if not self.dry:
            try:
                self.torch.cuda.synchronize()
            except Exception:
                pass

    # ---- receipts, plot, tables -----------------------------------------------------------

    def _header(self, name: str) -> Dict[str, Any]:
        from bench.peers import ops

        torch = self.torch
        peers = {i.name: {"version": i.version, "available": i.unavailable is None,
                          "reason": i.unavailable or ""} for i in self.impls}
        return {
            "device": name,
            "driver": "n/a" if self.dry else devinfo.driver_version(),
            "cuda": torch.version.cuda or "n/a",
            "torch": torch.__version__,
            "commit": devinfo.source_commit(),
            "date": devinfo.utc_now(),
            "copy_bandwidth_gbps": self.copy_gbps,
            "mode": "dry_run_cpu" if self.dry else ("quick" if self.args.quick else "full"),
            "l2_bytes": self.timer.l2_bytes,
            "flush_bytes": self.timer.flush_bytes,
            "samples": self.args.samples,
            "per_graph": self.args.per_graph,
            "graph_max_m": ops.GRAPH_MAX_M,
            "graph_max_t": ops.GRAPH_MAX_T,
            "eps": ops.EPS,
            "rope_theta": ops.ROPE_THETA,
            "implementations": peers,
            "capped": list(self.capped),
        }

    def _finish(self, name: str, elapsed: float) -> int:
        from bench.peers import receipt, summary

        summary.attach_ratios(self.rows)
        os.makedirs(self.args.out_dir, exist_ok=True)
        tag = "-quick" if self.args.quick and not self.dry else ""
        stem = os.path.join(self.args.out_dir, f"peers-{devinfo.slug(name)}{tag}")
        header = self._header(name)
        status = 0
        try:
            receipt.write_receipts(header, self.rows, stem)
            n = receipt.check_receipts(header, self.rows, stem)
            print(f"receipts: {stem}.json, {stem}.csv ({n} rows, re-read and checked)",
                  flush=True)
        except (OSError, receipt.ReceiptError) as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            status = 2
        if not self.args.no_plot:
            try:
                from bench.peers.plot import plot_latency

                plot_latency(self.rows, stem + ".png",
                             f"{name}, bf16, median latency (log); copy {self.copy_gbps:.0f} GB/s")
                print(f"plot: {stem}.png", flush=True)
            except ImportError as exc:
                print(f"plot skipped: matplotlib is not importable ({exc})", flush=True)
        ours_failed = [r for r in self.rows
                       if r["impl"] in OUR_NAMES and not r["skipped"] and not r["passed"]]
        print("\nper shape (median us; '!' outside the tolerance, 'x' grossly wrong; "
              "ratio = ropenorm / best peer):")
        print(summary.shape_table(self.rows))
        print(f"\nsummary ({name}, bf16, copy {self.copy_gbps:.0f} GB/s, {elapsed:.0f} s):")
        print(summary.one_screen(self.rows), flush=True)
        for line in self.capped:
            print(f"capped: {line}")
        unavailable = [f"{i.name} ({i.unavailable})" for i in self.impls if i.unavailable]
        if unavailable:
            print("not run: " + "; ".join(unavailable))
        if ours_failed:
            in_place = sum(1 for r in ours_failed if r["impl"] != OURS)
            print(f"{len(ours_failed)} ropenorm rows failed ({in_place} of them "
                  f"{OURS_IN_PLACE}; outside their tolerance, or raised)", flush=True)
            status = status or 1
        return status


def _skipped(row: Dict[str, Any], notes: List[str], reason: str) -> Dict[str, Any]:
    row["skipped"] = True
    row["note"] = "; ".join(n for n in [reason] + notes if n)
    return row


def _row_header() -> str:
    return (f"{'op':<13} {'pass':<7} {'impl':<17} {'shape':<26} {'timing':<10} {'median_us':>10} "
            f"{'GB/s':>7} {'%copy':>6} {'err':>6}  check")


def _row_line(r: Dict[str, Any]) -> str:
    shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
    if r["skipped"] or r.get("median_us") is None:
        state = "SKIP" if r["skipped"] else "FAIL"
        return f"{r['op']:<13} {r['pass']:<7} {r['impl']:<17} {shape:<26} {state}  {r['note']}"
    pct = r.get("pct_of_copy")
    err = r.get("max_err_ulp")
    return (f"{r['op']:<13} {r['pass']:<7} {r['impl']:<17} {shape:<26} {r['timing']:<10} "
            f"{r['median_us']:>10.2f} {r['gbps'] or 0:>7.0f} "
            f"{(f'{pct:.1f}' if pct is not None else '-'):>6} "
            f"{(f'{err:.3g}' if err is not None else '-'):>6}  "
            f"{'PASS' if r['passed'] else 'FAIL'}  {r['note']}")
