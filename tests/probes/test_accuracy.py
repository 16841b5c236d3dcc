"""Tests for layerlab/probes/_accuracy.py: accuracy against a numpy brute-force count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import probes as P


def _np_count(logits, labels):
    """Correct predictions counted one sample at a time (first maximum wins ties)."""
    hits = 0
    for z, y in zip(logits, labels):
        best = 0
        for c in range(len(z)):
            if z[c] > z[best]:
                best = c
        hits += best == y
    return hits / len(labels)


@pytest.fixture
def scores():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=37)
    logits = rng.normal(size=(37, 5)).astype(np.float32)
    logits[np.arange(20), labels[:20]] += 3.0  # ~20 certain hits, the rest by chance
    return logits, labels


def test_accuracy_matches_numpy_count(scores):
    logits, labels = scores
    want = _np_count(logits, labels)
    assert 0.5 < want < 1.0
    np.testing.assert_allclose(float(P.accuracy(logits, labels)), want, rtol=1e-6)
    np.testing.assert_allclose(float(P.accuracy(jnp.asarray(logits), jnp.asarray(labels))), want,
                               rtol=1e-6)


def test_accuracy_one_hot_rows_equal_integer_labels(scores):
    logits, labels = scores
    want = float(P.accuracy(logits, labels))
    assert float(P.accuracy(logits, jax.nn.one_hot(labels, 5))) == want
    zero_mean = np.eye(5)[labels] - 1.0 / 5  # the DGL paper's targets: argmax is the label
    assert float(P.accuracy(logits, zero_mean)) == want


def test_accuracy_ties_go_to_the_first_class():
    logits = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [3.0, 3.0, 3.0]])
    labels = np.array([0, 2, 0])
    assert float(P.accuracy(logits, labels)) == pytest.approx(_np_count(logits, labels))
    assert float(P.accuracy(logits, labels)) == pytest.approx(2 / 3)


def test_accuracy_jit_and_vmap(scores):
    logits, labels = scores
    want = _np_count(logits, labels)
    np.testing.assert_allclose(float(jax.jit(P.accuracy)(logits, labels)), want, rtol=1e-6)
    # a batch of models: [M, N, C] logits against shared labels
    batch = np.stack([logits, -logits, np.eye(5, dtype=np.float32)[labels]])
    got = jax.jit(jax.vmap(P.accuracy, in_axes=(0, None)))(batch, labels)
    np.testing.assert_allclose(np.asarray(got), [_np_count(b, labels) for b in batch], rtol=1e-6)
    assert float(got[2]) == 1.0


def test_accuracy_rejects_bad_shapes_and_labels():
    z = jnp.zeros((4, 3))
    with pytest.raises(ValueError, match=r"logits"):
        P.accuracy(jnp.zeros(4), jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match=r"logits must have at least 1 rows"):
        P.accuracy(jnp.zeros((0, 3)), jnp.zeros(0, jnp.int32))
    with pytest.raises(ValueError, match=r"^accuracy: labels must be integer labels in \[0, 3\)"):
        P.accuracy(z, jnp.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match=r"^accuracy: labels must have 4 labels \(one per "
                                         r"sample\), got 3"):
        P.accuracy(z, jnp.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"^accuracy: labels as one-hot rows \[N, C\] must "
                                         r"have C = 3 columns"):
        P.accuracy(z, jnp.zeros((4, 2)))
    with pytest.raises(TypeError, match=r"^accuracy: labels of shape \[N\] must hold integer"):
        P.accuracy(z, jnp.zeros(4))


def test_accuracy_is_float32_for_any_logits_dtype(scores, x64):
    """The docstring said 'float64 under x64'; the result is float32 there too."""
    logits, labels = scores
    want = _np_count(logits, labels)
    for dt in (np.float64, np.float16, np.int32):
        got = P.accuracy(jnp.asarray(logits.astype(dt)), labels)
        assert got.dtype == jnp.float32
        np.testing.assert_allclose(float(got), _np_count(logits.astype(dt), labels), rtol=1e-6)
    np.testing.assert_allclose(float(P.accuracy(logits.astype(np.float64), labels)), want,
                               rtol=1e-7)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_accuracy_of_non_finite_logits_is_nan_eager_and_jitted(scores, bad):
    """argmax of a NaN row is 0: all-NaN logits scored 0.1 against labels 0..9 and 1.0
    against all-zero labels (a diverged model looked perfect); now NaN, never an error."""
    nan_logits = np.full((10, 10), np.nan, np.float32)
    for labels in (np.arange(10), np.zeros(10, int)):
        assert np.isnan(float(P.accuracy(nan_logits, labels)))
        assert np.isnan(float(jax.jit(P.accuracy)(nan_logits, jnp.asarray(labels))))
    logits, labels = scores
    one_bad = logits.copy()
    one_bad[3, 1] = bad  # a single non-finite score
    assert np.isnan(float(P.accuracy(one_bad, labels)))
    assert np.isnan(float(jax.jit(P.accuracy)(one_bad, labels)))
    got = jax.vmap(P.accuracy, in_axes=(0, None))(np.stack([logits, one_bad]), labels)
    assert float(got[0]) == pytest.approx(_np_count(logits, labels), rel=1e-6)
    assert np.isnan(float(got[1]))
    # finite logits keep the numpy count
    assert float(P.accuracy(logits, labels)) == pytest.approx(_np_count(logits, labels),
                                                              rel=1e-6)


def test_accuracy_takes_minus_inf_as_a_mask(scores):
    """-inf is a score (a masked class, never predicted while its row has a larger score): the
    numpy count of the masked logits; a row that is -inf everywhere has no argmax: NaN."""
    logits, labels = scores
    masked = logits.copy()
    masked[:, 0] = -np.inf           # class 0 masked out in every row
    masked[::2, 1] = -np.inf         # class 1 too in half of them
    want = _np_count(masked, labels)
    assert float(P.accuracy(masked, labels)) == pytest.approx(want, rel=1e-6)
    assert float(jax.jit(P.accuracy)(masked, labels)) == pytest.approx(want, rel=1e-6)
    assert want != _np_count(logits, labels)  # the mask changed the predictions
    dead = masked.copy()
    dead[4] = -np.inf
    assert np.isnan(float(P.accuracy(dead, labels)))
    assert np.isnan(float(jax.jit(P.accuracy)(dead, labels)))
