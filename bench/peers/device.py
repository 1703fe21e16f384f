"""What the peer receipt records about the machine and the source: device, driver, CUDA, torch,
commit (as the C++ receipts do: ROPENORM_COMMIT, else ``git rev-parse HEAD`` with ``-dirty`` when
tracked files changed, else "unknown"), the UTC date and the file-name slug of the device."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(cmd) -> str:
    try:
        out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def source_commit() -> str:
    env = os.environ.get("ROPENORM_COMMIT")
    if env:
        return env
    head = _run(["git", "rev-parse", "--verify", "-q", "HEAD"])
    if not re.fullmatch(r"[0-9a-f]{40}", head):
        return "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return head + "-dirty" if dirty else head


def driver_version() -> str:
    """The kernel module's version (/proc/driver/nvidia/version), else nvidia-smi's, else
    "unknown"."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            line = f.readline()
        for tok in line.split():
            if "." in tok and re.fullmatch(r"[0-9.]+", tok):
                return tok
    except OSError:
        pass
    smi = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return smi.splitlines()[0].strip() if smi else "unknown"


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the C++ receipts' file-name rule)."""
    return "".join(c.lower() if c.isalnum() else "-" for c in name)
