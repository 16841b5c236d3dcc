"""layerlab.loop: the one shared training-loop combinator.

A pure ``step(state, batch, key) -> (state, metrics)`` (from :func:`optax_step` or written by
hand) is driven by :func:`fit` over in-memory data: shuffling and batching run inside
jit-compiled ``lax.scan`` chunks, the host syncs once per chunk; sweeps run a leading runs
axis in one program; a ``Mesh`` shards batches over devices (and hosts, after
:func:`initialize_distributed`); orbax checkpoints make runs resumable.  See ``docs/loop.md``.
"""
from layerlab.loop._checkpoint import CheckpointCorruptError as CheckpointCorruptError
from layerlab.loop._checkpoint import CheckpointFallbackWarning as CheckpointFallbackWarning
from layerlab.loop._checkpoint import Checkpointing as Checkpointing
from layerlab.loop._checkpoint import CheckpointLockedError as CheckpointLockedError
from layerlab.loop._checkpoint import CheckpointMismatchError as CheckpointMismatchError
from layerlab.loop._checkpoint import discard_checkpoints_after as discard_checkpoints_after
from layerlab.loop._distributed import initialize_distributed as initialize_distributed
from layerlab.loop._early_stopping import EarlyStopping as EarlyStopping
from layerlab.loop._fit import NonFiniteError as NonFiniteError
from layerlab.loop._fit import fit as fit
from layerlab.loop._history import history_from_jsonable as history_from_jsonable
from layerlab.loop._history import history_to_jsonable as history_to_jsonable
from layerlab.loop._placement import Placement as Placement
from layerlab.loop._step import TrainState as TrainState
from layerlab.loop._step import TrainStep as TrainStep
from layerlab.loop._step import augment_inputs as augment_inputs
from layerlab.loop._step import optax_step as optax_step

__all__ = [
    "CheckpointCorruptError",
    "CheckpointFallbackWarning",
    "CheckpointLockedError",
    "CheckpointMismatchError",
    "Checkpointing",
    "EarlyStopping",
    "NonFiniteError",
    "Placement",
    "TrainState",
    "TrainStep",
    "augment_inputs",
    "discard_checkpoints_after",
    "fit",
    "history_from_jsonable",
    "history_to_jsonable",
    "initialize_distributed",
    "optax_step",
]
