"""layerlab._linalg: the CPU-safe batched SVD equals numpy's, batched, under vmap and jit, and
its gradient is that of jnp.linalg.svd (float64 finite differences); the cpu_mapped eigh / qr /
cholesky / thin_svd equal numpy's per matrix under (nested) vmap, map on CPU, and eigh's
derivative is jnp.linalg.eigh's (float64 finite differences); their forward mode (jacfwd,
vmap of jvp) equals jnp.linalg's.

The bottleneck hang it prevents is timing-dependent (a thread-pool deadlock), so no test here
reproduces it; its reproducer is in docs/bottleneck.md.  The gnrev one does reproduce (hung 3/3
before the fix): tests/gnrev/test_cpu_deadlock.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab._linalg import cholesky, eigh, qr, svdvals, thin_svd


def _mats(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 6, 3), (2, 3, 4, 4)])
def test_svdvals_equals_numpy_for_plain_and_batched_inputs(shape):
    a = _mats(shape)
    np.testing.assert_allclose(np.asarray(svdvals(jnp.asarray(a, jnp.float32))),
                               np.linalg.svd(a, compute_uv=False), rtol=2e-5, atol=2e-5)


def test_svdvals_under_nested_vmap_and_jit():
    a = _mats((3, 2, 6, 4), seed=1)
    f = jax.jit(jax.vmap(jax.vmap(svdvals)))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(a, jnp.float32))),
                               np.linalg.svd(a, compute_uv=False), rtol=2e-5, atol=2e-5)


def test_svdvals_gradient_matches_finite_differences_in_float64():
    with jax.enable_x64(True):
        a = jnp.asarray(_mats((2, 5, 3), seed=3))
        w = jnp.asarray([[1.0, -0.5, 2.0], [0.3, 1.5, -1.0]])

        def f(m):
            return jnp.sum(svdvals(m) * w)

        g = jax.grad(f)(a)
        e = jnp.asarray(_mats((2, 5, 3), seed=4))
        h = 1e-6
        fd = (f(a + h * e) - f(a - h * e)) / (2 * h)
        assert float(jnp.sum(g * e)) == pytest.approx(float(fd), rel=1e-7)
        # the same gradient as differentiating jnp.linalg.svd directly
        g_ref = jax.grad(lambda m: jnp.sum(jnp.linalg.svd(m, compute_uv=False) * w))(a)
        np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), atol=1e-12)


def test_svdvals_complex_gradient_and_hessian_equal_jnp_svd():
    """Complex input: ds_i = Re(u_i^H da v_i) (the rule used u without conj and returned a
    complex tangent: a TypeError); forward-over-reverse second derivatives as documented."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(5)
        w = jnp.asarray([1.0, -0.5, 2.0])
        c = jnp.asarray(rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3)))

        def f(m):
            return jnp.sum(svdvals(m) * w)

        def f_ref(m):
            return jnp.sum(jnp.linalg.svd(m, compute_uv=False) * w)

        np.testing.assert_allclose(np.asarray(f(c)), np.asarray(f_ref(c)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(jax.grad(f)(c)), np.asarray(jax.grad(f_ref)(c)),
                                   atol=1e-12)
        e = jnp.asarray(rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3)))
        _, ds = jax.jvp(svdvals, (c,), (e,))
        _, ds_ref = jax.jvp(lambda m: jnp.linalg.svd(m, compute_uv=False), (c,), (e,))
        assert ds.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(ds), np.asarray(ds_ref), atol=1e-12)
        a = jnp.asarray(rng.normal(size=(4, 3)))
        for second in (jax.hessian, lambda g: jax.jacfwd(jax.grad(g))):
            # jitted: one program per route (eager, every primitive of the second derivative
            # compiled on its own); the derivative rules are the same
            np.testing.assert_allclose(np.asarray(jax.jit(second(f))(a)),
                                       np.asarray(jax.jit(second(f_ref))(a)), atol=1e-10)


