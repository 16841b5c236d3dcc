"""Tests for layerlab/probes/_trees.py: cosine similarity and relative change of pytrees, on hand
cases and against numpy on the flattened vectors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import probes as P


def test_tree_cosine_and_relative_change():
    a = {"w": jnp.array([[1.0, 0.0], [0.0, 1.0]]), "b": jnp.array([1.0])}
    b = {"w": jnp.array([[1.0, 1.0], [0.0, 0.0]]), "b": jnp.array([-1.0])}
    # <a,b> = 1 - 1 = 0
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, b)), 0.0, atol=1e-7)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, a)), 1.0, rtol=1e-6)
    # a - b = [[0,-1],[0,1]], [2]: norm sqrt(6); ||b|| = sqrt(3)
    np.testing.assert_allclose(float(P.tree_relative_change(a, b)), np.sqrt(2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="structure"):
        P.tree_cosine_similarity(a, {"w": a["w"]})


def test_tree_probes_match_numpy_on_flat_vectors(x64):
    rng = np.random.default_rng(0)
    shapes = {"w": (4, 3), "b": (3,), "conv": (2, 2, 3, 5)}
    a = {k: rng.normal(size=s) for k, s in shapes.items()}
    b = {k: rng.normal(size=s) for k, s in shapes.items()}
    flat = lambda t: np.concatenate([t[k].ravel() for k in sorted(t)])  # noqa: E731
    fa, fb = flat(a), flat(b)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, b)),
                               fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb)), rtol=1e-12)
    np.testing.assert_allclose(float(P.tree_relative_change(a, b)),
                               np.linalg.norm(fa - fb) / np.linalg.norm(fb), rtol=1e-12)
    # jit-able (the zero-norm check is eager only)
    np.testing.assert_allclose(float(jax.jit(P.tree_relative_change)(a, b)),
                               np.linalg.norm(fa - fb) / np.linalg.norm(fb), rtol=1e-12)
    with pytest.raises(ValueError, match="leaf shapes"):
        P.tree_relative_change(a, {**b, "b": np.zeros(4)})


def test_tree_cosine_of_a_zero_tree_is_zero_not_nan():
    """It returned NaN (0/0) silently; 0 as kernel_alignment and cka give for zero kernels."""
    a = {"w": jnp.zeros((2, 3)), "b": jnp.zeros(3)}
    b = {"w": jnp.ones((2, 3)), "b": jnp.arange(3.0)}
    assert float(P.tree_cosine_similarity(a, b)) == 0.0
    assert float(P.tree_cosine_similarity(b, a)) == 0.0
    assert float(jax.jit(P.tree_cosine_similarity)(a, a)) == 0.0
    # a NaN leaf still gives NaN
    assert np.isnan(float(jax.jit(P.tree_cosine_similarity)({**b, "b": jnp.full(3, jnp.nan)}, b)))


def _flat64(t):
    return np.concatenate([np.asarray(leaf, np.float64).ravel() for leaf in jax.tree.leaves(t)])


def test_tree_probes_of_float16_trees_sum_in_float32():
    """optax.tree.norm/vdot summed in float16: norms past ~256 overflowed (relative change 0.0
    for 0.01, cosine NaN)."""
    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.standard_normal((64, 32)) * 10, jnp.float16)  # norm ~450
    a, a0 = [w * 1.01, w[0]], [w, w[1]]
    fa, fa0 = _flat64(a), _flat64(a0)
    rel = P.tree_relative_change(a, a0)
    assert rel.dtype == jnp.float32
    np.testing.assert_allclose(float(rel), np.linalg.norm(fa - fa0) / np.linalg.norm(fa0),
                               rtol=1e-5)
    cos = P.tree_cosine_similarity(a, a0)
    np.testing.assert_allclose(float(cos), fa @ fa0 / (np.linalg.norm(fa) * np.linalg.norm(fa0)),
                               rtol=1e-5)
    same = float(P.tree_cosine_similarity([w], [w]))
    assert -1.0 <= same <= 1.0 and same == pytest.approx(1.0, abs=1e-5)


def test_tree_probes_of_integer_trees_are_float():
    """int32 squares overflowed (cosine NaN; the relative change called a0 all zeros)."""
    a, a0 = [np.array([40001, 40000], np.int32)], [np.array([40000, 40000], np.int32)]
    fa, fa0 = _flat64(a), _flat64(a0)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(a, a0)),
                               fa @ fa0 / (np.linalg.norm(fa) * np.linalg.norm(fa0)), rtol=1e-6)
    np.testing.assert_allclose(float(P.tree_relative_change(a, a0)),
                               np.linalg.norm(fa - fa0) / np.linalg.norm(fa0), rtol=1e-6)
    # uint8 differences wrapped (3 - 4 = 255)
    u, u0 = [np.array([3, 4], np.uint8)], [np.array([4, 4], np.uint8)]
    np.testing.assert_allclose(float(P.tree_relative_change(u, u0)), 1 / np.hypot(4, 4),
                               rtol=1e-6)


def test_tree_cosine_is_clipped_to_its_range():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(20):  # float32 rounding puts some cosines of a tree with itself above 1
        t = [jnp.asarray(rng.standard_normal(s), jnp.float32) for s in [(37,), (5, 7)]]
        c = float(P.tree_cosine_similarity(t, t))
        assert -1.0 <= c <= 1.0 and c == pytest.approx(1.0, abs=1e-6)
        hits += float(P.tree_cosine_similarity(t, [-leaf for leaf in t])) >= -1.0
    assert hits == 20


def test_tree_probes_keep_float64(x64):
    rng = np.random.default_rng(2)
    a, b = [rng.normal(size=(5, 3))], [rng.normal(size=(5, 3))]
    assert P.tree_relative_change(a, b).dtype == jnp.float64
    assert P.tree_cosine_similarity(a, b).dtype == jnp.float64


@pytest.mark.parametrize("s", [1e-20, 1e-10, 1e10, 1e20])
def test_tree_probes_are_scale_invariant_in_float32(s):
    """float32 norms of 1e-20 trees underflowed: cosine 0.0, and tree_relative_change said
    "a0 has norm 0 (all leaves zero)"; at 1e20 both were NaN.  Each tree (the difference too)
    is now rescaled by an exact power of two: float64 numpy on the flat vectors holds."""
    rng = np.random.default_rng(13)
    a = {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    b = {"w": a["w"] + 0.5 * rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    fa, fb = _flat64(a), _flat64(b)
    want_cos = fa @ fb / (np.linalg.norm(fa) * np.linalg.norm(fb))
    want_rel = np.linalg.norm(fa - fb) / np.linalg.norm(fb)
    f32 = lambda t, c: jax.tree.map(lambda v: np.float32(c) * v.astype(np.float32), t)  # noqa: E731
    np.testing.assert_allclose(float(P.tree_cosine_similarity(f32(a, s), f32(b, s))), want_cos,
                               rtol=1e-5)
    np.testing.assert_allclose(float(P.tree_cosine_similarity(f32(a, s), f32(b, 1.0))),
                               want_cos, rtol=1e-5)
    np.testing.assert_allclose(float(P.tree_relative_change(f32(a, s), f32(b, s))), want_rel,
                               rtol=1e-5)
    np.testing.assert_allclose(float(jax.jit(P.tree_relative_change)(f32(a, s), f32(b, s))),
                               want_rel, rtol=1e-5)
    # a and a0 of different sizes: the ratio itself is large or small
    np.testing.assert_allclose(float(P.tree_relative_change(f32(a, s), f32(b, 1.0))),
                               np.linalg.norm(s * fa - fb) / np.linalg.norm(fb), rtol=1e-5)


def test_tree_cosine_gradient_at_a_zero_tree_is_zero_not_nan(x64):
    """The value at a zero tree is documented as 0; its gradient was NaN (sqrt'(0) = inf in
    the norm).  Now 0, eager and jitted, and unchanged elsewhere (central differences)."""
    b = {"w": jnp.arange(6.0).reshape(2, 3) - 2.0, "b": jnp.array([1.0, -0.5, 2.0])}
    zero = jax.tree.map(jnp.zeros_like, b)
    for f in (P.tree_cosine_similarity, jax.jit(P.tree_cosine_similarity)):
        for g in (jax.grad(f)(zero, b), jax.grad(f, argnums=1)(b, zero)):
            for leaf in jax.tree.leaves(g):
                np.testing.assert_array_equal(np.asarray(leaf), 0.0)
    a = {"w": jnp.array([[0.3, -1.0, 2.0], [0.5, 0.1, -0.7]]), "b": jnp.array([1.0, 2.0, 0.0])}
    g = jax.grad(P.tree_cosine_similarity)(a, b)
    fa, fb = _flat64(a), _flat64(b)
    fg = np.concatenate([np.asarray(g[k]).ravel() for k in sorted(g)])
    cos = lambda v: v @ fb / (np.linalg.norm(v) * np.linalg.norm(fb))  # noqa: E731
    fd = np.array([(cos(fa + e) - cos(fa - e)) / 2e-6 for e in 1e-6 * np.eye(fa.size)])
    np.testing.assert_allclose(fg, fd, rtol=1e-7, atol=1e-10)


def test_tree_relative_change_gradient_at_a_equal_a0_is_zero_not_nan():
    """||a - a0|| at a = a0: sqrt'(0) = inf made the gradient NaN (a penalty on the distance
    from init, at step 0, poisoned the update); 0, a subgradient, now; elsewhere unchanged."""
    a0 = {"w": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "b": jnp.array([0.25])}
    a = jax.tree.map(lambda v: v + 0.5, a0)
    f = jax.jit(jax.value_and_grad(P.tree_relative_change))
    v, g = f(a0, a0)
    assert float(v) == 0.0
    for leaf in jax.tree.leaves(g):
        np.testing.assert_array_equal(leaf, np.zeros_like(leaf))
    v, g = f(a, a0)  # d/da ||a - a0|| / ||a0|| = (a - a0) / (||a - a0|| ||a0||)
    n0 = np.sqrt(1 + 4 + 0.25 + 9 + 0.0625)
    np.testing.assert_allclose(float(v), np.sqrt(5 * 0.25) / n0, rtol=1e-6)
    np.testing.assert_allclose(g["w"], np.full((2, 2), 0.5 / (np.sqrt(1.25) * n0)), rtol=1e-6)


def test_tree_probes_name_a_complex_leaf():
    """A complex leaf failed in a private helper ('_pow2: float32 or float64 expected, got
    complex64'), naming neither the function nor the leaf."""
    a = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
    bad = {"w": jnp.ones((2, 2)), "b": jnp.ones(2) * 1j}
    with pytest.raises(TypeError, match=r"^tree_cosine_similarity: b\['b'\] must hold real"):
        P.tree_cosine_similarity(a, bad)
    with pytest.raises(TypeError, match=r"^tree_relative_change: a\['b'\] must hold real"):
        P.tree_relative_change(bad, a)
    with pytest.raises(TypeError, match=r"^tree_relative_change: a0\['b'\] must hold real"):
        P.tree_relative_change(a, bad)


def test_integer_trees_are_computed_in_the_default_float_under_x64(x64):
    """int64 leaves gave a float32 cosine and relative change under x64; now float64, equal
    to numpy's float64 values on the flattened vectors."""
    rng = np.random.default_rng(13)
    a = {"w": rng.integers(-9, 10, size=(4, 3)), "b": rng.integers(-9, 10, size=(3,))}
    b = {"w": a["w"] + rng.integers(-2, 3, size=(4, 3)), "b": rng.integers(-9, 10, size=(3,))}
    va = np.concatenate([a["b"], a["w"].ravel()]).astype(np.float64)
    vb = np.concatenate([b["b"], b["w"].ravel()]).astype(np.float64)
    cos = P.tree_cosine_similarity(a, b)
    rel = P.tree_relative_change(b, a)  # ||b - a|| / ||a||
    assert cos.dtype == rel.dtype == jnp.float64
    np.testing.assert_allclose(float(cos), va @ vb / np.linalg.norm(va) / np.linalg.norm(vb),
                               rtol=1e-13)
    np.testing.assert_allclose(float(rel), np.linalg.norm(vb - va) / np.linalg.norm(va),
                               rtol=1e-13)
