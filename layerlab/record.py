"""One record per reproduced paper artifact: our number beside the paper's.

Every reproduction (``python -m reproduce.<paper>_<artifact>``) returns a :class:`Record`
from its ``layerlab.<paper>.experiments.run_*`` function and writes it with
:func:`write_record` as ``results/<paper>/<artifact>.json`` (paper-scale or ``--record``
runs) or under the ignored ``scratch/`` folder (everything else).  The schema::

    {"paper": "dgl", "artifact": "table1", "title": "...", "scale": "paper" | "reduced",
     "command": "python -m reproduce.dgl_table1 --paper", "config": {...},
     "rows": [{"name": ..., "ours": 97.3, "paper": 97.18, "unit": "%", "tol": 1.0,
               "seeds": 3, "spread": 0.2, "holds": true, "note": ""}],
     "claims": [{"claim": ..., "holds": true, "evidence": "..."}],
     "machine": {...}, "versions": {...}, "git": "<commit>", "wall_s": 1234.5}

``holds`` of a row is ``abs(ours - paper) <= tol`` up to float rounding (:func:`within_tol`:
a difference on the decimal boundary holds; ``None`` when the paper has no number or ours was
not run).  Every number is finite (the file is strict JSON: no ``NaN`` or
``Infinity``, anywhere): a NaN or infinity in a row, ``wall_s``, ``config`` or ``extra`` is
refused when the record is written, naming its field (``config.grid[1][1]``; those in
``config`` / ``extra`` were written as ``null`` / ``1e308`` before 2026-11-29); ``null`` is
allowed where the schema says so (``ours``, ``paper``, ``tol``, ``spread``, ``holds``,
``wall_s``, ``git``) and anywhere in ``config`` / ``extra``.  ``seeds`` is an integer, ``>= 1``
for a row that ran (``ours`` set) and ``>= 0`` for one that did not; ``name``, ``unit``,
``note``, ``claim`` and ``evidence`` are strings; ``artifact`` is a plain name (no ``/``).  A
record is checked by :func:`validate_record` when written and when loaded.  This module imports
neither JAX nor numpy at import time, so scripts can use it before their heavy imports.
"""
from __future__ import annotations

import dataclasses
import json
import math
import operator
import os
import pathlib
import platform
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "PAPERS",
    "Claim",
    "Record",
    "Row",
    "load_record",
    "machine_info",
    "row_from_values",
    "to_jsonable",
    "validate_record",
    "versions",
    "within_tol",
    "write_record",
]

PAPERS = ("gnrev", "dgl", "dmn", "bottleneck")
REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Row:
    """One number of ours beside the paper's.

    ``ours`` is the mean over ``seeds`` runs and ``spread`` their standard deviation
    (``ddof=1``; 0 for one seed).  ``ours=None`` marks a row that was not run (say why in
    ``note``); ``paper=None`` a row the paper gives no number for.
    """

    name: str
    ours: float | None
    paper: float | None = None
    unit: str = ""
    tol: float | None = None
    seeds: int = 1
    spread: float | None = None
    holds: bool | None = None
    note: str = ""

    def __post_init__(self) -> None:
        where = f"Row {self.name!r}"
        self.ours = _opt_number(self.ours, "ours", where)
        # NaN paper / spread: no number (the JSON would hold null anyway), so holds stays None
        self.paper = _opt_number(self.paper, "paper", where, nan_is_none=True)
        self.spread = _opt_number(self.spread, "spread", where, nonneg=True, nan_is_none=True)
        self.tol = _opt_number(self.tol, "tol", where, nonneg=True)
        least = 0 if self.ours is None else 1  # a row that was not run: 0 seeds
        try:  # any integer type (numpy's signed and unsigned ones too), never a bool
            seeds = None if isinstance(self.seeds, bool) or getattr(
                getattr(self.seeds, "dtype", None), "kind", "") == "b" \
                else operator.index(self.seeds)
        except TypeError:
            seeds = None
        if seeds is None or seeds < least:
            raise ValueError(f"{where}: seeds must be an integer >= {least}"
                             f"{' for a row that ran' if least else ''}, got {self.seeds!r}")
        self.seeds = int(seeds)
        self.holds = _opt_bool(self.holds, where)
        if self.ours is None and self.holds is not None:
            raise ValueError(f"{where}: a row that was not run (ours=None) cannot have "
                             f"holds={self.holds}")
        if self.holds is None and None not in (self.ours, self.paper, self.tol):
            self.holds = within_tol(self.ours, self.paper, self.tol)