def test_cpu_mapped_factorisations_equal_numpy_under_nested_vmap():
    a = _mats((2, 3, 6, 6), seed=7)
    sym = a + np.swapaxes(a, -1, -2)
    spd = a @ np.swapaxes(a, -1, -2) + 6 * np.eye(6)
    f32 = lambda m: jnp.asarray(m, jnp.float32)  # noqa: E731
    vv = lambda f: jax.jit(jax.vmap(jax.vmap(f)))  # noqa: E731
    w, v = vv(eigh)(f32(sym))
    np.testing.assert_allclose(np.asarray(w), np.linalg.eigvalsh(sym), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(v @ (w[..., None] * np.swapaxes(v, -1, -2))), sym,
                               atol=1e-4)
    q, r = vv(qr)(f32(a[..., :4]))
    np.testing.assert_allclose(np.asarray(q @ r), a[..., :4], atol=1e-4)
    np.testing.assert_allclose(np.asarray(np.swapaxes(q, -1, -2) @ q), np.broadcast_to(
        np.eye(4), (2, 3, 4, 4)), atol=1e-5)
    np.testing.assert_allclose(np.asarray(vv(cholesky)(f32(spd))), np.linalg.cholesky(spd),
                               rtol=1e-4, atol=1e-4)
    u, s, vt = vv(thin_svd)(f32(a[..., :4]))
    np.testing.assert_allclose(np.asarray(s), np.linalg.svd(a[..., :4], compute_uv=False),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray((u * s[..., None, :]) @ vt), a[..., :4], atol=1e-4)


def test_cpu_mapped_eigh_maps_under_vmap_on_cpu():
    """Under vmap on CPU the batch is a lax.map (a while loop of unbatched eighs)."""
    if jax.default_backend() != "cpu":
        pytest.skip("the mapping is CPU-only")
    a = jnp.zeros((3, 4, 4))
    hlo = jax.jit(jax.vmap(eigh)).lower(a).as_text()
    assert "while" in hlo
    assert "while" not in jax.jit(jax.vmap(lambda m: jnp.linalg.eigh(m))).lower(a).as_text()


def test_eigh_derivative_matches_finite_differences_in_float64():
    with jax.enable_x64(True):
        rng = np.random.default_rng(11)
        a = rng.standard_normal((3, 5, 5))
        a = jnp.asarray(a + np.swapaxes(a, -1, -2))
        c = jnp.asarray(rng.standard_normal((3, 5)))

        def f(m):  # eigenvalues and a sign-invariant function of the top eigenvector
            w, v = jax.vmap(eigh)(m)
            return jnp.sum(w * c) + jnp.sum((v[..., -1] ** 2) * c)

        g = jax.grad(f)(a)
        d = jnp.asarray(rng.standard_normal(a.shape))
        d = d + jnp.swapaxes(d, -1, -2)
        h = 1e-6
        fd = (f(a + h * d) - f(a - h * d)) / (2 * h)
        np.testing.assert_allclose(float(jnp.sum(g * d)), float(fd), rtol=1e-6)


