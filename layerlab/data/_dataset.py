"""The :class:`Dataset` container and the missing-dataset error."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from jax.typing import ArrayLike

from layerlab._checks import check_int

__all__ = ["Dataset", "DatasetNotFoundError"]


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files (or its tensorflow-datasets copy) could not be found.

    The message names the dataset, every place that was searched, the files that are
    expected there and how to obtain them.
    """


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """An in-memory dataset: host (numpy) arrays plus metadata.

    Attributes:
      x: inputs, ``[N, H, W, C]`` float32 in ``[0, 1]`` for images, ``[N, d]`` float32
        for tabular and synthetic data.
      y: targets, ``[N]`` int32 class labels for classification, ``[N]`` or ``[N, k]``
        float32 for regression.
      num_classes: number of classes, ``0`` for regression.
      name: dataset name as given to :func:`layerlab.data.load`.
      split: ``"train"``, ``"test"``, ``"all"`` (or a derived name such as ``"val"``).
      class_names: tuple of class names when known, else ``None``.
      feature_names: tuple of column names for tabular data when known, else ``None``.

    ``Dataset`` is a pytree (``x`` and ``y`` are its leaves, the rest is static), so it can
    be passed directly as ``data`` to :func:`layerlab.loop.fit` -- but ``ds.arrays``
    (the plain ``(x, y)`` tuple) is usually what a loss function wants. It is frozen:
    derive new datasets with :meth:`replace`, :meth:`take` or :meth:`subset`.
    """

    x: Any
    y: Any
    num_classes: int = dataclasses.field(default=0, metadata=dict(static=True))
    name: str = dataclasses.field(default="", metadata=dict(static=True))
    split: str = dataclasses.field(default="train", metadata=dict(static=True))
    class_names: tuple[str, ...] | None = dataclasses.field(
        default=None, metadata=dict(static=True)
    )
    feature_names: tuple[str, ...] | None = dataclasses.field(
        default=None, metadata=dict(static=True)
    )

    def __post_init__(self):
        # Only host arrays are checked: jax may rebuild the pytree with tracers or
        # placeholders (vmap axes, shardings), which must pass through untouched.
        if not (isinstance(self.x, np.ndarray) and isinstance(self.y, np.ndarray)):
            return
        nx, ny = self.x.shape[:1], self.y.shape[:1]
        if not nx or not ny or nx != ny:
            raise ValueError(
                f"Dataset {self.name!r}: x and y need the same leading (sample) axis, got "
                f"x.shape={np.shape(self.x)} and y.shape={np.shape(self.y)}."
            )

    def __len__(self) -> int:
        return int(np.shape(self.x)[0])

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, split={self.split!r}, x={_desc(self.x)}, "
            f"y={_desc(self.y)}, num_classes={self.num_classes})"
        )

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input, ``x.shape[1:]``."""
        return tuple(np.shape(self.x)[1:])

    @property
    def is_classification(self) -> bool:
        return self.num_classes > 0

    @property
    def arrays(self) -> tuple[Any, Any]:
        """``(x, y)``: the form :func:`layerlab.loop.fit` batches."""
        return self.x, self.y

    def replace(self, **changes: Any) -> Dataset:
        """A copy with some fields replaced (e.g. ``ds.replace(x=flatten(ds.x))``)."""
        return dataclasses.replace(self, **changes)

    def subset(self, indices: ArrayLike, *, split: str | None = None) -> Dataset:
        """The samples at ``indices`` (an integer index array or boolean mask), in that order."""
        idx = np.asarray(indices)
        if idx.dtype != bool and idx.size and (idx.min() < -len(self) or idx.max() >= len(self)):
            raise IndexError(
                f"Dataset {self.name!r} has {len(self)} samples; indices range "
                f"[{idx.min()}, {idx.max()}] is out of bounds."
            )
        return self.replace(x=self.x[idx], y=self.y[idx], split=split or self.split)

    def take(self, n: int) -> Dataset:
        """The first ``n`` samples (no shuffling; see :func:`balanced_subset` for a random one)."""
        n = check_int(n, "n", fn="Dataset.take", min_value=0)
        if not 0 <= n <= len(self):
            raise ValueError(f"take({n}) on a dataset of {len(self)} samples.")
        return self.replace(x=self.x[:n], y=self.y[:n])

    def class_counts(self) -> np.ndarray:
        """``[num_classes]`` int: number of samples of each class (classification only)."""
        if not self.is_classification:
            raise ValueError(f"Dataset {self.name!r} is a regression dataset (num_classes=0).")
        return np.bincount(np.asarray(self.y), minlength=self.num_classes)


def _desc(a) -> str:
    return f"{getattr(a, 'dtype', type(a).__name__)}{list(np.shape(a))}"


jax.tree_util.register_dataclass(
    Dataset,
    data_fields=["x", "y"],
    meta_fields=["num_classes", "name", "split", "class_names", "feature_names"],
)