def within_tol(ours: float, paper: float, tol: float) -> bool:
    """``|ours - paper| <= tol`` up to float rounding of the decimal numbers: a difference on
    the boundary holds whichever way its binary rounding fell (``1.1`` vs ``1.0`` with tol
    ``0.1`` gives ``0.10000000000000009``, and 90.2 vs 90.0 with 0.2 failed; 0.9 vs 0.8
    held)."""
    if not (math.isfinite(ours) and math.isfinite(paper)):
        return False  # (NaN: an epoch without a score never matches)
    slack = 4 * math.ulp(max(abs(ours), abs(paper), tol, math.ulp(0.0)))
    return bool(abs(ours - paper) <= tol + slack)


def _opt_number(v: Any, name: str, where: str, *, nonneg: bool = False,
                nan_is_none: bool = False) -> float | None:
    """``None`` or a finite real number (``>= 0`` with ``nonneg``), as a float; with
    ``nan_is_none`` a NaN is ``None``."""
    if v is None:
        return None
    if isinstance(v, (bool, str, bytes)) or not hasattr(v, "__float__"):
        raise TypeError(f"{where}: {name} must be a real number or None, got {v!r}")
    x = float(v)
    if nan_is_none and math.isnan(x):
        return None
    if not math.isfinite(x) or (nonneg and x < 0):
        raise ValueError(f"{where}: {name} must be a finite number{' >= 0' if nonneg else ''} "
                         f"or None, got {x}")
    return x


def _opt_bool(v: Any, where: str) -> bool | None:
    """``None`` or a bool, as a Python bool.

    A numpy / JAX boolean scalar (``numpy.bool_``, a 0-d bool array: what a comparison of
    numpy numbers gives, and what the experiments pass) is converted with ``bool``.  Integers
    (``1``, ``0``, numpy integers) and strings (``"False"``) are refused: the written record
    must hold ``true`` / ``false``, which :func:`validate_record` checks.
    """
    if v is None or isinstance(v, bool):
        return v
    dt = getattr(v, "dtype", None)
    if dt is not None and getattr(v, "shape", None) == () and dt.kind == "b":
        return bool(v)
    raise TypeError(f"{where}: holds must be True, False or None (a bool; integers such as 1 "
                    f"or 0 are refused), got {v!r} ({type(v).__name__})")


def _check_artifact(a: Any, field: str) -> None:
    """An artifact is a plain, non-empty name (it names ``<artifact>.json``): no path
    separator (``/``, ``\\``), not ``.`` or ``..``, no NUL."""
    if not isinstance(a, str) or not a or a in (".", "..") \
            or any(c in a for c in ("/", "\\", "\0")):
        raise ValueError(f"{field} must be a plain name like 'table1' (no '/', '\\', NUL, not "
                         f"'.' or '..'), got {a!r}")


