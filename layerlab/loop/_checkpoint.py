"""Orbax checkpointing for :func:`layerlab.loop.fit` (state, key, data position, history)."""
from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np

__all__ = ["Checkpointer"]


def _abstract(tree):
    def f(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, (np.ndarray, np.generic)):
            return jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype)
        return x

    return jax.tree_util.tree_map(f, tree)


class Checkpointer:
    """Thin wrapper over ``ocp.CheckpointManager`` with two items per step.

    * ``"arrays"``: ``StandardSave`` of ``{"state": state, "best": best_state_or_None}``
      (optax states and typed PRNG keys round-trip);
    * ``"meta"``: ``JsonSave`` of the step, the fit key's raw data, the history so far, the
      early-stopping bookkeeping and a fingerprint of the fit arguments.
    """

    def __init__(self, directory: str | os.PathLike, *, max_to_keep: int | None = 2):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.directory = os.path.abspath(os.fspath(directory))
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, arrays: dict[str, Any], meta: dict[str, Any]) -> None:
        ocp = self._ocp
        self.manager.save(
            int(step),
            args=ocp.args.Composite(
                arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(self, step: int, arrays_like: dict[str, Any]) -> tuple[dict[str, Any], dict]:
        ocp = self._ocp
        out = self.manager.restore(
            int(step),
            args=ocp.args.Composite(
                arrays=ocp.args.StandardRestore(_abstract(arrays_like)),
                meta=ocp.args.JsonRestore(),
            ),
        )
        return out["arrays"], out["meta"]

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
