"""End-to-end step times of Hugging Face models: stock vs Liger-Kernel vs ropenorm, one process.

    python3 bench/e2e.py --quick            # < 3 minutes on an H200
    python3 bench/e2e.py [--shapes qwen3,llama] [--variants stock,liger,ropenorm]
                         [--train-seq 8192] [--decode-batch 64] [--kv-len 512] [--out-dir DIR]

Models: a Qwen3-8B-shaped and a Llama-3-8B-shaped model cut to 2 decoder layers (hidden 4096,
intermediate 12288 / 14336, 32 q / 8 kv heads, head_dim 128, vocab 151936 / 128256: the vocab
dominates memory and the loss, so it is kept), bf16, sdpa attention, random weights from a
fixed seed. Variants: the stock model; a deep copy patched by Liger-Kernel
(``apply_liger_kernel_to_qwen3`` / ``_llama`` with ``model=``, its defaults: RMSNorm, RoPE,
SwiGLU and the fused linear cross-entropy) when liger_kernel imports; a deep copy patched by
``ropenorm.integrations.transformers.apply_ropenorm`` (its defaults). Liger also rebinds
functions of the modeling module, which every model of the family would see; they are put in
place only while the Liger variant runs.

Modes (CUDA-event medians; the stream is synchronised before each sample, so a step whose host
side is the bottleneck is timed as the host sees it):

- ``train_labels``: ``model(ids, labels=ids).loss.backward()``, B=1, S=--train-seq: a training
  step's forward and backward with the model's own loss (Liger's fused linear cross-entropy
  runs here, never materialising the logits).
- ``train_logits``: ``cross_entropy(model(ids).logits.float(), ids).backward()``, the same loss
  computed outside the model, so every variant materialises the logits and the difference is
  the decoder layers' kernels only.
- ``decode_kv``: one greedy decode step, B=--decode-batch, S=1, over a DynamicCache holding
  --kv-len tokens (cropped back after each step), under torch.no_grad() as ``generate`` runs it;
  ``decode_kv_inference``: the same under torch.inference_mode() (no autograd bookkeeping, as
  serving runs it).
- ``forward_s1``: a plain forward of B=--decode-batch single tokens, no cache, no_grad.

Every row records its error against the stock model (loss or logits, relative), so a fast but
wrong variant shows. Receipts: ``<out-dir>/e2e-<device>.json`` and ``.csv``, re-read and
checked after writing; a summary table is printed from the re-read file.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import datetime
import importlib
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
from typing import Callable, Dict, List, Optional

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE = "cuda"

#: Targets set for the H200 (bf16), ms: (shape, mode) -> ropenorm step time to reach.
TARGETS_MS = {
    ("qwen3", "train_labels"): 42.4,
    ("llama", "train_labels"): 43.0,
    ("qwen3", "forward_s1"): 2.2,
}

SHAPES = {
    "qwen3": dict(config="Qwen3Config", model="Qwen3ForCausalLM", liger="qwen3",
                  module="transformers.models.qwen3.modeling_qwen3",
                  kwargs=dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                              max_position_embeddings=40960, rms_norm_eps=1e-6,
                              rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                              tie_word_embeddings=False)),
    "llama": dict(config="LlamaConfig", model="LlamaForCausalLM", liger="llama",
                  module="transformers.models.llama.modeling_llama",
                  kwargs=dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                              num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                              max_position_embeddings=131072, rms_norm_eps=1e-5,
                              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                               "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 8192},
                              tie_word_embeddings=False)),
}
MODES = ("train_labels", "train_logits", "decode_kv", "decode_kv_inference", "forward_s1")
FIELDS = ["shape", "mode", "variant", "batch", "seq", "kv_len", "median_ms", "min_ms", "max_ms",
          "samples", "speedup_vs_stock", "speedup_vs_liger", "rel_err_vs_stock", "target_ms",
          "target_met", "note"]


# ------------------------------------------------------------------------------------------------
# Machine and source facts


def _driver() -> str:
    try:
        with open("/proc/driver/nvidia/version") as f:
            for tok in f.readline().split():
                if "." in tok and re.fullmatch(r"[0-9.]+", tok):
                    return tok
    except OSError:
        pass
    return "unknown"


def _commit() -> str:
    env = os.environ.get("ROPENORM_COMMIT")
    if env:
        return env
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=_ROOT,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        if not re.fullmatch(r"[0-9a-f]{40}", head):
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=_ROOT, capture_output=True, text=True, timeout=10).stdout
        return head + ("-dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(dist: str) -> str:
    try:
        from importlib import metadata

        return metadata.version(dist)
    except Exception:  # noqa: BLE001 - any failure means "not installed"
        return "not installed"


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


# ------------------------------------------------------------------------------------------------
# Models


def build_model(shape: str, layers: int):
    import torch
    import transformers

    spec = SHAPES[shape]
    config = getattr(transformers, spec["config"])(num_hidden_layers=layers, **spec["kwargs"])
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = getattr(transformers, spec["model"])._from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model


@contextlib.contextmanager
def module_globals(module, values: Dict[str, object]):
    """Puts values into module's namespace for the duration, then restores it."""
    missing = object()
    saved = {k: module.__dict__.get(k, missing) for k in values}
    for k, v in values.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is missing:
                delattr(module, k)
            else:
                setattr(module, k, v)


