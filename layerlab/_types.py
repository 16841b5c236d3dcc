"""Type aliases shared by layerlab's annotations.

Arrays are annotated with JAX's own types: ``jax.Array`` for what a function returns (and for
PRNG keys), ``jax.typing.ArrayLike`` for inputs that also take numpy arrays and Python scalars.
"""
from __future__ import annotations

from typing import Any, TypeAlias

PyTree: TypeAlias = Any
"""A JAX pytree: nested lists, tuples, dicts, NamedTuples and registered dataclasses whose
leaves are arrays (or scalars), such as network parameters, optimiser states and batches.
``Any`` to the type checker: JAX gives pytrees no static type."""
