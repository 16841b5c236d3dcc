"""The host side of one :func:`layerlab.loop.fit` call.

:class:`FitRun` holds what the host keeps between chunks: the state after ``t`` updates, the
history (:class:`._history.HistoryLog`), the early-stopping bookkeeping and best state, the
checkpointer and the progress bar.  ``fit`` resumes it from a checkpoint, hands it every
finished chunk (:meth:`FitRun.take_chunk`), lets it evaluate and save, and asks it for the
result.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from layerlab.loop._checkpoint import (
    Checkpointing,
    CheckpointMismatchError,
    checkpoint_meta,
    open_checkpoint,
)
from layerlab.loop._chunks import InFlight, _run_eval, _select_best
from layerlab.loop._early_stopping import (
    EarlyStopping,
    es_from_json,
    es_init,
    es_to_json,
    es_update,
)
from layerlab.loop._history import HistoryLog
from layerlab.loop._nonfinite import NonFiniteError, chunk_nonfinite

__all__ = ["FitRun"]


def _to_host(tree):
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))


def _fmt(metrics: dict[str, np.ndarray]) -> dict[str, str]:
    out = {}
    for k, v in list(metrics.items())[:4]:
        v = np.asarray(v)
        out[k] = f"{float(np.nanmedian(v)) if v.size else float('nan'):.4g}"
    return out


def _check_names(metrics, what: str) -> None:
    """``metrics`` is a dict of arrays (or their shapes) keyed by strings.  Names are the keys
    of the history and of its JSON form (``{0: loss}`` would come back as ``{"0": ...}``
    after a resume), so only strings are accepted."""
    if not isinstance(metrics, dict):
        raise TypeError(
            f"fit: {what} must return metrics as a dict of scalars, got "
            f"{type(metrics).__name__}."
        )
    for k, v in metrics.items():
        if not isinstance(k, str):
            raise TypeError(
                f"fit: {what} returned the metric name {k!r} ({type(k).__name__}); metric "
                f"names must be strings, e.g. {{{str(k)!r}: ...}}."
            )
        if isinstance(v, (dict, list, tuple)) or (
                not hasattr(v, "shape") and not isinstance(v, (int, float, complex))):
            raise TypeError(
                f"fit: {what} metric {k!r} is a {type(v).__name__}, not a scalar array; "
                "return a flat dict of scalars (e.g. {'a/b': ...} for a nested value)."
            )


def _check_metrics(metrics, length, R):
    """A chunk's metrics (arrays or their shapes): a dict of scalars per step (per run)."""
    _check_names(metrics, "step")
    want = (length, R) if R is not None else (length,)
    for k, v in metrics.items():
        if np.shape(v) != want:
            raise ValueError(
                f"fit: metric {k!r} from step is not a scalar (per step it has shape "
                f"{np.shape(v)[1:]}); return scalars, e.g. jnp.mean(...)."
            )


def _check_finite_names(metrics, check_finite) -> None:
    """The names ``check_finite`` lists are metrics of the step."""
    if isinstance(check_finite, bool):
        return
    for k in check_finite:
        if k not in metrics:
            raise KeyError(
                f"fit: check_finite names {k!r}, not a metric of step: {sorted(metrics)}."
            )


