"""The peer benchmark's host-side pieces (bench/peers): receipts written and re-read, ratios and
tables, the plot, the ulp measure, the float64 references, the Hugging Face formulas, the bytes
model, the skip path and a CPU dry run of the whole loop. No GPU and no ropenorm extension needed;
the torch-dependent tests skip without torch."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.peers import receipt, summary  # noqa: E402

HEADER = {"device": "Fake GPU", "driver": "1.2.3", "cuda": "13.0", "torch": "2.11.0",
          "commit": "abc", "date": "2026-12-01T00:00:00Z", "copy_bandwidth_gbps": 4000.5,
          "implementations": {"liger": {"available": False, "reason": "absent"}}}


def _row(impl, us, op="rms_norm", shape=None, pass_="fwd", passed=True, rel=1e-3, **kw):
    r = {"op": op, "impl": impl, "dtype": "bf16", "shape": shape or {"M": 4096, "N": 4096},
         "pass": pass_, "timing": "cold_l2", "median_us": us, "min_us": us * 0.9,
         "max_us": us * 1.2, "samples": 25, "bytes": 67117056, "gbps": 67117056 / (us * 1e3),
         "pct_of_copy": 50.0, "max_err_ulp": 1.0, "tol_ulp": 1.0, "frac_exact": 0.99999,
         "passed": passed, "rel_err": rel, "skipped": False, "note": ""}
    r.update(kw)
    return r


def _skipped(impl, reason, **kw):
    r = {"op": "rms_norm", "impl": impl, "dtype": "bf16", "shape": {"M": 4096, "N": 4096},
         "pass": "fwd_bwd", "bytes": 10, "skipped": True, "passed": False, "timing": "",
         "note": reason}
    r.update(kw)
    return r


# ---- receipts ---------------------------------------------------------------------------------

def test_receipt_round_trip(tmp_path):
    rows = [_row("ropenorm", 24.53, note="a, b"),
            _row("torch_eager", 150.0 / 7, max_err_ulp=math.inf),
            _skipped("ropenorm", "not implemented: NotImplementedError: backward")]
    stem = str(tmp_path / "peers-fake")
    receipt.write_receipts(HEADER, rows, stem)
    assert receipt.check_receipts(HEADER, rows, stem) == 3
    back = json.loads(Path(stem + ".json").read_text())
    assert back["device"] == "Fake GPU" and len(back["results"]) == 3
    assert back["results"][1]["max_err_ulp"] is None  # inf is not JSON: null
    assert back["results"][2]["median_us"] is None and back["results"][2]["skipped"] is True
    lines = Path(stem + ".csv").read_text().splitlines()
    assert lines[0].split(",")[:17] == list(receipt.CSV_COLUMNS[:17])
    assert lines[1].split(",")[3] == "M=4096;N=4096"
    assert "a; b" in lines[1]
    assert float(lines[2].split(",")[5]) == 150.0 / 7  # 17 digits re-read exactly


def test_receipt_check_catches_changes(tmp_path):
    rows = [_row("ropenorm", 10.0), _row("liger", 20.0)]
    stem = str(tmp_path / "r")
    receipt.write_receipts(HEADER, rows, stem)
    csv = Path(stem + ".csv")
    good = csv.read_text()
    csv.write_text(good.replace("10,", "10.5,", 1))
    with pytest.raises(receipt.ReceiptError, match="median_us"):
        receipt.check_receipts(HEADER, rows, stem)
    csv.write_text("\n".join(good.splitlines()[:-1]) + "\n")
    with pytest.raises(receipt.ReceiptError, match="row count"):
        receipt.check_receipts(HEADER, rows, stem)
    csv.write_text(good.replace("true", "yes", 1))
    with pytest.raises(receipt.ReceiptError, match="passed"):
        receipt.check_receipts(HEADER, rows, stem)
    csv.write_text(good)
    j = Path(stem + ".json")
    body = json.loads(j.read_text())
    del body["results"][1]["gbps"]
    j.write_text(json.dumps(body))
    with pytest.raises(receipt.ReceiptError, match="gbps"):
        receipt.check_receipts(HEADER, rows, stem)
    del body["commit"]
    j.write_text(json.dumps(body))
    with pytest.raises(receipt.ReceiptError, match="commit"):
        receipt.check_receipts(HEADER, rows, stem)
    j.write_text("{not json")
    with pytest.raises(receipt.ReceiptError, match="does not parse"):
        receipt.check_receipts(HEADER, rows, stem)


def test_receipt_header_required():
    with pytest.raises(receipt.ReceiptError, match="copy_bandwidth_gbps"):
        receipt.write_receipts({k: v for k, v in HEADER.items() if k != "copy_bandwidth_gbps"},
                               [], "/nonexistent/x")


# ---- ratios and tables ------------------------------------------------------------------------

def _fake_rows():
    small = {"M": 1, "N": 4096}
    return [
        _row("ropenorm", 10.0),
        _row("torch_eager", 30.0, passed=False),
        _row("liger", 20.0),
        _row("flashinfer", 5.0, rel=0.5, passed=False),   # fast and wrong: not the best peer
        _row("torch_compile", 1.0, skipped=True, median_us=None),
        _row("ropenorm", 3.0, shape=small, timing="cuda_graph"),
        _row("torch_eager", 2.0, shape=small, timing="cuda_graph"),
        _skipped("ropenorm", "not implemented: backward"),
        _row("torch_eager", 40.0, pass_="fwd_bwd"),
        _row("ropenorm_in_place", 4.0),  # faster than every peer, and not one of them
    ]


def test_best_peer_and_ratio():
    rows = _fake_rows()
    summary.attach_ratios(rows)
    big, small, bwd = rows[0], rows[5], rows[7]
    assert big["best_peer"] == "liger"
    assert big["ratio_vs_best_peer"] == pytest.approx(0.5)
    assert big["speedup_vs_best_peer"] == pytest.approx(2.0)
    assert small["best_peer"] == "torch_eager" and small["ratio_vs_best_peer"] == pytest.approx(1.5)
    assert bwd["best_peer"] == "torch_eager" and "ratio_vs_best_peer" not in bwd
    assert "ratio_vs_best_peer" not in rows[2]  # peers carry no ratio
    assert "ratio_vs_best_peer" not in rows[-1] and "best_peer" not in rows[-1]


def test_tables_render():
    rows = _fake_rows()
    summary.attach_ratios(rows)
    table = summary.shape_table(rows)
    assert "30.00!" in table and "5.00x" in table and "liger" in table and "0.50" in table
    assert "in place" in table.splitlines()[0] and "4.00" in table
    screen = summary.one_screen(rows)
    assert "rms_norm" in screen and "1/2" in screen  # one win out of two rated shapes
    assert "flashinfer 1/1/1" in screen and "ropenorm_in_place" not in screen
    assert len(screen.splitlines()) < 25


def test_plot_from_fake_numbers(tmp_path):
    pytest.importorskip("matplotlib")
    from bench.peers.plot import plot_latency

    rows = _fake_rows()
    rows += [_row("ropenorm", 50.0, op="rope", shape={"T": 1024, "Hq": 32, "Hk": 8, "D": 128}),
             _row("torch_eager", 200.0, op="rope",
                  shape={"T": 1024, "Hq": 32, "Hk": 8, "D": 128})]
    path = plot_latency(rows, str(tmp_path / "peers.png"), "fake")
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


# ---- ulp measure, references, formulas (torch, CPU) -------------------------------------------

def test_round_to_bf16_is_correctly_rounded():
    torch = pytest.importorskip("torch")
    from bench.peers.ulp import round_to

    one = 1.0
    cases = {
        one + 2.0 ** -8: one,                          # tie: to even
        one + 3 * 2.0 ** -8: one + 2.0 ** -6,          # tie: to even (upwards)
        one + 2.0 ** -8 + 2.0 ** -30: one + 2.0 ** -7,  # not a tie (double rounding would miss)
        -(one + 2.0 ** -8 + 2.0 ** -30): -(one + 2.0 ** -7),
        2.0 ** -130: 2.0 ** -130,                      # subnormal, exact
        0.0: 0.0,
    }
    got = round_to(torch.tensor(list(cases), dtype=torch.float64), torch.bfloat16)
    assert got.double().tolist() == list(cases.values())


def test_ulp_and_errors():
    torch = pytest.importorskip("torch")
    from bench.peers.ulp import error_stats, ulp, ulp_error

    v = torch.tensor([1.0, 1.5, 2.0, 0.0, -3.0], dtype=torch.float64)
    assert ulp(v, torch.bfloat16).tolist() == [2.0 ** -7, 2.0 ** -7, 2.0 ** -6, 2.0 ** -133,
                                               2.0 ** -6]
    ref = torch.tensor([1.0, 1.0, 1.0, 2.0], dtype=torch.float64)
    got = torch.tensor([1.0, 1.0 + 2 ** -7, float("nan"), 2.0], dtype=torch.bfloat16)
    assert ulp_error(got, ref).tolist() == [0.0, 1.0, math.inf, 0.0]
    s = error_stats(got, ref)
    assert s.max_ulp == math.inf and s.frac_exact == 0.5 and s.rel_l2 == math.inf
    s = error_stats(got[:2], ref[:2], allow=torch.full((2,), 2.0 ** -7, dtype=torch.float64))
    assert s.max_ulp == 0.0 and s.frac_exact == 0.5 and s.within(0.0)
    with pytest.raises(ValueError, match="shape"):
        error_stats(got, ref[:2])


def test_references_against_autograd_and_hand_cases():
    torch = pytest.importorskip("torch")
    from bench.peers import formulas, reference

    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 33, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    w = torch.randn(33, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    dy = torch.randn(5, 33, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    const = torch.full((2, 8), 3.0, dtype=torch.bfloat16)
    y = reference.rms_norm_forward(const, w[:8], 0.0)[0].ref
    assert torch.allclose(y, w[:8].double().expand(2, 8), rtol=0, atol=1e-15)

    x64 = x.double().requires_grad_()
    w64 = w.double().requires_grad_()
    out = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w64
    gx, gw = torch.autograd.grad(out, [x64, w64], dy.double())
    dx, dw = reference.rms_norm_fwd_bwd(x, w, 1e-6, dy)
    assert torch.allclose(dx.ref, gx, rtol=1e-12, atol=1e-13)
    assert torch.allclose(dw.ref, gw, rtol=1e-12, atol=1e-13)
    assert dx.allow is not None and bool((dx.allow > 0).all())

    cache = formulas.rope_cache(64, 16, 10000.0)
    assert torch.equal(cache[0], torch.cat([torch.ones(8), torch.zeros(8)]))
    q = torch.randn(3, 2, 16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    k = torch.randn(3, 1, 16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    zero = torch.zeros(3, dtype=torch.int64)
    qo, ko = reference.rope_forward(q, k, zero, cache)
    assert torch.equal(qo.ref, q.double()) and torch.equal(ko.ref, k.double())
    pos = torch.tensor([5, 63, 17])
    dq = torch.randn(3, 2, 16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    dk = torch.randn(3, 1, 16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    wq = torch.randn(16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    wk = torch.randn(16, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    leaves = [t.double().requires_grad_() for t in (q, k, wq, wk)]
    fq, fk = reference.qk_norm_rope_forward(*leaves[:2], *leaves[2:], 1e-6, pos, cache)
    want = torch.autograd.grad([fq.ref, fk.ref], leaves, [dq.double(), dk.double()])
    got = reference.qk_norm_rope_fwd_bwd(q, k, wq, wk, 1e-6, pos, cache, dq, dk)
    for g, e in zip(want, got):
        assert torch.allclose(e.ref, g, rtol=1e-12, atol=1e-13), e.name
    leaves = [t.double().requires_grad_() for t in (q, k)]
    fq, fk = reference.rope_forward(*leaves, pos, cache)
    want = torch.autograd.grad([fq.ref, fk.ref], leaves, [dq.double(), dk.double()])
    for g, e in zip(want, reference.rope_fwd_bwd(q, k, pos, cache, dq, dk)):
        assert torch.allclose(e.ref, g, rtol=1e-12, atol=1e-13), e.name
    # The fused add's residual output is the correctly rounded sum.
    r = torch.randn(5, 33, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    s = reference.add_rms_norm_forward(x, r, w, 1e-6)[1]
    assert s.tol_ulp == 0.0 and torch.equal(s.ref, (x + r).double())


def test_hf_formulas_compute_the_reference_function():
    torch = pytest.importorskip("torch")
    from bench.peers import formulas, reference
    from bench.peers.ulp import error_stats

    gen = torch.Generator().manual_seed(11)
    x = torch.randn(64, 256, generator=gen).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(256, generator=gen)).to(torch.bfloat16)
    e = reference.rms_norm_forward(x, w, 1e-6)[0]
    assert error_stats(formulas.hf_rms_norm(x, w, 1e-6), e.ref).max_ulp <= 2.0  # HF rounding
    # In float64 the HF rotation is the reference's rotation.
    cache = formulas.rope_cache(128, 32, 500000.0)
    pos = torch.randint(0, 128, (9,), generator=gen)
    q = torch.randn(9, 4, 32, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    k = torch.randn(9, 2, 32, generator=gen, dtype=torch.float64).to(torch.bfloat16)
    cos, sin = formulas.hf_cos_sin(cache, pos, torch.float64)
    hq, hk = formulas.hf_apply_rotary_pos_emb(q.double(), k.double(), cos, sin)
    rq, rk = reference.rope_forward(q, k, pos, cache)
    assert torch.allclose(hq, rq.ref, rtol=0, atol=1e-14)
    assert torch.allclose(hk, rk.ref, rtol=0, atol=1e-14)


def test_bytes_model_matches_the_cpp_receipts():
    pytest.importorskip("torch")
    from bench.peers.ops import OPS_BY_NAME

    # Values of bench/results/bench-nvidia-h200.json (tools/bench_rms_norm.cpp, bench_rope.cpp).
    assert OPS_BY_NAME["rms_norm"].bytes({"M": 1, "N": 4096}, "fwd") == 24576
    assert OPS_BY_NAME["add_rms_norm"].bytes({"M": 32768, "N": 4095}, "fwd") == 1073487870
    assert OPS_BY_NAME["rope"].bytes({"T": 1024, "Hq": 32, "Hk": 8, "D": 64}, "fwd") == 10756096
    for op in OPS_BY_NAME.values():
        for shape in op.shapes(quick=False):
            assert op.bytes(shape, "fwd_bwd") > op.bytes(shape, "fwd") > 0
    assert len(OPS_BY_NAME["rms_norm"].shapes(quick=False)) == 25
    assert len(OPS_BY_NAME["qk_norm_rope"].shapes(quick=False)) == 15


# ---- the run ----------------------------------------------------------------------------------

def test_skips_cleanly_without_a_gpu():
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: the skip path is not taken")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, "-m", "bench.peers", "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    assert "peers benchmark skipped:" in out.stdout


def test_cpu_dry_run_writes_checked_receipts(tmp_path):
    pytest.importorskip("torch")
    from bench.peers.cli import main

    rc = main(["--dry-run-cpu", "--out-dir", str(tmp_path), "--no-plot",
               "--impls", "ropenorm,torch_eager,torch_rms_norm"])
    assert rc == 0
    stem = str(tmp_path / "peers-cpu-dry-run")
    rows = receipt.read_rows(stem)
    assert {r["impl"] for r in rows} <= {"ropenorm", "torch_eager", "torch_rms_norm"}
    assert {r["op"] for r in rows} == {"rms_norm", "add_rms_norm", "rope", "qk_norm_rope"}
    assert {r["pass"] for r in rows} == {"fwd", "fwd_bwd"}
    eager_fwd = [r for r in rows if r["impl"] == "torch_eager" and r["op"] == "rms_norm"
                 and r["pass"] == "fwd"]
    assert eager_fwd and all(r["max_err_ulp"] <= 2.0 and r["samples"] >= 20 for r in eager_fwd)
    header = json.loads(Path(stem + ".json").read_text())
    assert receipt.check_receipts({k: v for k, v in header.items() if k != "results"}, rows,
                                  stem) == len(rows)


def test_torch_compile_gives_up_the_dynamic_form_per_op_and_pass(monkeypatch):
    """torch_compile's two forms without compiling anything (torch.compile and the unbacked mark
    recorded): each pass starts dynamic with the token dim marked; a Dynamo error in one pass
    moves that op and pass, and only it, to a static compilation of a copy of the function."""
    torch = pytest.importorskip("torch")
    import torch._dynamo
    from torch._dynamo.exc import TorchDynamoException

    from bench.peers import impls

    cfg = torch._dynamo.config
    for key in ("automatic_dynamic_shapes", "recompile_limit", "cache_size_limit",
                "accumulated_recompile_limit"):
        if hasattr(cfg, key):  # TorchCompile sets them: restored after the test
            monkeypatch.setattr(cfg, key, getattr(cfg, key))
    compiled, calls, marked = [], [], []

    def fake_compile(fn, **kw):
        tag = len(compiled)
        compiled.append((fn, kw))

        def run(*args):
            calls.append((tag, torch.is_grad_enabled()))
            return fn(*args)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch._dynamo.decorators, "mark_unbacked",
                        lambda t, dim, **kw: marked.append(id(t)))
    tc = impls.TorchCompile()
    dynamic = {fn: tag for tag, (fn, _) in enumerate(compiled)}[tc._eager["rms_norm"]]

    def call(grad):
        calls.clear()
        marked.clear()
        i = {"x": torch.randn(4, 8), "w": torch.ones(8)}
        with torch.set_grad_enabled(grad):
            tc._fwd["rms_norm"](i)
        assert calls[-1][1] == grad
        return calls[-1][0], id(i["x"]) in marked

    assert call(False) == (dynamic, True) and call(True) == (dynamic, True)
    assert not tc.retry_after("rms_norm", "fwd_bwd", RuntimeError("out of memory"))
    assert "unbacked" in tc.note("rms_norm", "fwd_bwd")
    assert tc.retry_after("rms_norm", "fwd_bwd", TorchDynamoException("no size hint"))
    static_fn, kw = compiled[-1]
    assert kw == {"dynamic": False}
    assert static_fn is not tc._eager["rms_norm"]
    assert static_fn.__code__ is not tc._eager["rms_norm"].__code__
    assert call(True) == (len(compiled) - 1, False)  # static, nothing marked
    assert call(False) == (dynamic, True)  # the forward pass keeps its dynamic form
    assert "static per shape" in tc.note("rms_norm", "fwd_bwd")
    assert "no size hint" in tc.note("rms_norm", "fwd_bwd")
    assert "unbacked" in tc.note("rms_norm", "fwd") and "unbacked" in tc.note("rope", "fwd_bwd")
    assert not tc.retry_after("rms_norm", "fwd_bwd", TorchDynamoException("again"))  # once only


def test_a_backward_that_fails_once_is_retried_and_timed(tmp_path, monkeypatch):
    """A peer whose first backward raises (as torch.compile's dynamic backward compilation
    does) and that asks for a retry gets a timed, checked row with the note of the form that
    ran; one that does not is a SKIP with the error. The forward pass is never retried."""
    torch = pytest.importorskip("torch")
    from bench.peers import impls
    from bench.peers.cli import main

    class FailOnce(torch.autograd.Function):
        armed = True

        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            if FailOnce.armed:
                raise RuntimeError("backward compilation failed")
            return g

    class Flaky(impls.TorchEager):
        def __init__(self, mode):
            super().__init__()
            self.mode = mode  # "retry", "no retry" or "retry fails too"
            self.asked = []
            self.retried = False
            eager = self._fwd["rms_norm"]
            self._fwd = {"rms_norm": lambda i: tuple(FailOnce.apply(o) for o in eager(i))}

        def note(self, op_name, pass_="fwd"):
            return f"{pass_} {'retried' if self.retried else 'first form'}"

        def retry_after(self, op_name, pass_, exc):
            self.asked.append((op_name, pass_, str(exc)))
            if self.mode == "no retry" or self.retried:
                return False
            self.retried = True
            FailOnce.armed = self.mode == "retry fails too"
            return True

    for mode in ("retry", "no retry", "retry fails too"):
        FailOnce.armed = True
        flaky = Flaky(mode)
        monkeypatch.setattr(impls, "load", lambda names: [flaky])
        out = tmp_path / mode.replace(" ", "_")
        assert main(["--dry-run-cpu", "--out-dir", str(out), "--no-plot", "--ops", "rms_norm",
                     "--impls", "torch_eager"]) == 0
        rows = receipt.read_rows(str(out / "peers-cpu-dry-run"))
        fwd = [r for r in rows if r["pass"] == "fwd"]
        bwd = [r for r in rows if r["pass"] == "fwd_bwd"]
        assert fwd and bwd
        assert all(not r["skipped"] and r["median_us"] > 0 for r in fwd)
        assert flaky.asked[0] == ("rms_norm", "fwd_bwd", "backward compilation failed")
        if mode == "retry":
            assert len(flaky.asked) == 1 and not FailOnce.armed
            assert all(not r["skipped"] and r["median_us"] > 0 for r in bwd)
            assert all(r["note"].startswith("fwd_bwd retried") for r in bwd)
        else:  # every backward row a SKIP, its note the form that failed last
            form = "fwd_bwd retried" if mode == "retry fails too" else "fwd_bwd first form"
            assert len(flaky.asked) == len(bwd)  # once a row: the retry itself is not asked
            assert all(r["skipped"] and "backward compilation failed" in r["note"]
                       and form in r["note"] for r in bwd)


def test_a_wrong_in_place_row_fails_the_run(tmp_path, monkeypatch):
    """ropenorm's in-place rows are ropenorm's own: one outside its tolerance, or raising, is a
    failed row (not a skipped peer) and the run exits 1."""
    pytest.importorskip("torch")
    from bench.peers import impls
    from bench.peers.cli import main

    class Wrong(impls.TorchEager):
        name = "ropenorm_in_place"
        has_autograd = False
        # The CPU dry run marks ropenorm's implementations unavailable; this one stays available.
        unavailable = property(lambda self: None, lambda self, value: None)

        def __init__(self):
            super().__init__()
            eager = self._fwd["add_rms_norm"]
            self._fwd = {"add_rms_norm": lambda i: tuple(o * 1.5 for o in eager(i)),
                         "rope": lambda i: (_ for _ in ()).throw(RuntimeError("boom"))}

    monkeypatch.setattr(impls, "load", lambda names: [Wrong()])
    rc = main(["--dry-run-cpu", "--out-dir", str(tmp_path), "--no-plot",
               "--ops", "add_rms_norm,rope", "--impls", "ropenorm_in_place"])
    rows = receipt.read_rows(str(tmp_path / "peers-cpu-dry-run"))
    assert rows and {r["op"] for r in rows} == {"add_rms_norm", "rope"}
    assert all(r["pass"] == "fwd" and not r["skipped"] and not r["passed"] for r in rows)
    assert any("boom" in r["note"] for r in rows if r["op"] == "rope")
    assert rc == 1
