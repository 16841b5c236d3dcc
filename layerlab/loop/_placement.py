"""Placement of the data, state and key on a ``Mesh`` for :func:`layerlab.loop.fit`."""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from layerlab._checks import as_device_array


def _expand_sharding(sharding, tree, what):
    """A single sharding -> one per leaf; a pytree of shardings must match ``tree``."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if isinstance(sharding, jax.sharding.Sharding):
        return tuple(sharding for _ in leaves), treedef
    sh_leaves, sh_def = jax.tree_util.tree_flatten(
        sharding, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding)
    )
    if sh_def != treedef:
        raise ValueError(
            f"fit: {what} must be one jax.sharding.Sharding or a pytree of shardings with the "
            f"same structure as the state; got structure {sh_def} for state {treedef}."
        )
    return tuple(sh_leaves), treedef


def _put(a, sh):
    """Place one leaf with sharding ``sh``; works when ``sh`` spans several processes."""
    if isinstance(a, jax.Array) and not a.is_fully_addressable:
        return a  # already a global multi-process array: keep the caller's layout
    if sh.is_fully_addressable:
        return jax.device_put(a if isinstance(a, jax.Array) else jnp.asarray(a), sh)
    # multi-process: every process holds the same host value and contributes its local shards
    if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        raw = np.asarray(jax.random.key_data(a))
        glob = jax.make_array_from_callback(raw.shape, sh, lambda idx: raw[idx])
        return jax.random.wrap_key_data(glob, impl=jax.random.key_impl(a))
    host = np.asarray(a)
    if host.dtype == np.float64 and not jax.config.jax_enable_x64:
        host = host.astype(np.float32)
    return jax.make_array_from_callback(host.shape, sh, lambda idx: host[idx])


def _place(tree, sharding):
    """Place every leaf (one sharding, or a pytree of shardings matching ``tree``)."""
    if isinstance(sharding, jax.sharding.Sharding):
        return jax.tree_util.tree_map(lambda a: _put(a, sharding), tree)
    return jax.tree_util.tree_map(_put, tree, sharding)


class Placement(NamedTuple):
    """Rarely used placement arguments of :func:`layerlab.loop.fit`, grouped.

    ``fit(..., placement=Placement(mesh, data_axis="data", state_sharding=None,
    data_sharding=None))`` is the same as passing the four keywords to ``fit``.
    """

    mesh: Any = None
    data_axis: str = "data"
    state_sharding: Any = None
    data_sharding: Any = None


def _on_device(tree):
    """Every leaf as a ``jax.Array`` on the default device (``jax.Array`` leaves kept)."""
    return jax.tree_util.tree_map(
        lambda a: a if isinstance(a, jax.Array) else as_device_array(a), tree)


def place_bound(tree, mesh):
    """The arrays bound in a traced ``eval_fn`` Partial, placed once: replicated over
    ``mesh``'s devices, or (without a mesh) numpy arrays moved to the default device -- not
    transferred again at every evaluation."""
    if mesh is None:
        return _on_device(tree)
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return _place(tree, NamedSharding(mesh, P()))


class Placed(NamedTuple):
    data: Any
    state: Any
    key: jax.Array
    batch_sharding: Any        # NamedSharding of a batch, or None without a mesh
    state_sharding: Any        # (leaf shardings, treedef) for the compiled step, or None


def place(data, state, key, placement: Placement, *, batch_size, n, data_runs_axis) -> Placed:
    """Put the data, state and key on the mesh's devices (or the default device).

    With a ``placement.mesh``: batches are constrained to ``P(data_axis)`` (``P(None,
    data_axis)`` with a runs axis) inside the compiled step, the stored data set is replicated
    (or ``data_sharding``), the state replicated (or ``state_sharding``), the key replicated.
    """
    mesh, data_axis, state_sharding, data_sharding = placement
    batch_sharding = state_sh = None
    if mesh is not None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        if data_axis not in mesh.axis_names:
            raise ValueError(
                f"fit: mesh axes {mesh.axis_names} have no {data_axis!r} axis; build it with "
                f"jax.make_mesh((ndev,), ('{data_axis}',), "
                "axis_types=(jax.sharding.AxisType.Auto,))."
            )
        ndata = mesh.shape[data_axis]
        b = n if batch_size is None else batch_size
        if b % ndata:
            raise ValueError(
                f"fit: the batch ({b} samples) must divide evenly over the {ndata} devices of "
                f"mesh axis {data_axis!r}; choose batch_size as a multiple of {ndata}."
            )
        batch_sharding = NamedSharding(mesh, P(None, data_axis) if data_runs_axis else P(data_axis))
        replicated = NamedSharding(mesh, P())
        data = _place(data, data_sharding if data_sharding is not None else replicated)
        state_sh = _expand_sharding(
            state_sharding if state_sharding is not None else replicated, state, "state_sharding"
        )
        state = _place(state, jax.tree_util.tree_unflatten(state_sh[1], list(state_sh[0])))
        key = _put(key, replicated)
    else:
        if state_sharding is not None or data_sharding is not None:
            raise ValueError("fit: state_sharding/data_sharding need mesh=.")
        data = _on_device(data)
    return Placed(data, state, key, batch_sharding, state_sh)
