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

__all__ = ["HistoryLog", "empty_history", "history_to_jsonable", "history_from_jsonable"]


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
        # strict JSON has no NaN/Inf: NaN -> None, +-Inf -> "inf" / "-inf" (a diverged run's
        # overflow stays an overflow after a resume); history_from_jsonable maps them back
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, complex):  # JSON has no complex: its repr, "(1+2j)", parsed back by
        return repr(x)  # complex() (exact: the repr of each part round-trips; nan, inf too)
    return x


def history_to_jsonable(history: dict[str, Any]) -> dict[str, Any]:
    """Convert a history (numpy arrays, nested dicts) to plain lists/floats for ``json.dump``.

    NaN becomes ``None`` and ``±inf`` the strings ``"inf"`` / ``"-inf"`` (strict JSON);
    :func:`history_from_jsonable` inverts both (files written before the strings existed
    hold ``None`` for infinities too, read back as NaN).
    Extra keys (e.g. ``"early_stopping"``) are converted the same way.
    """
    return _to_py(history)


def _arr(v, dtype=np.float64):
    if v is None:
        return np.zeros((0,), dtype)
    flat = list(_flat(v))
    dtype = np.dtype(dtype)
    if dtype.kind != "c" and any(isinstance(e, str) and e.endswith("j") for e in flat):
        dtype = np.dtype(np.complex128)  # a complex metric of a history without dtypes
    parse = complex if dtype.kind == "c" else float
    a = np.array([np.nan if e is None else (parse(e) if isinstance(e, str) else e)
                  for e in flat], dtype=dtype)
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


class HistoryLog:
    """The history of one ``fit`` call, kept as chunks (no O(T) work per chunk).

    ``train_steps[i]`` / ``train[i]``: the steps ``[L]`` and metrics ``{name: [L] or [L, R]}``
    of chunk ``i``; ``eval_steps[j]`` / ``eval[j]``: the steps and metrics of evaluation block
    ``j``.  :meth:`new_records` gives the blocks added since its previous call, as the JSON
    records of a checkpoint's ``history.jsonl``.
    """

    def __init__(self):
        self.train_steps: list[np.ndarray] = []
        self.train: list[dict[str, np.ndarray]] = []
        self.eval_steps: list[list[int]] = []
        self.eval: list[dict[str, np.ndarray]] = []
        self._written = (0, 0)

    def add_train(self, steps: np.ndarray, metrics: dict[str, np.ndarray]) -> None:
        self.train_steps.append(steps)
        self.train.append(metrics)

    def add_eval(self, t: int, metrics: dict[str, Any]) -> None:
        self.eval_steps.append([int(t)])
        self.eval.append({k: np.asarray(v)[None] for k, v in metrics.items()})

    def rows(self) -> int:
        return int(sum(len(s) for s in self.train_steps))

    def assemble(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        hist = empty_history()
        if self.train_steps:
            hist["step"] = np.concatenate(self.train_steps)
            names = self.train[-1].keys()
            hist["train"] = {k: np.concatenate([c[k] for c in self.train]) for k in names}
        if self.eval_steps:
            hist["eval_step"] = np.asarray([t for b in self.eval_steps for t in b], np.int64)
            names = self.eval[-1].keys()
            hist["eval"] = {k: np.concatenate([c[k] for c in self.eval]) for k in names}
        if extra:
            hist.update(extra)
        return hist

    def _records(self, i0: int, j0: int) -> list[dict]:
        def dtypes(m):  # a resumed history keeps float32 / int32 metrics as they were
            return {k: np.asarray(v).dtype.name for k, v in m.items()}

        recs = [{"kind": "train", "step": st, "metrics": m, "dtypes": dtypes(m)}
                for st, m in zip(self.train_steps[i0:], self.train[i0:], strict=True)]
        return recs + [{"kind": "eval", "step": st, "metrics": m, "dtypes": dtypes(m)}
                       for st, m in zip(self.eval_steps[j0:], self.eval[j0:], strict=True)]

    def records(self) -> list[dict]:
        """All blocks as records (marks them written)."""
        self._written = (len(self.train), len(self.eval))
        return self._records(0, 0)

    def new_records(self) -> list[dict]:
        """The blocks added since the previous call (marks them written)."""
        out = self._records(*self._written)
        self._written = (len(self.train), len(self.eval))
        return out

    def load_records(self, records: list[dict]) -> None:
        """Append the blocks of ``history.jsonl`` records (JSON ``None`` back to NaN)."""
        for r in records:
            dt = r.get("dtypes") or {}  # absent in files written before 2026-11-29: float64
            metrics = {k: _arr(v, np.dtype(dt.get(k, "float64"))) for k, v in r["metrics"].items()}
            if r["kind"] == "train":
                self.add_train(np.asarray(r["step"], np.int64), metrics)
            else:
                self.eval_steps.append([int(v) for v in r["step"]])
                self.eval.append(metrics)

    def load_jsonable(self, obj: dict[str, Any]) -> None:
        """Append a whole history in :func:`history_to_jsonable` form (older checkpoints)."""
        h = history_from_jsonable(obj)
        if h["step"].size:
            self.add_train(h["step"], h["train"])
        if h["eval_step"].size:
            self.eval_steps.append([int(s) for s in h["eval_step"]])
            self.eval.append(h["eval"])
