"""Shared pytest fixtures.

* ``key``: a fresh typed PRNG key per test.
* ``shared_data``: path to ``../shared/data`` (the project's verified datasets), or a
  skip with the reason when it is not there.  ``LAYERLAB_DATA`` is pointed at it for
  the whole session when the variable is unset, so ``layerlab.data.load`` finds it.
* float64 is *not* enabled globally; tests that cross-check closed forms use the
  ``x64`` fixture (``jax.enable_x64`` context).
"""
import os
import pathlib

import jax
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

if SHARED_DATA.is_dir():
    os.environ.setdefault("LAYERLAB_DATA", str(SHARED_DATA))

jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found at {SHARED_DATA}; real-data test skipped")
    return SHARED_DATA