def test_over_leading_maps_stacked_inputs_and_equals_per_matrix_calls():
    """``over_leading(g)`` on ``[..., m, n]`` = ``g`` on each matrix (the same unbatched
    LAPACK call: equal to float32 rounding), plain, jitted and under vmap; on CPU a lax.map
    (no batched LAPACK call), and ``dmn.density_eigh`` goes through it."""
    from layerlab import _linalg
    from layerlab.dmn import density_eigh

    a = _mats((2, 3, 5, 5), seed=3)
    sym = jnp.asarray(a + np.swapaxes(a, -1, -2), jnp.float32)
    f = _linalg.over_leading(eigh)
    ref = [[eigh(sym[i, j]) for j in range(3)] for i in range(2)]
    for out in (f(sym), jax.jit(f)(sym), jax.vmap(f)(sym)):
        for i in range(2):
            for j in range(3):
                np.testing.assert_allclose(np.asarray(out[0][i, j]), np.asarray(ref[i][j][0]),
                                           rtol=1e-5, atol=1e-5)
                # eigenvectors up to sign (a batched accelerator kernel may flip one)
                dots = np.abs(np.sum(np.asarray(out[1][i, j]) * np.asarray(ref[i][j][1]), 0))
                np.testing.assert_allclose(dots, 1.0, atol=1e-4)
    lam, vec = density_eigh(sym)
    np.testing.assert_allclose(np.abs(np.sum(np.asarray(vec) * np.asarray(f(sym)[1][..., ::-1]),
                                             -2)), 1.0, atol=1e-4)
    np.testing.assert_allclose(np.asarray(lam), np.linalg.eigvalsh(np.asarray(sym))[..., ::-1],
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"a: the input must be \[\.\.\., m, n\].*\(5,\)"):
        f(jnp.zeros(5))
    with pytest.raises(ValueError, match=r"density_eigh: .*got shape \(5,\)"):
        _linalg.over_leading(eigh, "density_eigh")(jnp.zeros(5))
    assert svdvals(jnp.zeros((3, 0, 4))).shape == (3, 0)  # empty matrices, as jnp
    if jax.default_backend() == "cpu":
        assert "while" in jax.jit(f).lower(sym).as_text()
        assert "while" in jax.jit(density_eigh).lower(sym).as_text()


def test_cpu_mapped_forward_mode_equals_jnp_and_finite_differences_in_float64():
    """Forward mode through the cpu_mapped factorisations: ``jacfwd`` (``vmap`` over the
    tangents, the primal unbatched) once re-entered the vmap rule without end
    (RecursionError).  The Jacobians equal those of ``jnp.linalg`` and central differences,
    and ``vmap`` of ``jvp`` (tangents, primals or both batched) equals per-member ``jvp``s."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(21)
        x = rng.standard_normal((5, 5))
        a = jnp.asarray(x @ x.T + 5 * np.eye(5))
        e = rng.standard_normal((5, 5))
        e = jnp.asarray(e + e.T)
        jac = jax.jacfwd(cholesky)(a)
        np.testing.assert_allclose(jac, jax.jacfwd(jnp.linalg.cholesky)(a), atol=1e-12)
        h = 1e-6
        fd = (np.linalg.cholesky(a + h * e) - np.linalg.cholesky(a - h * e)) / (2 * h)
        np.testing.assert_allclose(np.einsum("ijkl,kl->ij", jac, e), fd, atol=1e-8)
        ts = jnp.stack([e, 2 * e, -e])
        ref = [jax.jvp(jnp.linalg.cholesky, (a,), (t,))[1] for t in ts]
        np.testing.assert_allclose(
            jax.vmap(lambda t: jax.jvp(cholesky, (a,), (t,))[1])(ts), np.stack(ref), atol=1e-12)
        As = jnp.stack([a, a + 0.5 * jnp.eye(5), 2 * a])
        for out, want in (
            (jax.vmap(lambda m: jax.jvp(cholesky, (m,), (e,))[1])(As),
             [jax.jvp(jnp.linalg.cholesky, (m,), (e,))[1] for m in As]),
            (jax.vmap(lambda m, t: jax.jvp(cholesky, (m,), (t,))[1])(As, ts),
             [jax.jvp(jnp.linalg.cholesky, (m,), (t,))[1] for m, t in zip(As, ts)]),
        ):
            np.testing.assert_allclose(out, np.stack(want), atol=1e-12)
        b = jnp.asarray(rng.standard_normal((6, 4)))
        np.testing.assert_allclose(jax.jacfwd(lambda m: qr(m)[1])(b),
                                   jax.jacfwd(lambda m: jnp.linalg.qr(m)[1])(b), atol=1e-10)
        np.testing.assert_allclose(
            jax.jacfwd(lambda m: thin_svd(m)[1])(b),
            jax.jacfwd(lambda m: jnp.linalg.svd(m, full_matrices=False)[1])(b), atol=1e-10)
