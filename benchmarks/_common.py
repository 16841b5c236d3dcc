"""Shared helpers for benchmark and reproduction scripts.

Every script writes one JSON file whose records each carry what was measured, the
shapes, dtype, device and versions (``machine_info``), medians and spreads, and the
ratio the benchmark exists for.  Timing helpers warm up (compile) first, then time
steady-state calls with ``block_until_ready`` and report the median.

Importing this module is cheap (no JAX): scripts build their parser with
:func:`arg_parser` / :func:`add_output_flags` and import JAX only after parsing, so
``--help`` answers at once. Output folders (:func:`out_dir`): ``--out DIR`` if given, else
``results/<name>/`` with ``--record`` (the committed record), else ``scratch/<name>/``
(git-ignored), so a default run never touches committed results. Every JSON written by
:func:`write_json` carries ``wall_s_total``: seconds from the script's start to the write.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

# numpy is imported inside the functions that use it: a script that sets its BLAS thread
# variables or pins its CPU affinity in main() (gnrev_step, dgl_loss) must be able to import
# this module before numpy's OpenBLAS starts its threads

REPO = pathlib.Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
SCRATCH = REPO / "scratch"
#: Start of the script (first import of this module, before argument parsing).
START = time.perf_counter()


def arg_parser(doc: str | None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` that shows every flag's default, described by ``doc``."""
    return argparse.ArgumentParser(description=doc,
                                   formatter_class=_Formatter)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, the module docstring kept as written."""


def add_output_flags(ap: argparse.ArgumentParser, name: str) -> None:
    """``--out`` and ``--record`` (see :func:`out_dir`)."""
    ap.add_argument("--out", default=None,
                    help=f"output folder; unset: scratch/{name}/ (git-ignored), or "
                    f"results/{name}/ with --record")
    ap.add_argument("--record", action="store_true",
                    help=f"write the committed record results/{name}/ instead of scratch/")


def out_dir(name: str, out: str | None = None, record: bool = False) -> pathlib.Path:
    """``out`` if given, else ``results/<name>/`` when ``record``, else ``scratch/<name>/``;
    created."""
    d = pathlib.Path(out) if out else (RESULTS if record else SCRATCH) / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def module_at(rev: str, relpath: str, name: str, package: str = ""):
    """The file ``relpath`` as of git revision ``rev``, executed as its own module ``name``
    (for ``--compare-rev`` A/B runs).  Only that file is swapped: what it imports comes from
    the working tree (``package`` resolves its relative imports), so an old revision works
    while those neighbours keep their API.  A revision git cannot show stops the script with
    a message naming ``--compare-rev``."""
    import subprocess
    import sys
    import types

    got = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{relpath}"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"--compare-rev {rev}: git could not show {relpath} at that "
                         f"revision: {got.stderr.strip()}")
    mod = types.ModuleType(name)
    mod.__package__ = package
    mod.__file__ = f"<{relpath}@{rev}>"
    sys.modules[name] = mod  # dataclasses and pickling look their module up by name
    exec(compile(got.stdout, mod.__file__, "exec"), mod.__dict__)
    return mod


def uncached_env(env: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """A copy of ``env`` (default ``os.environ``) for a fresh subprocess whose compile times
    are measured: JAX's persistent compilation cache off (``JAX_ENABLE_COMPILATION_CACHE=false``,
    ``JAX_COMPILATION_CACHE_DIR`` and the other ``JAX_*CACHE*`` variables dropped), so a
    "compile" is never a load from an earlier run's cache.  Returns the environment and a note
    for the JSON record (what was dropped)."""
    env = dict(os.environ if env is None else env)
    dropped = {k: env.pop(k) for k in sorted(env)
               if k.startswith("JAX_") and "CACHE" in k and k != "JAX_ENABLE_COMPILATION_CACHE"}
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    return env, {"compilation_cache": "disabled in the subprocesses "
                 "(JAX_ENABLE_COMPILATION_CACHE=false)", "cache_env_dropped": dropped}


#: Environment variables that change timings; recorded by :func:`machine_info`.
TIMING_ENV = ("XLA_FLAGS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
              "JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE")


def _version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None if not installed); no import."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """Describe the machine a measurement was taken on: device, versions (jax, jaxlib, numpy,
    neural-tangents), the thread / XLA settings of :data:`TIMING_ENV` and the CPU affinity."""
    import jax

    dev = jax.devices()[0]
    return {
        "platform": dev.platform,
        "device_kind": getattr(dev, "device_kind", str(dev)),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": _version("jaxlib"),
        "numpy": _version("numpy"),
        "neural_tangents": _version("neural-tangents"),
        "env": {k: os.environ.get(k) for k in TIMING_ENV},
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "note": "machines here are shared and noisy: medians of repeated runs are quoted; "
        "loadavg_1m tells how busy this one was when the record was written",
    }


def _block(out):
    import jax

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
    import numpy as np

    q = np.percentile(times, [25, 75])
    return {
        "compile_s": compile_s,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "iqr_s": float(q[1] - q[0]),
        "repeats": repeats,
    }


def _iqr_bounds(ts):
    import numpy as np

    return np.percentile(ts, [25, 75])


def timeit_interleaved(cases: dict[str, tuple[Callable, tuple]], *, repeats: int = 7,
                       warmup: int = 1, after: Callable[[str], Any] | None = None
                       ) -> dict[str, dict[str, float]]:
    """Time several ``name -> (fn, args)`` cases in rounds: each round calls every case once
    (the order rotated by one each round).

    Slow drifts of a shared machine's speed (neighbours, frequency) then hit every case alike,
    so the ratios of the medians are steadier than with :func:`timeit` case after case.
    Returns ``{name: timeit-style dict}`` (``compile_s`` = the warm-up calls of that case),
    each with ``times_s``, that case's timed calls in round order (for paired ratios).
    ``after(name)``, if given, runs after every call of case ``name`` (warm-up and timed),
    outside the timer: clean-up that is not part of what is measured.
    """
    out, times = {}, {name: [] for name in cases}
    for name, (fn, args) in cases.items():
        t0 = time.perf_counter()
        for _ in range(max(warmup, 1)):
            _block(fn(*args))
            if after is not None:
                t_after = time.perf_counter()
                after(name)
                t0 += time.perf_counter() - t_after
        out[name] = {"compile_s": time.perf_counter() - t0}
    names = list(cases)
    for r in range(repeats):  # the order rotates each round: no case always runs first
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, args = cases[name]
            t0 = time.perf_counter()
            _block(fn(*args))
            times[name].append(time.perf_counter() - t0)
            if after is not None:
                after(name)
    for name, ts in times.items():
        q = _iqr_bounds(ts)
        out[name].update(median_s=statistics.median(ts), min_s=min(ts), max_s=max(ts),
                         iqr_s=float(q[1] - q[0]), repeats=repeats, interleaved=True,
                         times_s=ts)
    return out


def to_jsonable(obj):
    """Convert numpy/jax arrays and scalars inside nested dicts/lists to JSON types."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    import jax
    import numpy as np

    if isinstance(obj, (np.ndarray, jax.Array)):
        return np.asarray(obj).tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, pathlib.Path):
        return str(obj)
    return obj


def write_json(path: str | os.PathLike, payload: dict[str, Any]) -> pathlib.Path:
    """Write ``payload`` (with ``machine`` info and ``wall_s_total``, the seconds since the
    script started, added) as indented JSON; return the path."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine_info(), "wall_s_total": round(time.perf_counter() - START, 1),
               **payload}
    path.write_text(json.dumps(to_jsonable(payload), indent=2))
    return path


def csv_list(s: str, type: Callable = float) -> list:
    """Parse a comma-separated command-line value (``"0.1,1,3"``) into a list of ``type``."""
    return [type(v) for v in s.split(",") if v.strip()]