def liger_patch(model, shape: str):
    """Applies Liger-Kernel to model; returns the module globals Liger changed (restored now,
    to be put back while the Liger model runs), or raises ImportError."""
    import liger_kernel.transformers as lk

    spec = SHAPES[shape]
    module = importlib.import_module(spec["module"])
    before = dict(module.__dict__)
    getattr(lk, f"apply_liger_kernel_to_{spec['liger']}")(model=model)
    changed = {k: v for k, v in module.__dict__.items() if before.get(k) is not v}
    for k in changed:
        if k in before:
            setattr(module, k, before[k])
        else:
            delattr(module, k)
    return module, changed


# ------------------------------------------------------------------------------------------------
# Timing


def time_ms(fn: Callable[[], object], warmup: int, iters: int,
            between: Optional[Callable[[], None]] = None) -> List[float]:
    import torch

    for _ in range(warmup):
        fn()
        if between is not None:
            between()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
        if between is not None:
            between()
    return out


def rel_err(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run_mode(model, mode: str, args, ids_train, ids_decode, prefill) -> Dict[str, object]:
    """Times one mode on one model; returns the samples and the output to compare."""
    import torch
    import torch.nn.functional as F

    if mode.startswith("train"):
        model.train()

        def step():
            model.zero_grad(set_to_none=True)
            if mode == "train_labels":
                loss = model(input_ids=ids_train, labels=ids_train).loss
            else:
                logits = model(input_ids=ids_train).logits
                loss = F.cross_entropy(logits.float().flatten(0, 1), ids_train.flatten())
            loss.backward()
            return loss.detach()

        samples = time_ms(step, args.train_warmup, args.train_iters)
        out = step()
        model.zero_grad(set_to_none=True)
        return dict(samples=samples, out=out, batch=1, seq=ids_train.shape[1], kv_len=0)

    model.eval()
    grad_ctx = torch.inference_mode if mode == "decode_kv_inference" else torch.no_grad
    with grad_ctx():
        if mode == "forward_s1":
            def step():
                return model(input_ids=ids_decode, use_cache=False).logits

            samples = time_ms(step, args.decode_warmup, args.decode_iters)
            return dict(samples=samples, out=step(), batch=ids_decode.shape[0], seq=1, kv_len=0)
        cache = model(input_ids=prefill, use_cache=True, logits_to_keep=1).past_key_values

        def step():
            return model(input_ids=ids_decode, past_key_values=cache, use_cache=True).logits

        def crop():
            cache.crop(-1)

        samples = time_ms(step, args.decode_warmup, args.decode_iters, between=crop)
        out = step()
        crop()
        return dict(samples=samples, out=out, batch=ids_decode.shape[0], seq=1,
                    kv_len=prefill.shape[1])


def bench_shape(shape: str, args, results: List[Dict[str, object]], env: Dict[str, object]):
    import torch

    from ropenorm.integrations.transformers import apply_ropenorm, patched_modules

    stock = build_model(shape, args.layers)
    vocab = stock.config.vocab_size
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    ids_train = torch.randint(0, vocab, (1, args.train_seq), device=DEVICE, generator=gen)
    ids_decode = torch.randint(0, vocab, (args.decode_batch, 1), device=DEVICE, generator=gen)
    prefill = torch.randint(0, vocab, (args.decode_batch, args.kv_len), device=DEVICE,
                            generator=gen)

    variants = {}
    if "stock" in args.variants:
        variants["stock"] = (stock, contextlib.nullcontext, "")
    if "liger" in args.variants:
        try:
            liger = copy.deepcopy(stock)
            module, changed = liger_patch(liger, shape)
            variants["liger"] = (liger, lambda: module_globals(module, changed), "")
        except ImportError as exc:
            env["notes"].append(f"liger skipped for {shape}: liger_kernel not importable ({exc})")
    if "ropenorm" in args.variants:
        rn = apply_ropenorm(copy.deepcopy(stock))
        roles = sorted(set(patched_modules(rn).values()))
        variants["ropenorm"] = (rn, contextlib.nullcontext, "patched: " + ", ".join(roles))

    for mode in args.modes:
        rows = {}
        stock_out = None
        for name, (model, ctx, note) in variants.items():
            with ctx():
                r = run_mode(model, mode, args, ids_train, ids_decode, prefill)
            out = r.pop("out")
            if name == "stock":
                stock_out = out
            rows[name] = dict(shape=shape, mode=mode, variant=name, note=note,
                              median_ms=statistics.median(r["samples"]),
                              min_ms=min(r["samples"]), max_ms=max(r["samples"]),
                              samples=len(r["samples"]), batch=r["batch"], seq=r["seq"],
                              kv_len=r["kv_len"], _out=out)
            print(f"  {shape:6s} {mode:20s} {name:9s} {rows[name]['median_ms']:9.3f} ms",
                  flush=True)
        for name, row in rows.items():
            out = row.pop("_out")
            row["rel_err_vs_stock"] = rel_err(out, stock_out) if stock_out is not None else None
            for ref in ("stock", "liger"):
                other = rows.get(ref)
                row[f"speedup_vs_{ref}"] = (other["median_ms"] / row["median_ms"]
                                            if other is not None else None)
            target = TARGETS_MS.get((shape, mode)) if name == "ropenorm" else None
            row["target_ms"] = target
            row["target_met"] = (row["median_ms"] <= target) if target is not None else None
            results.append(row)
        torch.cuda.empty_cache()
    del variants, stock
    torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------------
# Receipts


def _csv_value(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_receipts(receipt: Dict[str, object], out_dir: str, device_slug: str):
    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, f"e2e-{device_slug}.json")
    csv_path = os.path.join(out_dir, f"e2e-{device_slug}.csv")
    with open(json_path, "w") as f:
        json.dump(receipt, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for row in receipt["results"]:
            w.writerow([_csv_value(row[k]) for k in FIELDS])
    return json_path, csv_path


def check_receipts(receipt: Dict[str, object], json_path: str, csv_path: str):
    """Re-reads both files and checks they hold what was measured; returns the re-read rows."""
    with open(json_path) as f:
        back = json.load(f)
    for key in ("device", "driver", "cuda", "torch", "transformers", "commit", "results"):
        if back.get(key) != receipt[key]:
            raise RuntimeError(f"{json_path}: field '{key}' does not read back as written")
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != len(back["results"]):
        raise RuntimeError(f"{csv_path}: {len(rows)} rows, the JSON has {len(back['results'])}")
    for got, want in zip(rows, back["results"]):
        for k in FIELDS:
            w = want[k]
            if isinstance(w, float):
                ok = float(got[k]) == w
            else:
                ok = got[k] == _csv_value(w)
            if not ok:
                raise RuntimeError(f"{csv_path}: {k} of {want['shape']}/{want['mode']}/"
                                   f"{want['variant']} reads {got[k]!r}, expected {w!r}")
        if not (isinstance(want["median_ms"], float) and math.isfinite(want["median_ms"])
                and want["median_ms"] > 0):
            raise RuntimeError(f"{json_path}: bad median_ms in {want}")
    return back["results"]


def print_summary(rows: List[Dict[str, object]]):
    table: Dict[tuple, Dict[str, Dict[str, object]]] = {}
    for r in rows:
        table.setdefault((r["shape"], r["mode"]), {})[r["variant"]] = r

    def ms(r):
        return f"{r['median_ms']:.3f}" if r else "-"

    print("\n| shape | mode | stock ms | liger ms | ropenorm ms | vs stock | vs liger | "
          "ropenorm err | target ms |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (shape, mode), v in table.items():
        rn = v.get("ropenorm")
        vs_s = f"{rn['speedup_vs_stock']:.2f}x" if rn and rn["speedup_vs_stock"] else "-"
        vs_l = f"{rn['speedup_vs_liger']:.2f}x" if rn and rn["speedup_vs_liger"] else "-"
        err = f"{rn['rel_err_vs_stock']:.1e}" if rn and rn["rel_err_vs_stock"] is not None else "-"
        tgt = "-"
        if rn and rn["target_ms"] is not None:
            tgt = f"{rn['target_ms']} ({'met' if rn['target_met'] else 'NOT met'})"
        print(f"| {shape} | {mode} | {ms(v.get('stock'))} | {ms(v.get('liger'))} | {ms(rn)} | "
              f"{vs_s} | {vs_l} | {err} | {tgt} |")


# ------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer samples (under 3 minutes)")
    p.add_argument("--shapes", default="qwen3,llama")
    p.add_argument("--variants", default="stock,liger,ropenorm")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--train-seq", type=int, default=8192)
    p.add_argument("--decode-batch", type=int, default=64)
    p.add_argument("--kv-len", type=int, default=512)
    p.add_argument("--out-dir", default=os.path.join(_ROOT, "bench", "results"))
    args = p.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.variants = [s for s in args.variants.split(",") if s]
    args.modes = [s for s in args.modes.split(",") if s]
    for what, got, allowed in (("shape", args.shapes, SHAPES), ("mode", args.modes, MODES),
                               ("variant", args.variants, ("stock", "liger", "ropenorm"))):
        bad = [g for g in got if g not in allowed]
        if bad:
            p.error(f"unknown {what}(s) {bad}; expected some of {list(allowed)}")
    if args.quick:
        args.train_warmup, args.train_iters = 2, 7
        args.decode_warmup, args.decode_iters = 5, 20
    else:
        args.train_warmup, args.train_iters = 3, 20
        args.decode_warmup, args.decode_iters = 10, 100
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as exc:
        print(f"e2e benchmark skipped: {exc}")
        return 0
    if importlib.util.find_spec("ropenorm") is None:  # not installed: the source tree
        sys.path.insert(0, os.path.join(_ROOT, "python"))
    import ropenorm

    if not torch.cuda.is_available():
        print("e2e benchmark skipped: no CUDA device")
        return 0
    if not ropenorm.available():
        print(f"e2e benchmark skipped: {ropenorm.unavailable_reason()}")
        return 0
    from ropenorm.integrations import _hf_kernels

    device = torch.cuda.get_device_name()
    env: Dict[str, object] = {"notes": []}
    results: List[Dict[str, object]] = []
    print(f"e2e: {device}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"liger_kernel {_version('liger_kernel')}", flush=True)
    for shape in args.shapes:
        bench_shape(shape, args, results, env)
    receipt = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": device,
        "driver": _driver(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "liger_kernel": _version("liger_kernel"),
        "commit": _commit(),
        "dtype": "bf16",
        "layers": args.layers,
        "quick": args.quick,
        "timing": "cuda_event_median, stream synchronised before each sample",
        "ropenorm_backward": _hf_kernels.probe_backward(),
        "ropenorm_qk_norm_rope": _hf_kernels.has_fused_qk_norm_rope(),
        "notes": env["notes"],
        "results": results,
    }
    json_path, csv_path = write_receipts(receipt, args.out_dir, _slug(device))
    rows = check_receipts(receipt, json_path, csv_path)
    print_summary(rows)
    for note in env["notes"]:
        print(f"note: {note}")
    print(f"\nreceipts: {json_path}, {csv_path} (re-read and checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
