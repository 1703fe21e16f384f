"""Ratios against the best peer, and the tables the run prints (per shape, then one screen).

Per (op, pass, dtype, shape), the best peer is the fastest peer row that was timed and is not
grossly wrong (relative L2 error above ``GROSS_REL_ERR``, or non-finite): a peer that is merely
less accurate than the tolerance still counts, and its row shows that it failed. ropenorm's row
gets ``best_peer``, ``ratio_vs_best_peer`` = its median / the best peer's (below 1: ropenorm is
faster) and ``speedup_vs_best_peer`` (the inverse). ropenorm's in-place rows
(``ropenorm_in_place``) are shown beside the peers, never counted as one.

Needs neither torch nor a GPU; rows are plain dicts with the receipt's fields.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Dict, List, Sequence, Tuple

from bench.peers.names import OURS, OURS_IN_PLACE, PEER_NAMES

#: Beyond this relative L2 error (bf16 results land between 1e-3 and 1e-2) a peer is wrong.
GROSS_REL_ERR = 1e-2

Row = Dict[str, Any]


def group_key(r: Row) -> Tuple:
    return (r["op"], r["pass"], r["dtype"], tuple(sorted(r["shape"].items())))


def timed(r: Row) -> bool:
    return not r.get("skipped") and r.get("median_us") is not None


def grossly_wrong(r: Row) -> bool:
    rel = r.get("rel_err")
    return rel is None or not math.isfinite(rel) or rel > GROSS_REL_ERR


def groups(rows: Sequence[Row]) -> "OrderedDict[Tuple, List[Row]]":
    out: "OrderedDict[Tuple, List[Row]]" = OrderedDict()
    for r in rows:
        out.setdefault(group_key(r), []).append(r)
    return out


def attach_ratios(rows: Sequence[Row]) -> None:
    for members in groups(rows).values():
        peers = [r for r in members
                 if r["impl"] in PEER_NAMES and timed(r) and not grossly_wrong(r)]
        best = min(peers, key=lambda r: r["median_us"]) if peers else None
        for r in members:
            if r["impl"] != OURS:
                continue
            r["best_peer"] = best["impl"] if best else ""
            if best and timed(r) and r["median_us"] > 0:
                r["ratio_vs_best_peer"] = r["median_us"] / best["median_us"]
                r["speedup_vs_best_peer"] = best["median_us"] / r["median_us"]


def _shape_text(shape: Dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def _time_cell(r: Row) -> str:
    if r is None:
        return "-"
    if not timed(r):
        return "skip" if r.get("skipped") else "fail"
    mark = "x" if grossly_wrong(r) else ("!" if not r["passed"] else "")
    return f"{r['median_us']:.2f}{mark}"


def shape_table(rows: Sequence[Row]) -> str:
    """Every shape: ropenorm's time, %copy and error, its in-place form's time ("in place"),
    each peer's time, best peer and ratio.
    A peer time marked '!' failed the accuracy check, 'x' is grossly wrong (not counted)."""
    present = [p for p in (OURS_IN_PLACE,) + PEER_NAMES if any(r["impl"] == p for r in rows)]
    head = (f"{'op':<13} {'pass':<7} {'shape':<26} {'timing':<10} {'ropenorm':>9} {'%copy':>6} "
            f"{'err':>5} " + " ".join(f"{_column(p):>14}" for p in present) +
            f" {'best peer':>14} {'ratio':>6}")
    lines = [head]
    for members in groups(rows).values():
        by = {r["impl"]: r for r in members}
        first = members[0]
        ours = by.get(OURS)
        timing = next((r["timing"] for r in members if timed(r)), "")
        pct = f"{ours['pct_of_copy']:.1f}" if ours and timed(ours) else "-"
        err = (f"{ours['max_err_ulp']:.0f}" if ours and ours.get("max_err_ulp") is not None
               and not ours.get("skipped") else "-")
        if ours and not ours.get("skipped") and not ours["passed"]:
            err += "!"
        ratio = ours.get("ratio_vs_best_peer") if ours else None
        lines.append(
            f"{first['op']:<13} {first['pass']:<7} {_shape_text(first['shape']):<26} "
            f"{timing:<10} {_time_cell(ours):>9} {pct:>6} {err:>5} " +
            " ".join(f"{_time_cell(by.get(p)):>14}" for p in present) +
            f" {(ours or {}).get('best_peer') or '-':>14} "
            f"{(f'{ratio:.2f}' if ratio is not None else '-'):>6}")
    return "\n".join(lines)


def _column(impl: str) -> str:
    return "in place" if impl == OURS_IN_PLACE else impl


def _geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def one_screen(rows: Sequence[Row]) -> str:
    """Per op and pass: ropenorm's checks, the ratio to the best peer (geometric mean, best and
    worst shape), how many shapes ropenorm wins; then each peer's failed accuracy checks."""
    per: "OrderedDict[Tuple[str, str], List[Row]]" = OrderedDict()
    for r in rows:
        if r["impl"] == OURS:
            per.setdefault((r["op"], r["pass"]), []).append(r)
    lines = [f"{'op':<13} {'pass':<7} {'shapes':>6} {'pass/fail/skip':>15} {'geomean ratio':>13} "
             f"{'wins':>6}  best / worst shape (ratio = ropenorm time / best peer time)"]
    for (op, pass_), ours in per.items():
        ok = sum(1 for r in ours if timed(r) and r["passed"])
        bad = sum(1 for r in ours if not r.get("skipped") and not r["passed"])
        skip = sum(1 for r in ours if r.get("skipped"))
        rated = [r for r in ours if r.get("ratio_vs_best_peer") is not None]
        if rated:
            ratios = [r["ratio_vs_best_peer"] for r in rated]
            lo = min(rated, key=lambda r: r["ratio_vs_best_peer"])
            hi = max(rated, key=lambda r: r["ratio_vs_best_peer"])
            gm = f"{_geomean(ratios):.2f}"
            wins = f"{sum(1 for v in ratios if v < 1)}/{len(ratios)}"
            extremes = (f"{lo['ratio_vs_best_peer']:.2f} ({_shape_text(lo['shape'])}) / "
                        f"{hi['ratio_vs_best_peer']:.2f} ({_shape_text(hi['shape'])}, "
                        f"{hi['best_peer']})")
        else:
            gm, wins, extremes = "-", "-", "no ratio (ropenorm or every peer skipped)"
        lines.append(f"{op:<13} {pass_:<7} {len(ours):>6} {f'{ok}/{bad}/{skip}':>15} {gm:>13} "
                     f"{wins:>6}  {extremes}")
    flagged: "OrderedDict[str, List[int]]" = OrderedDict()
    for r in rows:
        if r["impl"] in PEER_NAMES and not r.get("skipped"):
            counts = flagged.setdefault(r["impl"], [0, 0, 0])
            counts[0] += 1
            counts[1] += 0 if r["passed"] else 1
            counts[2] += 1 if grossly_wrong(r) else 0
    if flagged:
        lines.append("peers (rows / outside the tolerance / grossly wrong): " + ", ".join(
            f"{k} {v[0]}/{v[1]}/{v[2]}" for k, v in flagged.items()))
    return "\n".join(lines)
