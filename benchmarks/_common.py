"""Shared helpers for benchmark and reproduction scripts.

Every script writes one JSON file whose records each carry what was measured, the
shapes, dtype, device and versions (``machine_info``), medians and spreads, and the
ratio the benchmark exists for.  Timing helpers warm up (compile) first, then time
steady-state calls with ``block_until_ready`` and report the median.
"""
from __future__ import annotations

import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def machine_info() -> dict[str, Any]:
    """Describe the machine a measurement was taken on."""
    dev = jax.devices()[0]
    return {
        "platform": dev.platform,
        "device_kind": getattr(dev, "device_kind", str(dev)),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "note": "machines here are shared and noisy: medians of repeated runs are quoted; "
        "loadavg_1m tells how busy this one was when the record was written",
    }


def _block(out):
    return jax.tree_util.tree_map(
        lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, out
    )


def timeit(fn: Callable, *args, repeats: int = 7, warmup: int = 1, **kwargs) -> dict[str, float]:
    """Time ``fn(*args)``: compile/warm-up time apart, then the median of ``repeats`` calls.

    Returns a dict with ``compile_s`` (first call), ``median_s``, ``min_s``, ``max_s`` and
    ``iqr_s`` (seconds).
    """
    t0 = time.perf_counter()
    for _ in range(max(warmup, 1)):
        _block(fn(*args, **kwargs))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _block(fn(*args, **kwargs))
        times.append(time.perf_counter() - t0)
    q = np.percentile(times, [25, 75])
    return {
        "compile_s": compile_s,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "iqr_s": float(q[1] - q[0]),
        "repeats": repeats,
    }


def to_jsonable(obj):
    """Convert numpy/jax arrays and scalars inside nested dicts/lists to JSON types."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (np.ndarray, jax.Array)):
        return np.asarray(obj).tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, pathlib.Path):
        return str(obj)
    return obj


def write_json(path: str | os.PathLike, payload: dict[str, Any]) -> pathlib.Path:
    """Write ``payload`` (with ``machine`` info added) as indented JSON; return the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_info(), **payload}
    path.write_text(json.dumps(to_jsonable(payload), indent=2))
    return path


def results_dir(name: str, override: str | None = None) -> pathlib.Path:
    """``results/<name>/`` (or ``override``), created."""
    d = pathlib.Path(override) if override else RESULTS / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def csv_list(s: str, type: Callable = float) -> list:
    """Parse a comma-separated command-line value (``"0.1,1,3"``) into a list of ``type``."""
    return [type(v) for v in s.split(",") if v.strip()]