def _nonfinite(obj: Any, path: str) -> str | None:
    """The path of the first non-finite float in nested dicts / lists, else ``None``."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else path
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if (bad := _nonfinite(v, f"{path}.{k}")) is not None:
                return bad
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            if (bad := _nonfinite(v, f"{path}[{i}]")) is not None:
                return bad
    return None


@dataclasses.dataclass
class Claim:
    """A qualitative claim of the paper, checked: ``holds`` with the numbers as ``evidence``."""

    claim: str
    holds: bool | None
    evidence: str = ""

    def __post_init__(self) -> None:
        self.holds = _opt_bool(self.holds, f"Claim {self.claim!r}")


@dataclasses.dataclass
class Record:
    """Everything one reproduction run produced; see the module docstring for the JSON."""

    paper: str
    artifact: str
    title: str
    scale: Literal["paper", "reduced"]
    config: dict[str, Any]
    rows: list[Row] = dataclasses.field(default_factory=list)
    claims: list[Claim] = dataclasses.field(default_factory=list)
    command: str = ""
    wall_s: float | None = None
    note: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"Record.paper must be one of {PAPERS}, got {self.paper!r}")
        if self.scale not in ("paper", "reduced"):
            raise ValueError(f"Record.scale must be 'paper' or 'reduced', got {self.scale!r}")
        _check_artifact(self.artifact, "Record.artifact")
        self.wall_s = _opt_number(self.wall_s, "wall_s", f"Record {self.artifact!r}",
                                  nonneg=True)

    def to_dict(self) -> dict[str, Any]:
        # wall_s is often set after construction (the run's time), and a row's fields can be
        # reassigned: check both again, so that a NaN or infinity names its field here
        # instead of becoming null / 1e308 (to_jsonable) or failing in json.dumps
        wall_s = _opt_number(self.wall_s, "wall_s", f"Record {self.artifact!r}", nonneg=True)
        for name in ("config", "extra"):  # the same for the free-form parts: NaN and +-inf
            # became null / +-1e308 there, silently (a diverged value read as a number)
            bad = _first_nonfinite(getattr(self, name), name)
            if bad is not None:
                raise ValueError(
                    f"Record {self.artifact!r}: {bad[0]} must be finite, got {bad[1]} (the "
                    "record is strict JSON: a NaN was written as null and an infinity as "
                    "1e308); store None where there is no number, or leave the value out")
        rows = [dataclasses.replace(r) for r in self.rows]
        claims = [dataclasses.replace(c) for c in self.claims]
        d = {
            "paper": self.paper,
            "artifact": self.artifact,
            "title": self.title,
            "scale": self.scale,
            "command": self.command,
            "config": to_jsonable(self.config),
            "rows": [to_jsonable(dataclasses.asdict(r)) for r in rows],
            "claims": [to_jsonable(dataclasses.asdict(c)) for c in claims],
            "wall_s": None if wall_s is None else round(wall_s, 1),
        }
        if self.note:
            d["note"] = self.note
        if self.extra:
            d["extra"] = to_jsonable(self.extra)
        return d


def _umask() -> int:
    """The process's umask, read without changing it for other threads where Linux lets
    (``/proc/self/status``); else set and restored at once."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _first_nonfinite(obj: Any, path: str, depth: int = 0) -> tuple[str, float] | None:
    """``(path, value)`` of the first NaN or infinity in ``obj`` as :func:`to_jsonable` walks
    it (dataclasses, mappings, lists, tuples, floats, numpy / JAX arrays and scalars), else
    ``None``."""
    if depth > 100:
        return None
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path, obj)
    if isinstance(obj, (bool, int, str, bytes)) or obj is None:
        return None
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if (bad := _first_nonfinite(v, f"{path}.{k}", depth + 1)) is not None:
                return bad
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            if (bad := _first_nonfinite(v, f"{path}[{i}]", depth + 1)) is not None:
                return bad
        return None
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):  # numpy / jax arrays and scalars
        if getattr(obj.dtype, "kind", "f") in "fc":
            v = obj.tolist()
        else:  # bfloat16 and the other ml_dtypes floats are of kind "V"
            import jax.numpy as jnp
            import numpy as np

            try:
                inexact = jnp.issubdtype(obj.dtype, jnp.inexact)
            except TypeError:
                inexact = False
            if not inexact:
                return None
            v = np.asarray(obj).astype(np.float32).tolist()
        if isinstance(v, (float, complex)):
            ok = math.isfinite(v.real) and math.isfinite(v.imag) if isinstance(v, complex) \
                else math.isfinite(v)
            return None if ok else (path, v)
        return _first_nonfinite(v, path, depth + 1)
    if isinstance(obj, complex):
        return None if math.isfinite(obj.real) and math.isfinite(obj.imag) else (path, obj)
    return None


def row_from_values(name: str, values: Sequence[float], *, paper: float | None = None,
                    unit: str = "", tol: float | None = None, note: str = "") -> Row:
    """A :class:`Row` from per-seed values: mean as ``ours``, sample std as ``spread``.

    A NaN or infinity among them (a diverged seed) gives a row that did not produce a number
    (``ours=None``, every seed's value in its ``note``), not an error at the end of a run.
    """
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"row_from_values({name!r}): values must be a sequence of numbers "
                        f"(one per seed), got {values!r}")
    vals = []
    for i, v in enumerate(values):
        if isinstance(v, (bool, str, bytes)) or not hasattr(v, "__float__"):
            raise TypeError(f"row_from_values({name!r}): values[{i}] must be a real number, "
                            f"got {v!r}")
        vals.append(float(v))
    if not vals:
        raise ValueError(f"row_from_values({name!r}): values is empty")
    if not all(math.isfinite(v) for v in vals):
        bad = sum(not math.isfinite(v) for v in vals)
        return Row(name=name, ours=None, paper=paper, unit=unit, tol=tol, seeds=len(vals),
                   note=(f"non-finite (diverged) in {bad} of {len(vals)} seeds: "
                         f"{[round(v, 6) if math.isfinite(v) else str(v) for v in vals]}. "
                         + note).strip())
    spread = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return Row(name=name, ours=statistics.fmean(vals), paper=paper, unit=unit, tol=tol,
               seeds=len(vals), spread=spread, note=note)


