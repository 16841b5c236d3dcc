"""The training history: a dict of numpy arrays, and its JSON form.

Layout (a contract other packages rely on)::

    {"step": int [T],            # index t of the update whose metrics are in row t
     "train": {name: [T] or [T, R]},
     "eval_step": int [E],       # number of updates applied when eval_fn ran
     "eval": {name: [E] or [E, R]}}

``R`` is the number of runs when ``fit(..., runs=True)``.  Row ``t`` of ``"train"`` holds the
metrics the step returned while computing update ``t`` (for :func:`optax_step`, the loss at
the parameters *before* that update), so ``history["train"]["loss"][0]`` is the loss at
initialisation, and an evaluation at ``eval_step == t`` sees the parameters after ``t`` updates.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["empty_history", "history_to_jsonable", "history_from_jsonable"]


def empty_history() -> dict[str, Any]:
    return {
        "step": np.zeros((0,), np.int64),
        "train": {},
        "eval_step": np.zeros((0,), np.int64),
        "eval": {},
    }


def _to_py(x):
    if isinstance(x, dict):
        return {str(k): _to_py(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_py(v) for v in x]
    if hasattr(x, "__array__") and not isinstance(x, (int, float, bool, str)):
        x = np.asarray(x)
        if x.ndim == 0:
            return _to_py(x.item())
        return [_to_py(v) for v in x.tolist()]
    if isinstance(x, np.generic):
        return _to_py(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None  # strict JSON has no NaN/Inf; history_from_jsonable maps None back to NaN
    return x


def history_to_jsonable(history: dict[str, Any]) -> dict[str, Any]:
    """Convert a history (numpy arrays, nested dicts) to plain lists/floats for ``json.dump``.

    Non-finite floats become ``None`` (strict JSON); :func:`history_from_jsonable` inverts it.
    Extra keys (e.g. ``"early_stopping"``) are converted the same way.
    """
    return _to_py(history)


def _arr(v, dtype=np.float64):
    if v is None:
        return np.zeros((0,), dtype)
    a = np.array([np.nan if e is None else e for e in _flat(v)], dtype=dtype)
    return a.reshape(_shape(v))


def _flat(v):
    if isinstance(v, list):
        for e in v:
            yield from _flat(e)
    else:
        yield v


def _shape(v):
    s = []
    while isinstance(v, list):
        s.append(len(v))
        if not v:
            break
        v = v[0]
    return tuple(s)


def history_from_jsonable(obj: dict[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`history_to_jsonable` for the four standard keys (extra keys kept)."""
    out = dict(obj)
    out["step"] = _arr(obj.get("step", []), np.int64)
    out["eval_step"] = _arr(obj.get("eval_step", []), np.int64)
    out["train"] = {k: _arr(v) for k, v in obj.get("train", {}).items()}
    out["eval"] = {k: _arr(v) for k, v in obj.get("eval", {}).items()}
    return out
