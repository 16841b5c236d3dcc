"""Tests for layerlab.dmn._timescales: spectra, distances, eq. 18 by Monte-Carlo."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab.dmn import _timescales as T


def test_layer_spectra_match_numpy():
    rng = np.random.default_rng(0)
    ws = [rng.normal(size=s) for s in [(6, 5), (5, 7), (7, 3)]]
    s, p = T.layer_spectra([{"w": jnp.asarray(w), "b": jnp.zeros(w.shape[1])} for w in ws], top=2)
    for k in range(3):
        np.testing.assert_allclose(s[k], np.linalg.svd(ws[k], compute_uv=False)[:2], rtol=1e-5)
        prod = ws[k]
        for w in ws[k + 1:]:
            prod = prod @ w
        np.testing.assert_allclose(p[k], np.linalg.svd(prod, compute_uv=False)[:2], rtol=1e-4)


def test_distance_to_final():
    rng = np.random.default_rng(1)
    final = [{"w": rng.normal(size=(3, 2))}, {"w": rng.normal(size=(2, 2))}]
    snaps = [[{"w": f["w"] + t * rng.normal(size=f["w"].shape)} for f in final] for t in range(3)]
    d = T.distance_to_final(snaps, final)
    for t in range(3):
        for k in range(2):
            np.testing.assert_allclose(
                d[t, k], np.linalg.norm(snaps[t][k]["w"] - final[k]["w"]), rtol=1e-5, atol=1e-6)
    dr = T.distance_to_final(snaps, final, relative=True)
    np.testing.assert_allclose(dr[2, 1], d[2, 1] / np.linalg.norm(final[1]["w"]), rtol=1e-5)


def test_eq18_eigenvalue_fluctuations_monte_carlo(x64):
    # Gaussian data, well-separated spectrum: Var[d lambda] = 2 dN lambda^2 / (N (N + dN))
    # exactly at first order; eq. 18 is its dN << N limit.
    lam_true = jnp.array([4.0, 1.0, 0.25])
    n, dn = 400, 20
    h = jax.random.normal(jax.random.key(1), (n + dn, 3, 4000)) * jnp.sqrt(lam_true)[None, :, None]
    # 4000 independent data sets of n + dn samples (no re-use across draws)
    hs = jnp.moveaxis(h, -1, 0)

    def one(x):
        a = x[:n]
        l1 = jnp.linalg.eigvalsh(a.T @ a / n)[::-1]
        l2 = jnp.linalg.eigvalsh(x.T @ x / (n + dn))[::-1]
        return l2 - l1

    dl = jax.jit(jax.vmap(one))(hs)
    var_mc = np.var(np.asarray(dl), axis=0)
    exact = 2 * dn * np.asarray(lam_true) ** 2 / (n * (n + dn))
    np.testing.assert_allclose(var_mc, exact, rtol=0.1)
    np.testing.assert_allclose(T.eq18_variance(lam_true, n, dn), exact * (n + dn) / n, rtol=1e-12)
    # the library's resampling estimator: same scaling, std(d lambda) ~ sqrt(2 dN) lambda / N
    pool = jax.random.normal(jax.random.key(2), (8000, 3)) * jnp.sqrt(lam_true)[None, :]
    lam, dlam = jax.jit(lambda k: T.eigenvalue_fluctuations(k, pool, n=n, dn=dn,
                                                            num_draws=800))(jax.random.key(3))
    np.testing.assert_allclose(np.std(np.asarray(dlam), 0), np.sqrt(exact), rtol=0.15)


def test_eigenvalue_convergence_matches_direct():
    rng = np.random.default_rng(2)
    h = rng.normal(size=(50, 4))
    ns = [5, 17, 50]
    out = T.eigenvalue_convergence(h, ns)
    for i, m in enumerate(ns):
        np.testing.assert_allclose(out[i], np.linalg.eigvalsh(h[:m].T @ h[:m] / m)[::-1])
    with pytest.raises(ValueError,
                       match=r"eigenvalue_convergence: h must be \[M, d\].*got shape \(5, 10, 4\)"):
        T.eigenvalue_convergence(h.reshape(5, 10, 4), [5])
    with pytest.raises(ValueError, match="at least one sample count"):
        T.eigenvalue_convergence(h, [])


def test_eigenvalue_fluctuations_promotes_integer_samples():
    # identical rows v: rho = v v^T for any subset, eigenvalues (|v|^2, 0), delta 0; int32
    # products 50000^2 overflowed and uint8 ones wrapped (255^2 mod 256 = 1)
    for v, dt in (([50000, 0], np.int32), ([255, 0], np.uint8)):
        h = np.tile(np.array(v, dt), (30, 1))
        lam, dlam = T.eigenvalue_fluctuations(jax.random.key(0), h, n=20, dn=5, num_draws=2)
        assert jnp.issubdtype(lam.dtype, jnp.floating)
        np.testing.assert_allclose(lam, [[float(v[0]) ** 2, 0.0]] * 2, rtol=1e-6, atol=1e-3)
        np.testing.assert_allclose(dlam, 0.0, atol=1e-6 * float(v[0]) ** 2)
    # random pixels: the same numbers as the float path (same key, same draws)
    h8 = np.random.default_rng(0).integers(0, 256, (30, 2)).astype(np.uint8)
    got = T.eigenvalue_fluctuations(jax.random.key(1), h8, n=20, dn=5, num_draws=2)
    ref = T.eigenvalue_fluctuations(jax.random.key(1), h8.astype(np.float32), n=20, dn=5,
                                    num_draws=2)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-5, atol=1e-2)


def test_eigenvalue_fluctuations_checks_its_counts():
    """n=0 gave NaN eigenvalues (rho of no samples) and n=-3 negative ones (h[:-3] rows
    divided by -3); now the counts are checked by name."""
    h = np.random.default_rng(0).normal(size=(10, 3))
    key = jax.random.key(0)
    for kw, err, match in (
        (dict(n=0, dn=2, num_draws=2), ValueError, r"eigenvalue_fluctuations: n must be >= 1, "
                                                   r"got 0"),
        (dict(n=-3, dn=2, num_draws=2), ValueError, r"n must be >= 1, got -3"),
        (dict(n=3, dn=0, num_draws=2), ValueError, r"dn must be >= 1, got 0"),
        (dict(n=3, dn=-2, num_draws=2), ValueError, r"dn must be >= 1, got -2"),
        (dict(n=3, dn=2, num_draws=0), ValueError, r"num_draws must be >= 1, got 0"),
        (dict(n=2.5, dn=2, num_draws=1), TypeError, r"n must be an integer, got float 2\.5"),
    ):
        with pytest.raises(err, match=match):
            T.eigenvalue_fluctuations(key, h, **kw)
    lam, dlam = T.eigenvalue_fluctuations(key, h, n=np.int64(3), dn=1, num_draws=1)
    assert lam.shape == dlam.shape == (1, 3) and bool((lam >= -1e-6).all())


def test_distance_to_a_zero_final_layer_is_the_norm_of_the_snapshot():
    """An all-zero final layer (e.g. a zero-initialised bias that ends at zero) raised in the
    absolute mode, whose distance ||w(t) - 0|| is defined; the relative one still refuses."""
    rng = np.random.default_rng(2)
    final = [{"w": rng.normal(size=(3, 2)), "b": np.ones(2)},
             {"w": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.float32)}]
    snaps = [[{"w": f["w"] + t * rng.normal(size=f["w"].shape),
               "b": f["b"] + t * rng.normal(size=2)} for f in final] for t in range(3)]
    d = T.distance_to_final(snaps, final)
    for t in range(3):
        for k in range(2):
            diff = np.concatenate([(snaps[t][k][n] - final[k][n]).ravel() for n in ("b", "w")])
            np.testing.assert_allclose(d[t, k], np.linalg.norm(diff), rtol=1e-6)
    assert d[0, 1] == 0.0 and d[2, 1] > 0
    with pytest.raises(ValueError, match="a0 has norm 0"):
        T.distance_to_final(snaps, final, relative=True)
    with pytest.raises(ValueError, match=r"distance_to_final: layer 1 of snapshot 0 has "
                                         r"structure"):
        T.distance_to_final([[snaps[0][0], {"w": np.zeros((2, 2))}]], final)


def test_layer_spectra_checks_top():
    ws = [np.eye(3), np.eye(3)[:, :2]]
    for top, err, match in ((-1, ValueError, r"layer_spectra: top must be >= 1, got -1"),
                            (0, ValueError, r"layer_spectra: top must be >= 1, got 0"),
                            (1.5, TypeError, r"layer_spectra: top must be an integer"),
                            (3, ValueError, r"layer_spectra: top=3 exceeds the smallest layer "
                                            r"width 2")):
        with pytest.raises(err, match=match):
            T.layer_spectra(ws, top=top)