class FitRun:
    """Host-side bookkeeping of one ``fit`` call (mutable; never traced).

    Attributes:
      t: number of updates applied to ``state``.
      state: the state after ``t`` updates (device arrays).
      best: the best state so far (``EarlyStopping(restore_best=True)``), else ``None``.
      stopped: early stopping ended the run.
      log: the history, kept as chunks.
      ckpt / last_ckpt: the checkpointer (or ``None``) and the step of the last save.
      bar: the tqdm progress bar (or ``None``).
    """

    def __init__(self, state, *, early_stopping: EarlyStopping | None, R: int | None,
                 runs: bool):
        es = early_stopping
        self.t, self.state, self.runs, self.R, self.es = 0, state, runs, R, es
        self.es_state = es_init(es, R) if es is not None else None
        self.best = state if (es is not None and es.restore_best) else None
        self.stopped = False
        self.log = HistoryLog()
        self.ckpt = self.last_ckpt = self.fingerprint = None
        self.bar = None
        self.last_metrics: dict[str, np.ndarray] = {}
        self._checked_metrics = False

    # ------------------------------------------------------------------ checkpoints
    def resume(self, checkpoint: Checkpointing, fingerprint: dict,
               eval_at_start: bool | None = None) -> None:
        """Lock ``checkpoint.directory`` and continue from its newest step that restores.

        ``eval_at_start`` (whether this run evaluates at step 0; ``None``: not checked) must
        be what the saved run did, which its history tells (an evaluation at step 0 or not),
        for checkpoints of every version alike.

        Raises:
          CheckpointMismatchError: the fingerprints differ, or ``eval_at_start`` does.
        """
        self.fingerprint = fingerprint
        self.ckpt, found = open_checkpoint(checkpoint.directory, checkpoint.max_to_keep,
                                           fingerprint, {"state": self.state, "best": self.best})
        if found is not None:
            t, arrays, meta, records = found
            self.t = self.last_ckpt = t
            self.state = arrays["state"]
            if self.best is not None:
                self.best = arrays["best"]
            if records is None:  # older format: the whole history inside the meta
                self.log.load_jsonable(meta["history"])
            else:
                self.log.load_records(records)
            self.stopped = bool(meta.get("stopped", False))
            if self.es is not None and meta.get("early_stopping") is not None:
                self.es_state = es_from_json(meta["early_stopping"], self.es_state, self.stopped)
            saved = any(0 in b for b in self.log.eval_steps)
            if eval_at_start is not None and saved != bool(eval_at_start):
                # (not a fingerprint entry: one present always would change the fingerprints
                # of every run with an eval_fn, one present only when True cannot tell a run
                # saved with False from one saved before it was recorded; the history can)
                raise CheckpointMismatchError(
                    f"fit: {self.ckpt.directory} holds a checkpoint of a different run (step "
                    f"{t}); saved vs now:\n  eval_at_start: saved {saved}, now "
                    f"{bool(eval_at_start)} (the saved history {'holds' if saved else 'has no'}"
                    " evaluation at step 0; resume with eval_at_start="
                    f"{saved}, or use a new checkpoint_dir)")
        self.ckpt.rewrite_history(self.log.records())  # drops rows newer than t (once per resume)

    def save(self) -> None:
        """Checkpoint the state after ``t`` updates (appending the new history rows)."""
        self.ckpt.append_history(self.log.new_records())  # O(new rows)
        arrays = {"state": self.state, "best": self.best}
        self.ckpt.save(self.t, arrays, checkpoint_meta(
            self.t, self.fingerprint, self.log.rows(), arrays, self.stopped,
            None if self.es is None else es_to_json(self.es_state)))
        self.last_ckpt = self.t

    def _where_checkpoint(self) -> str:
        if self.ckpt is None or self.last_ckpt is None:
            return ""
        return f"; the last good checkpoint (step {self.last_ckpt}) is in {self.ckpt.directory}"

    # ------------------------------------------------------------------ chunks and evaluations
    def open_progress(self, progress: bool, total: int, desc: str) -> None:
        from tqdm.auto import tqdm

        show = bool(progress) and jax.process_index() == 0
        # no explicit disable=: tqdm's own TQDM_DISABLE=1 (an explicit argument wins over it)
        # then silences the bar, as the README tests and users expect
        self.bar = tqdm(total=total, initial=self.t, desc=desc,
                        dynamic_ncols=True, unit="step", leave=True) if show else None

    def check_step(self, metric_shapes, length: int,
                   check_finite: bool | Sequence[str]) -> None:
        """Check the step's metrics by their shapes (the first chunk traced, not run) before
        training: a non-scalar or nested metric, a name that is not a string, or a
        ``check_finite`` name the step does not return is an error at step 0."""
        _check_metrics(metric_shapes, length, self.R if self.runs else None)
        _check_finite_names(metric_shapes, check_finite)
        self._checked_metrics = True

    def take_chunk(self, chunk: InFlight,
                   check_finite: bool | Sequence[str]) -> dict[str, np.ndarray]:
        """Read a finished chunk's metrics back, check them, log them and advance to its end.

        Returns the chunk's host metrics ``{name: [L] or [L, R]}``.

        Raises:
          NonFiniteError: a checked metric or the state became NaN/Inf in the chunk.
        """
        length = chunk.t_to - chunk.t_from
        metrics = _to_host(chunk.metrics)
        if not self._checked_metrics:
            _check_metrics(metrics, length, self.R if self.runs else None)
            self._checked_metrics = True
        if check_finite is not False:
            bad = chunk_nonfinite(metrics, chunk.state_ok, chunk.state, check_finite=check_finite,
                                  t_from=chunk.t_from, t_to=chunk.t_to, runs=self.runs,
                                  where_ck=self._where_checkpoint())
            if bad is not None:
                if self.ckpt is not None:
                    self.ckpt.wait()
                msg, bad_step, name, value, bad_runs = bad
                raise NonFiniteError(msg, step=bad_step, metric=name, value=value,
                                     runs=bad_runs, last_good_step=chunk.t_from,
                                     state=chunk.prev_state, history=self.history())
        self.log.add_train(np.arange(chunk.t_from, chunk.t_to, dtype=np.int64), metrics)
        self.last_metrics = {k: v[-1] for k, v in metrics.items()}
        self.t, self.state = chunk.t_to, chunk.state
        if self.bar is not None:
            self.bar.update(length)
            self.bar.set_postfix(_fmt(self.last_metrics), refresh=False)
        return metrics

    def _check_eval_out(self, out) -> None:
        """``eval_fn``'s output (arrays or their shapes) is a dict of (per-run) scalars that
        holds the early-stopping metric."""
        if not isinstance(out, dict):
            raise TypeError(
                f"fit: eval_fn must return a dict of scalars, got {type(out).__name__}."
            )
        _check_names(out, "eval_fn")
        for k, v in out.items():
            shape = tuple(getattr(v, "shape", np.shape(v)))
            if shape != ((self.R,) if self.runs else ()):
                raise ValueError(
                    f"fit: eval_fn metric {k!r} has shape {shape}; metrics must be scalars "
                    "(per run)."
                )
        if self.es is not None and self.es.metric not in out:
            raise KeyError(
                f"fit: EarlyStopping.metric {self.es.metric!r} is not among the eval metrics "
                f"{sorted(out)}."
            )

    def check_eval(self, eval_fn: Callable[[Any], dict[str, jax.Array]]) -> list[str]:
        """Check ``eval_fn``'s output by its shapes (traced, not run) before training, so a
        wrong metric name or output is an error at step 0, not after the last step.

        Returns the eval metric names."""
        out = jax.eval_shape(lambda s: _run_eval(s, eval_fn=eval_fn, runs=self.runs),
                             self.state)
        self._check_eval_out(out)
        return list(out)

    def check_resumed_names(self, train: list[str], evals: list[str] | None) -> None:
        """After a resume, the step's (and ``eval_fn``'s) metric names are those of the
        history loaded from the checkpoint: its columns continue, none appears or vanishes
        midway (an added name failed with a ``KeyError`` once the run had finished, a
        removed one was dropped from the history silently).

        Raises:
          CheckpointMismatchError: the names differ (the added and removed ones listed).
        """
        diffs = []
        for what, now, blocks in (("step", train, self.log.train),
                                  ("eval_fn", evals, self.log.eval)):
            if now is None or not blocks:
                continue
            saved = set().union(*blocks)
            added, removed = sorted(set(now) - saved), sorted(saved - set(now))
            if added or removed or any(set(b) != saved for b in blocks):
                diffs.append(f"{what} metrics: added {added}, removed {removed} (saved "
                             f"{sorted(saved)}, now {sorted(now)})")
        if diffs:
            raise CheckpointMismatchError(
                f"fit: {self.ckpt.directory} holds the history of a run whose metrics differ "
                f"from this one's (resumed at step {self.t}): " + "; ".join(diffs)
                + ". Its history columns must continue: return the same metric names, or "
                "use a new checkpoint_dir."
            )

    def evaluate(self, eval_fn: Callable[[Any], dict[str, jax.Array]]) -> None:
        """Evaluate the state after ``t`` updates; log it and update early stopping."""
        out = _run_eval(self.state, eval_fn=eval_fn, runs=self.runs)
        self._check_eval_out(out)
        out = _to_host(out)
        self.log.add_eval(self.t, out)
        es = self.es
        if es is not None:
            self.es_state, improved = es_update(es, self.es_state, out[es.metric], self.t)
            if es.restore_best and np.any(improved):
                self.best = _select_best(jnp.asarray(improved), self.state, self.best,
                                         runs=self.runs)
            self.stopped = self.stopped or self.es_state.stopped
        if self.bar is not None:
            evals = {f"eval_{k}": s for k, s in _fmt(out).items()}
            self.bar.set_postfix({**_fmt(self.last_metrics), **evals})

    # ------------------------------------------------------------------ the end
    def history(self) -> dict[str, Any]:
        """The history dict of :mod:`._history` (plus ``"early_stopping"`` when requested)."""
        if self.es is None:
            return self.log.assemble(None)
        return self.log.assemble({"early_stopping": {
            "stopped": self.stopped, "best": self.es_state.best,
            "best_step": self.es_state.best_step, "metric": self.es.metric,
            "mode": self.es.mode}})

    def note_early_stop(self, desc: str) -> None:
        """Say on the progress bar where early stopping ended the run."""
        if self.stopped and self.bar is not None:
            self.bar.write(
                f"{desc}: early stopping at step {self.t} ({self.es.metric} best "
                f"{np.asarray(self.es_state.best).tolist()} at step "
                f"{np.asarray(self.es_state.best_step).tolist()})"
            )

    def abort(self) -> None:
        """Close the progress bar and release the checkpoint directory (on an exception)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.ckpt is not None:
            self.ckpt.close()
            self.ckpt = None

    def finish(self) -> tuple[Any, dict[str, Any]]:
        """Close everything; ``(state, history)`` with the best state when it is kept."""
        if self.ckpt is not None:
            self.ckpt.close()
        if self.bar is not None:
            self.bar.close()
        return (self.best if self.best is not None else self.state), self.history()