def to_jsonable(obj: Any) -> Any:
    """Nested dicts/lists of numpy/jax arrays and scalars -> JSON types (floats rounded to 6
    significant digits, so float32 noise is not printed as signal)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return _round(obj)
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if hasattr(obj, "tolist") and hasattr(obj, "dtype"):  # numpy / jax arrays and scalars
        return to_jsonable(obj.tolist())
    if callable(obj):
        return getattr(obj, "__name__", repr(obj))
    return repr(obj)


def _round(x: float) -> float | None:
    if not math.isfinite(x):
        return None if math.isnan(x) else (1e308 if x > 0 else -1e308)
    return float(f"{x:.6g}")


def machine_info() -> dict[str, Any]:
    """The machine a record was made on (device kind and count when JAX is already loaded)."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    import sys
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        dev = jax.devices()[0]
        info.update(platform=dev.platform, device_kind=getattr(dev, "device_kind", str(dev)),
                    device_count=jax.device_count())
    return info


def versions() -> dict[str, str]:
    """Versions of the packages that decide the numbers."""
    from importlib import metadata
    out = {}
    for name in ("layerlab", "jax", "jaxlib", "flax", "optax", "numpy", "neural-tangents"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _git() -> str | None:
    """The commit the code came from: ``$LAYERLAB_GIT`` (set where a copy of the tree runs
    without its ``.git``, e.g. on a remote GPU), else ``git rev-parse HEAD``."""
    if os.environ.get("LAYERLAB_GIT"):
        return os.environ["LAYERLAB_GIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip() or None
    except Exception:
        return None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v: int | float) -> bool:
    """A finite float; an integer (JSON may hold any) only if a float can hold it."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def validate_record(d: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the field if ``d`` does not follow the record schema."""
    need = {"paper": str, "artifact": str, "title": str, "scale": str, "command": str,
            "config": dict, "rows": list, "claims": list, "machine": dict, "versions": dict}
    for k, t in need.items():
        if k not in d:
            raise ValueError(f"record is missing field {k!r}")
        if not isinstance(d[k], t):
            raise ValueError(f"record field {k!r} must be {t.__name__}, got {type(d[k]).__name__}")
    if d["paper"] not in PAPERS:
        raise ValueError(f"record field 'paper' must be one of {PAPERS}, got {d['paper']!r}")
    if d["scale"] not in ("paper", "reduced"):
        raise ValueError(f"record field 'scale' must be 'paper' or 'reduced', got {d['scale']!r}")
    _check_artifact(d["artifact"], "record field 'artifact'")
    for k, t in (("note", str), ("extra", dict)):  # optional
        if k in d and not isinstance(d[k], t):
            raise ValueError(f"record field {k!r} must be {t.__name__}, got {type(d[k]).__name__}")
    if "wall_s" not in d or "git" not in d:
        raise ValueError("record is missing field 'wall_s' or 'git'")
    w = d["wall_s"]
    if w is not None and (not _is_number(w) or not _is_finite(w) or w < 0):
        raise ValueError(f"record field 'wall_s' must be a finite number >= 0 or null, got {w!r}")
    if d["git"] is not None and not isinstance(d["git"], str):
        raise ValueError(f"record field 'git' must be a string or null, got {d['git']!r}")
    for k in ("config", "machine", "versions", "extra"):
        if k in d and (bad := _nonfinite(d[k], k)) is not None:
            raise ValueError(f"record field {bad!r} must be finite (JSON has no NaN or "
                             "Infinity; write null)")
    for i, r in enumerate(d["rows"]):
        if not isinstance(r, dict):
            raise ValueError(f"record rows[{i}] must be an object, got {type(r).__name__}")
        for k in ("name", "ours", "paper", "unit", "tol", "seeds", "spread", "holds", "note"):
            if k not in r:
                raise ValueError(f"record rows[{i}] is missing field {k!r}")
        where = f"record rows[{i}] ({r['name']!r})"
        for k in ("name", "unit", "note"):
            if not isinstance(r[k], str):
                raise ValueError(f"{where}: {k} must be a string, got {r[k]!r}")
        for k in ("ours", "paper", "tol", "spread"):
            v = r[k]
            if v is not None and not _is_number(v):
                raise ValueError(f"{where}: {k} must be a number or null, got {v!r}")
            if v is not None and not _is_finite(v):
                raise ValueError(f"{where}: {k} must be a finite number or null, got {v!r}")
        for k in ("tol", "spread"):
            if r[k] is not None and r[k] < 0:
                raise ValueError(f"{where}: {k} must be >= 0, got {r[k]}")
        least = 0 if r["ours"] is None else 1  # as Row: a row that was not run has 0 seeds
        s = r["seeds"]
        if not isinstance(s, int) or isinstance(s, bool) or s < least:
            raise ValueError(f"{where}: seeds must be an integer >= {least}"
                             f"{' for a row that ran (ours set)' if least else ''}, got {s!r}")
        if r["holds"] is not None and not isinstance(r["holds"], bool):
            raise ValueError(f"{where}: holds must be true, false or null, got {r['holds']!r}")
        if r["ours"] is None and r["holds"] is not None:
            raise ValueError(f"{where}: a row that was not run (ours null) has holds="
                             f"{r['holds']}")
        if None not in (r["ours"], r["paper"], r["tol"]):
            if r["holds"] is None:
                raise ValueError(f"{where}: ours, paper and tol are given but holds is null")
            diff = abs(r["ours"] - r["paper"])
            # the written numbers are rounded to 6 significant digits (to_jsonable): holds
            # was decided on the unrounded ones, so a difference within rounding of tol
            # may go either way
            slack = 1e-9 + 1e-5 * (abs(r["ours"]) + abs(r["paper"]) + r["tol"])
            if (r["holds"] and diff - slack > r["tol"]) or \
                    (not r["holds"] and diff + slack <= r["tol"]):
                raise ValueError(f"{where}: holds={r['holds']} but |ours - paper| = {diff:.6g} "
                                 f"and tol = {r['tol']}")
    for i, c in enumerate(d["claims"]):
        if not isinstance(c, dict):
            raise ValueError(f"record claims[{i}] must be an object, got {type(c).__name__}")
        for k in ("claim", "holds", "evidence"):
            if k not in c:
                raise ValueError(f"record claims[{i}] is missing field {k!r}")
        for k in ("claim", "evidence"):
            if not isinstance(c[k], str):
                raise ValueError(f"record claims[{i}]: {k} must be a string, got {c[k]!r}")
        if c["holds"] is not None and not isinstance(c["holds"], bool):
            raise ValueError(f"record claims[{i}]: holds must be true, false or null, got "
                             f"{c['holds']!r}")
    for k in d:  # and anywhere else: a row's or claim's extra key, an unknown field, ...
        if (bad := _nonfinite(d[k], k)) is not None:
            raise ValueError(f"record field {bad!r} must be finite (JSON has no NaN or "
                             "Infinity; write null)")


def write_record(record: Record, out_dir: str | os.PathLike, *,
                 stem: str | None = None) -> pathlib.Path:
    """Write ``record`` as ``<out_dir>/<stem>.json`` atomically; return the path.

    Adds ``machine``, ``versions`` and ``git``.  ``out_dir`` is usually
    ``results/<paper>`` (paper-scale runs) or ``scratch/<paper>`` (everything else);
    ``stem`` defaults to ``record.artifact`` and is a plain file name (no ``/``, not ``..``).
    The JSON goes to a uniquely named temporary file in ``out_dir``, is fsynced and renamed
    over the target, so a crash leaves the old file or the new one, and two writers of one
    folder do not share a temporary file.
    """
    import tempfile

    name = record.artifact if stem is None else stem
    if not isinstance(name, str) or not name or name in (".", "..") or "\0" in name \
            or any(sep and sep in name for sep in ("/", os.sep, os.altsep)):
        raise ValueError(f"write_record: stem must be a plain file name (no path separator, "
                         f"not '.' or '..'; the record goes into out_dir), got {stem!r}")
    d = record.to_dict()
    d["machine"] = machine_info()
    d["versions"] = versions()
    d["git"] = _git()
    validate_record(d)
    text = json.dumps(d, indent=2, allow_nan=False) + "\n"
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    with tempfile.NamedTemporaryFile("w", dir=out, prefix=f".{name}.", suffix=".json.tmp",
                                     delete=False) as f:
        tmp = f.name
        try:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            f.close()
            os.unlink(tmp)
            raise
    try:
        # mkstemp made it 0600, and os.replace keeps that: a record is read by others,
        # like any file this process creates (0666 less the umask)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    try:  # the rename itself survives a crash once the folder is synced (POSIX)
        fd = os.open(out, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    return path


def load_record(path: str | os.PathLike) -> dict[str, Any]:
    """Read and validate a record written by :func:`write_record`."""
    d = json.loads(pathlib.Path(path).read_text())
    try:
        validate_record(d)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    return d
