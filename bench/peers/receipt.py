"""The peer receipts: JSON and CSV with the C++ receipts' schema (tools/receipt.cpp), written, then
re-read and checked against what was meant to be written.

The header carries ``device, driver, cuda, torch, commit, date, copy_bandwidth_gbps`` (plus this
run's extras); each row the C++ columns ``op, impl, dtype, shape, timing, median_us, min_us,
max_us, samples, bytes, gbps, pct_of_copy, max_err_ulp, tol_ulp, frac_exact, passed, note``,
then ``pass`` ("fwd" or "fwd_bwd"), ``skipped``, ``rel_err`` (relative L2 error),
``best_peer``, ``ratio_vs_best_peer`` (ropenorm's median over the fastest peer's, in ropenorm's
rows) and ``speedup_vs_best_peer`` (its inverse). A number that does not exist (a skipped row's
time, a ratio in a peer's row, a non-finite error) is null in JSON and empty in CSV. The CSV
writes the shape as ``M=1;N=4096``, booleans as true/false and numbers with 17 significant
digits, so they re-read exactly; commas in notes become ';'.

Needs neither torch nor a GPU.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Sequence

CSV_COLUMNS = (
    "op", "impl", "dtype", "shape", "timing", "median_us", "min_us", "max_us", "samples",
    "bytes", "gbps", "pct_of_copy", "max_err_ulp", "tol_ulp", "frac_exact", "passed", "note",
    "pass", "skipped", "rel_err", "best_peer", "ratio_vs_best_peer", "speedup_vs_best_peer",
)
INT_COLUMNS = frozenset({"samples", "bytes"})
FLOAT_COLUMNS = frozenset({
    "median_us", "min_us", "max_us", "gbps", "pct_of_copy", "max_err_ulp", "tol_ulp",
    "frac_exact", "rel_err", "ratio_vs_best_peer", "speedup_vs_best_peer",
})
BOOL_COLUMNS = frozenset({"passed", "skipped"})
TYPED_COLUMNS = INT_COLUMNS | FLOAT_COLUMNS | BOOL_COLUMNS | {"shape"}
HEADER_FIELDS = ("device", "driver", "cuda", "torch", "commit", "date", "copy_bandwidth_gbps")


class ReceiptError(Exception):
    """A receipt file does not re-read as written; the message names the file and the field."""


def normalize_row(row: Dict[str, Any]) -> Dict[str, Any]:
    """Every column present, typed: ints, finite floats or None, bools, strings, shape dict."""
    out: Dict[str, Any] = {}
    for c in CSV_COLUMNS:
        v = row.get(c)
        if c == "shape":
            out[c] = {str(k): int(n) for k, n in (v or {}).items()}
        elif c in INT_COLUMNS:
            out[c] = None if v is None else int(v)
        elif c in FLOAT_COLUMNS:
            out[c] = None if v is None or not math.isfinite(float(v)) else float(v)
        elif c in BOOL_COLUMNS:
            out[c] = bool(v)
        else:
            out[c] = "" if v is None else str(v)
    return out


def shape_cell(shape: Dict[str, int]) -> str:
    return ";".join(f"{k}={v}" for k, v in shape.items())


def _cell(column: str, value: Any) -> str:
    if column == "shape":
        return shape_cell(value)
    if value is None:
        return ""
    if column in BOOL_COLUMNS:
        return "true" if value else "false"
    if column in FLOAT_COLUMNS:
        return "%.17g" % value
    if column in INT_COLUMNS:
        return str(value)
    return str(value).replace(",", ";").replace("\n", " ").replace("\r", " ")


def write_receipts(header: Dict[str, Any], rows: Sequence[Dict[str, Any]], stem: str) -> None:
    """Writes ``<stem>.json`` and ``<stem>.csv``."""
    for f in HEADER_FIELDS:
        if f not in header:
            raise ReceiptError(f"receipt header lacks field {f}")
    body = dict(header)
    body["results"] = [normalize_row(r) for r in rows]
    with open(stem + ".json", "w", encoding="utf-8") as f:
        json.dump(body, f, indent=1, allow_nan=False)
        f.write("\n")
    with open(stem + ".csv", "w", encoding="utf-8", newline="") as f:
        f.write(",".join(CSV_COLUMNS) + "\n")
        for r in body["results"]:
            f.write(",".join(_cell(c, r[c]) for c in CSV_COLUMNS) + "\n")


def _parse_cell(path: str, i: int, column: str, text: str) -> Any:
    try:
        if column == "shape":
            shape = {}
            for part in filter(None, text.split(";")):
                k, v = part.split("=")
                shape[k] = int(v)
            return shape
        if column in BOOL_COLUMNS:
            if text not in ("true", "false"):
                raise ValueError(f"'{text}' is not true/false")
            return text == "true"
        if text == "" and (column in FLOAT_COLUMNS or column in INT_COLUMNS):
            return None
        if column in FLOAT_COLUMNS:
            v = float(text)
            if not math.isfinite(v):
                raise ValueError(f"'{text}' is not finite")
            return v
        if column in INT_COLUMNS:
            return int(text)
    except ValueError as exc:
        raise ReceiptError(f"{path}: row {i} column {column}: does not parse ({exc})") from None
    return text


def check_receipts(header: Dict[str, Any], rows: Sequence[Dict[str, Any]], stem: str) -> int:
    """Re-reads both files and checks them against header and rows; returns the row count."""
    want = [normalize_row(r) for r in rows]
    jpath, cpath = stem + ".json", stem + ".csv"
    try:
        with open(jpath, encoding="utf-8") as f:
            back = json.load(f)
    except (OSError, ValueError) as exc:
        raise ReceiptError(f"{jpath}: does not parse ({exc})") from None
    for field in HEADER_FIELDS + ("results",):
        if field not in back:
            raise ReceiptError(f"{jpath}: missing field {field}")
    for field in header:
        if back[field] != header[field]:
            raise ReceiptError(f"{jpath}: header field {field} differs from what was written")
    if len(back["results"]) != len(want):
        raise ReceiptError(f"{jpath}: row count {len(back['results'])} != {len(want)}")
    for i, (got, exp) in enumerate(zip(back["results"], want)):
        for c in CSV_COLUMNS:
            if c not in got:
                raise ReceiptError(f"{jpath}: row {i} lacks field {c}")
            v = got[c]
            if c in FLOAT_COLUMNS or c in INT_COLUMNS:
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise ReceiptError(f"{jpath}: row {i} field {c} is not a number: {v!r}")
            if v != exp[c]:
                raise ReceiptError(f"{jpath}: row {i} field {c}: {v!r} != {exp[c]!r}")

    try:
        with open(cpath, encoding="utf-8", newline="") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ReceiptError(f"{cpath}: cannot be read ({exc})") from None
    if not lines or tuple(lines[0].split(",")) != CSV_COLUMNS:
        raise ReceiptError(f"{cpath}: header is not {','.join(CSV_COLUMNS)}")
    body = lines[1:]
    if len(body) != len(want):
        raise ReceiptError(f"{cpath}: row count {len(body)} != {len(want)}")
    for i, (line, exp) in enumerate(zip(body, want)):
        cells = line.split(",")
        if len(cells) != len(CSV_COLUMNS):
            raise ReceiptError(f"{cpath}: row {i} has {len(cells)} columns, not "
                               f"{len(CSV_COLUMNS)}")
        for c, text in zip(CSV_COLUMNS, cells):
            v = _parse_cell(cpath, i, c, text)
            e = exp[c] if c in TYPED_COLUMNS else _cell(c, exp[c])
            if v != e:
                raise ReceiptError(f"{cpath}: row {i} column {c}: {text!r} != {e!r}")
    return len(want)


def read_rows(stem: str) -> List[Dict[str, Any]]:
    """The rows of ``<stem>.json`` (for plotting or comparing a receipt after the run)."""
    with open(stem + ".json", encoding="utf-8") as f:
        return json.load(f)["results"]
