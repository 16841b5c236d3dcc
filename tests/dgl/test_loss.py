"""Tests for layerlab.dgl._loss: DGL vs brute-force leave-one-out GP regression, gradients,
DGL@Linear, invariances, the mini-batch estimator, the IB pairwise loss and error handling."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from layerlab import dgl


def _data(seed, n, d, c):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(n, c))


def _rbf(H):
    sq = jnp.sum(H * H, 1)
    return jnp.exp(-0.5 * (sq[:, None] + sq[None, :] - 2 * H @ H.T)) + 0.1


def _brute_loo(K, Y, eps2):
    """N separate GP fits, each on the other N-1 points (numpy)."""
    n = K.shape[0]
    res, var = [], []
    for i in range(n):
        m = np.arange(n) != i
        A = K[np.ix_(m, m)] + eps2 * np.eye(n - 1)
        k = K[i, m]
        mean = k @ np.linalg.solve(A, Y[m])
        res.append(Y[i] - mean)
        var.append(K[i, i] - k @ np.linalg.solve(A, k))
    return np.array(res), np.array(var)


@pytest.mark.parametrize("eps2", [1e-3, 0.1, 1.0])
def test_dgl_equals_brute_force_loo(x64, eps2):
    H, Y = _data(0, 15, 3, 4)
    K = np.asarray(_rbf(jnp.asarray(H)))
    r, v = _brute_loo(K, Y, eps2)
    want = np.sum(r**2)
    np.testing.assert_allclose(dgl.dgl_loss(K, Y, eps2=eps2), want, rtol=1e-9)
    want_var = want + Y.shape[1] * np.sum(v)
    np.testing.assert_allclose(dgl.dgl_loss(K, Y, eps2=eps2, variance=True), want_var, rtol=1e-9)
    rr, vv = dgl.loo_residuals(K, Y, eps2=eps2)
    np.testing.assert_allclose(rr, r, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(vv, v, rtol=1e-7, atol=1e-10)
    # the naive inverse-based reference agrees too
    np.testing.assert_allclose(dgl.dgl_loss_reference(K, Y, eps2=eps2), want, rtol=1e-8)


def test_dgl_gradient_finite_differences(x64):
    H, Y = _data(1, 12, 3, 2)
    f = lambda H, Y, e: dgl.dgl_loss(_rbf(H), Y, eps2=e, variance=True)  # noqa: E731
    check_grads(f, (jnp.asarray(H), jnp.asarray(Y), 0.05), order=1, modes=("rev",),
                atol=1e-4, rtol=2e-5, eps=1e-5)


def test_forward_mode_loo_and_hessian_match_finite_differences(x64):
    """Forward mode through the Cholesky (it once recursed without end): ``jacfwd`` of
    ``loo_residuals`` in eps2 equals central differences of the brute-force leave-one-out fits;
    ``jax.hessian`` of ``dgl_loss`` in eps2, and a Hessian-vector product in the
    representations, equal central differences of its (analytic) gradient."""
    H, Y = _data(12, 7, 2, 2)
    K = np.asarray(_rbf(jnp.asarray(H)))
    e, h = 0.1, 1e-5
    jr, jv = jax.jit(jax.jacfwd(lambda s: dgl.loo_residuals(K, Y, eps2=s)))(e)
    (rp, vp), (rm, vm) = _brute_loo(K, Y, e + h), _brute_loo(K, Y, e - h)
    np.testing.assert_allclose(jr, (rp - rm) / (2 * h), atol=1e-6)
    np.testing.assert_allclose(jv, (vp - vm) / (2 * h), atol=1e-7)
    f = lambda s: dgl.dgl_loss(K, Y, eps2=s, variance=True)  # noqa: E731
    g = jax.jit(jax.grad(f))
    np.testing.assert_allclose(jax.jit(jax.hessian(f))(e), (g(e + h) - g(e - h)) / (2 * h),
                               rtol=1e-6)
    gH = jax.jit(jax.grad(lambda x: dgl.dgl_loss(_rbf(x), Y, eps2=e)))
    d = np.random.default_rng(1).normal(size=H.shape)
    hvp = jax.jit(lambda x, t: jax.jvp(gH, (x,), (t,))[1])(jnp.asarray(H), jnp.asarray(d))
    np.testing.assert_allclose(hvp, (gH(H + h * d) - gH(H - h * d)) / (2 * h), atol=1e-6)


def test_dgl_gradient_matches_naive_autodiff_blocked(x64):
    # N >= 512 exercises the blocked triangular / symmetric products of the backward pass
    variance = True
    H, Y = _data(2, 530, 5, 3)
    top = dgl.top_kernel_fn(jnp.array([1.5, 2.0]), jnp.array([0.2, 0.1]))
    f = jax.jit(jax.value_and_grad(
        lambda H: dgl.dgl_loss(top(H), Y, eps2=0.05, variance=variance)))
    g = jax.jit(jax.value_and_grad(
        lambda H: dgl.dgl_loss_reference(top(H), Y, eps2=0.05, variance=variance)))
    (a, ga), (b, gb) = f(jnp.asarray(H)), g(jnp.asarray(H))
    np.testing.assert_allclose(a, b, rtol=1e-9)
    np.testing.assert_allclose(ga, gb, rtol=1e-7, atol=1e-9 * float(jnp.max(jnp.abs(gb))))


def test_dgl_linear_is_eps_to_zero_limit(x64):
    n, d = 400, 3
    H, Y = _data(3, n, d, 2)
    Y = Y + H @ np.random.default_rng(4).normal(size=(d, 2))
    lin = float(dgl.dgl_linear(H, Y))
    # exact limit of the DGL of K = H H^T: PRESS = sum |((I-P)Y)_n|^2 / (1 - P_nn)^2
    P = H @ np.linalg.solve(H.T @ H, H.T)
    press = np.sum(((Y - P @ Y) / (1 - np.diag(P))[:, None]) ** 2)
    full = float(dgl.dgl_loss(H @ H.T, Y, eps2=1e-9))
    np.testing.assert_allclose(full, press, rtol=1e-5)
    # eq. (6) is the training residual tr Y^T (I - P) Y, within O(d/N) of the limit
    np.testing.assert_allclose(lin, np.sum(Y * (Y - P @ Y)), rtol=1e-10)
    assert abs(full - lin) / lin < 3 * d / n
    # finite eps: ridge form
    e = 0.3
    want = np.sum(Y * Y) - np.sum(Y * (H @ np.linalg.solve(H.T @ H + e * np.eye(d), H.T @ Y)))
    np.testing.assert_allclose(dgl.dgl_linear(H, Y, eps2=e), want, rtol=1e-10)


def test_invariances(x64):
    H, Y = _data(5, 40, 4, 3)
    rng = np.random.default_rng(6)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))  # O(d)
    A = rng.normal(size=(4, 4)) + 2 * np.eye(4)  # GL(d)
    top = dgl.top_kernel_fn(jnp.array([2.0, 1.0, 1.0]), jnp.array([0.1, 0.1, 0.0]))
    a = dgl.dgl_features(jnp.asarray(H), Y, top, eps2=0.01)
    b = dgl.dgl_features(jnp.asarray(H @ Q), Y, top, eps2=0.01)
    np.testing.assert_allclose(a, b, rtol=1e-10)
    np.testing.assert_allclose(dgl.dgl_linear(H @ A, Y), dgl.dgl_linear(H, Y), rtol=1e-9)
    # ... and the full DGL of the linear kernel becomes GL(d)-invariant as eps -> 0
    e1 = float(dgl.dgl_loss(H @ H.T, Y, eps2=1e-10))
    e2 = float(dgl.dgl_loss((H @ A) @ (H @ A).T, Y, eps2=1e-10))
    np.testing.assert_allclose(e1, e2, rtol=1e-3)
    f1 = float(dgl.dgl_loss(H @ H.T, Y, eps2=10.0))
    f2 = float(dgl.dgl_loss((H @ A) @ (H @ A).T, Y, eps2=10.0))
    assert abs(f1 - f2) / f1 > 1e-2, (f1, f2)  # not invariant at finite eps


def test_minibatch_estimator_mean(x64):
    H, Y = _data(7, 8, 2, 2)
    kern = lambda h: _rbf(h)  # noqa: E731
    exact = float(dgl.dgl_subsets_exact(jnp.asarray(H), Y, kern, batch_size=4, eps2=0.1))
    # exact = (N/B) * average over all C(8,4) subsets, enumerated independently here
    vals = []
    for s in itertools.combinations(range(8), 4):
        Ks = np.asarray(kern(jnp.asarray(H[list(s)])))
        vals.append(np.sum(_brute_loo(Ks, Y[list(s)], 0.1)[0] ** 2))
    H = jnp.asarray(H)
    np.testing.assert_allclose(exact, 2.0 * np.mean(vals), rtol=1e-10)
    M = 4000
    est = jax.jit(lambda k: dgl.dgl_minibatch(k, H, Y, kern, batch_size=4, num_batches=M,
                                              eps2=0.1))(jax.random.key(3))
    se = 2.0 * np.std(vals) / np.sqrt(M)
    assert abs(float(est) - exact) < 4 * se


def test_ib_pairwise_brute_force(x64):
    H, _ = _data(8, 10, 3, 1)
    labels = np.arange(10) % 3
    Y = np.eye(3)[labels]
    beta, eta = 2.5, 0.7
    want = 0.0
    for n in range(10):
        for m in range(10):
            r2 = np.sum((H[n] - H[m]) ** 2)
            want += (beta * (1 - Y[n] @ Y[m]) - 1) * np.exp(-r2 / (8 * eta))
    np.testing.assert_allclose(dgl.ib_pairwise_loss(H, Y, beta=beta, eta=eta), want, rtol=1e-10)
    # eta = 0 once gave NaN, eta < 0 a finite number
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match=rf"ib_pairwise_loss: eta must be > 0\.0 .*{bad}"):
            dgl.ib_pairwise_loss(H, Y, beta=beta, eta=bad)


def test_errors_and_jitter(x64):
    H, Y = _data(9, 6, 2, 2)
    K = H @ H.T
    with pytest.raises(ValueError, match="not positive definite"):
        dgl.dgl_loss(K - 2.0 * np.eye(6), Y, eps2=0.0)
    with pytest.raises(ValueError, match="rows to match"):
        dgl.dgl_loss(K, Y[:5], eps2=0.1)
    # dgl_features / dgl_linear take H, not K: their own name, H's rows (dgl_features blamed
    # dgl_loss's kernel, after building the kernel)
    calls = []
    top = lambda h: calls.append(1) or h @ h.T  # noqa: E731
    for call, fn in ((lambda: dgl.dgl_features(H, Y[:5], top, eps2=0.1), "dgl_features"),
                     (lambda: dgl.dgl_linear(H, Y[:5], eps2=0.1), "dgl_linear"),
                     (lambda: dgl.dgl_minibatch(jax.random.key(0), H, Y[:5], top, batch_size=3,
                                                eps2=0.1), "dgl_minibatch"),
                     (lambda: dgl.dgl_subsets_exact(H, Y[:5], top, batch_size=3, eps2=0.1),
                      "dgl_subsets_exact"),
                     (lambda: dgl.ib_pairwise_loss(H, Y[:5], beta=1.0, eta=1.0),
                      "ib_pairwise_loss")):
        with pytest.raises(ValueError, match=rf"^{fn}: Y must have shape \(N, C\) or \(N,\) "
                                             r"with N = 6 rows to match H's rows"):
            call()
    assert calls == []
    with pytest.raises(ValueError, match="square"):
        dgl.dgl_loss(K[:, :5], Y, eps2=0.1)
    with pytest.raises(ValueError, match="NaN"):
        dgl.dgl_loss(K.at[0, 0].set(np.nan) if hasattr(K, "at") else np.where(
            np.eye(6, dtype=bool), np.nan, K), Y, eps2=0.1)
    with pytest.raises(ValueError, match="d < N"):
        dgl.dgl_linear(H[:2], Y[:2])
    # under jit: NaN, not an exception
    bad = jax.jit(lambda K: dgl.dgl_loss(K, Y, eps2=0.0))(K - 2.0 * np.eye(6))
    assert np.isnan(bad)
    # singular (duplicated point, eps2 = 0): the documented jitter makes it finite and equal
    # to the loss with that jitter as eps2
    Hd = np.concatenate([H, H[:1]])
    Yd = np.concatenate([Y, Y[:1] + 1.0])
    Kd = _rbf(jnp.asarray(Hd))
    v = jax.jit(lambda K: dgl.dgl_loss(K, Yd, eps2=0.0))(Kd)
    assert np.isfinite(v)
    jit = 100 * np.finfo(np.float64).eps * float(jnp.mean(jnp.diagonal(Kd)))
    np.testing.assert_allclose(v, dgl.dgl_loss(Kd, Yd, eps2=jit), rtol=1e-3)


def test_vmapped_dgl_loss_equals_per_run_losses_and_grads():
    """The CPU vmap rule of the leaf Cholesky (a map over the batch, against a jaxlib
    deadlock of concurrent batched Cholesky calls) changes no number: vmapped values and
    gradients equal the per-run ones, at a size (N = 600 > 2 leaves) that goes through the
    recursive blocked inverse."""
    runs, n, d = 3, 600, 8
    with jax.enable_x64(True):  # float64: the two routes' rounding differs, the maths does not
        H = jax.random.normal(jax.random.key(0), (runs, n, d), jnp.float64)
        Y = jax.nn.one_hot(jnp.arange(n) % 3, 3, dtype=jnp.float64)

        def f(h):
            return dgl.dgl_loss(h @ h.T / d + 0.1 * jnp.eye(n), Y, eps2=0.01)

        vals, grads = jax.jit(jax.vmap(jax.value_and_grad(f)))(H)
        for r in range(runs):
            v, g = jax.jit(jax.value_and_grad(f))(H[r])
            np.testing.assert_allclose(vals[r], v, rtol=1e-10)
            np.testing.assert_allclose(grads[r], g, rtol=1e-8,
                                       atol=1e-10 * float(jnp.abs(g).max()))


def test_jitter_retry_per_member_under_vmap(x64):
    """The one-retry jitter policy is decided per kernel under ``vmap``: in a batch of a
    singular kernel (duplicated point, eps2 = 0) and a regular one, the singular member gets
    the jittered loss (= the loss with the jitter as eps2) and the regular one its exact
    loss, each equal to its own unbatched value and to numpy's leave-one-out fits."""
    H, Y = _data(3, 8, 2, 2)
    Hd = np.concatenate([H, H[:1]])
    Yd = np.concatenate([Y, Y[:1] + 1.0])
    Kd = np.asarray(_rbf(jnp.asarray(Hd)))
    Kr = np.asarray(_rbf(jnp.asarray(np.concatenate([H, H[:1] + 0.5]))))
    f = jax.jit(jax.vmap(lambda K: dgl.dgl_loss(K, Yd, eps2=0.0)))
    vals = np.asarray(f(jnp.asarray(np.stack([Kd, Kr]))))
    jit = 100 * np.finfo(np.float64).eps * float(np.mean(np.diag(Kd)))
    np.testing.assert_allclose(vals[0], np.sum(_brute_loo(Kd, Yd, jit)[0] ** 2), rtol=1e-3)
    np.testing.assert_allclose(vals[1], np.sum(_brute_loo(Kr, Yd, 0.0)[0] ** 2), rtol=1e-8)
    for i, K in enumerate((Kd, Kr)):
        np.testing.assert_allclose(vals[i], jax.jit(lambda K: dgl.dgl_loss(K, Yd, eps2=0.0))(K),
                                   rtol=1e-10)


def test_jitter_retry_is_per_member_in_float32():
    """In float32 the jitter (1e-5 of the mean diagonal) visibly changes a regular kernel's
    loss, so here a batch-wide retry would show: the regular member of a batch with a
    singular one keeps its own no-jitter value."""
    H, Y = _data(3, 8, 2, 2)
    Hd = np.concatenate([H, H[:1]]).astype(np.float32)
    Yd = np.concatenate([Y, Y[:1] + 1.0]).astype(np.float32)
    Kd = np.asarray(_rbf(jnp.asarray(Hd)))
    Kr = np.asarray(_rbf(jnp.asarray(np.concatenate([H, H[:1] + 0.5]).astype(np.float32))))
    f = jax.jit(lambda K, e: dgl.dgl_loss(K, Yd, eps2=e))
    jit = float(100 * np.finfo(np.float32).eps * np.mean(np.diag(Kr)))
    own, jittered = float(f(Kr, 0.0)), float(f(Kr, jit))
    assert abs(jittered - own) > 1e-4 * abs(own)  # the test can tell the two apart
    vals = np.asarray(jax.jit(jax.vmap(lambda K: dgl.dgl_loss(K, Yd, eps2=0.0)))(
        jnp.asarray(np.stack([Kd, Kr]))))
    assert np.isfinite(vals[0])
    assert abs(vals[1] - own) < 0.05 * abs(jittered - own)


@pytest.mark.parametrize("n", [257, 1100])
def test_recursive_blocked_inverse_factor_matches_numpy(x64, n):
    """``_factor_inv`` (LAPACK Cholesky, then the recursive 2x2 triangular inverse with
    triangular-aware blocked products) equals
    numpy's ``inv(cholesky(A))`` in float64, at sizes whose splits are uneven and go through
    every blocked path; ``_gram_lower`` equals ``U^T U``."""
    from layerlab.dgl._loss import _factor_inv, _gram_lower

    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, n + 5))
    A = X @ X.T / n + 0.05 * np.eye(n)
    Li = np.asarray(jax.jit(lambda A: _factor_inv(A, A))(jnp.asarray(A)))
    ref = np.linalg.inv(np.linalg.cholesky(A))
    np.testing.assert_allclose(Li, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    assert np.all(np.triu(Li, 1) == 0.0)
    B = np.asarray(jax.jit(lambda u: _gram_lower(u, 8))(jnp.asarray(ref)))
    np.testing.assert_allclose(B, ref.T @ ref, rtol=0, atol=1e-11 * np.abs(ref.T @ ref).max())


def test_float32_gradient_accuracy_against_float64_dense_reference():
    """float32 ``dgl_loss`` value+grad at N = 1000
    (blocked recursion; cond(K + eps2 I) = 5e3) against the dense float64 formula of its
    gradient ``2 B diag(w) B - (B G)(BY)^T - (BY)(B G)^T``.  Measured: 1.8e-6 (value) and
    7e-5 (gradient) relative, as for autodiff through ``inv``; the bounds are 10x looser."""
    n = 1000
    rng = np.random.default_rng(3)
    from layerlab.kernels import relu_nngp

    with jax.enable_x64(True):  # the kernel itself exact, so only the loss's rounding counts
        K = np.asarray(relu_nngp(jnp.asarray(rng.normal(size=(n, 64))), depth=2, w_var=2.0,
                                 b_var=0.1))
    Y = rng.normal(size=(n, 10))
    eps2 = 0.05 * float(np.mean(np.diag(K)))
    B = np.linalg.inv(K + eps2 * np.eye(n))
    b = np.diag(B)
    a = B @ Y
    R = a / b[:, None]
    w = np.sum(R * R, 1) / b
    BG = B @ (R / b[:, None])
    g64 = 2 * (B * w) @ B - (BG @ a.T + a @ BG.T)
    v, g = jax.jit(jax.value_and_grad(lambda k: dgl.dgl_loss(k, jnp.asarray(Y, jnp.float32),
                                                             eps2=eps2)))(
        jnp.asarray(K, jnp.float32))
    assert abs(float(v) - np.sum(R * R)) / np.sum(R * R) < 2e-5
    assert np.linalg.norm(np.asarray(g, np.float64) - g64) / np.linalg.norm(g64) < 1e-3


def test_api_input_handling_dtype_labels_minibatch_checks():
    """Public-API edges: integer [N] labels refused (not regressed on as numbers); an integer
    H or K never truncates real targets; dgl_minibatch takes numpy H, names bad batch sizes
    and, called eagerly, raises instead of returning NaN; loo_residuals checks eps2."""
    rng = np.random.default_rng(0)
    Hf = rng.integers(-3, 4, size=(9, 3)).astype(np.float64)
    Y = rng.normal(size=(9, 2))
    labels = np.arange(9) % 3
    with pytest.raises(ValueError, match="dgl_loss: Y is an integer array of shape \\(9,\\)"):
        dgl.dgl_loss(Hf @ Hf.T + np.eye(9), labels, eps2=0.1)
    # the message names what LEGO / monitor_fn really build from labels: plain one-hot rows
    with pytest.raises(ValueError, match=r"plain one-hot \(jax\.nn\.one_hot\(y, C\) or "
                                         r"layerlab\.data\.as_targets\(y, C\), what LEGO and "
                                         r"dgl\.monitor_fn build"):
        dgl.loo_residuals(Hf @ Hf.T + np.eye(9), labels, eps2=0.1)
    from layerlab import data
    np.testing.assert_array_equal(data.as_targets(labels, 3), np.eye(3)[labels])
    # integer representations give the float result (targets not cast to int)
    for fn, kw in ((dgl.dgl_linear, {"eps2": 0.5}),
                   (dgl.ib_pairwise_loss, {"beta": 2.0, "eta": 1.0})):
        a = float(fn(Hf.astype(np.int32), Y, **kw))
        b = float(fn(Hf.astype(np.float32), Y.astype(np.float32), **kw))
        np.testing.assert_allclose(a, b, rtol=1e-5)
    K = Hf @ Hf.T + np.eye(9)
    np.testing.assert_allclose(float(dgl.dgl_loss_reference(K.astype(np.int32), Y, eps2=0.5)),
                               float(dgl.dgl_loss(K.astype(np.float32), Y.astype(np.float32),
                                                  eps2=0.5)), rtol=1e-4)
    kf = lambda h: h @ h.T  # noqa: E731
    key = jax.random.key(0)
    est = dgl.dgl_minibatch(key, Hf, Y, kf, batch_size=4, eps2=0.1)  # numpy H
    np.testing.assert_allclose(float(est), float(dgl.dgl_minibatch(
        key, jnp.asarray(Hf), Y, kf, batch_size=4, eps2=0.1)), rtol=1e-6)
    for bs in (0, 1, 10):
        with pytest.raises(ValueError, match="batch_size"):
            dgl.dgl_minibatch(key, Hf, Y, kf, batch_size=bs, eps2=0.1)
    with pytest.raises(ValueError, match="num_batches"):
        dgl.dgl_minibatch(key, Hf, Y, kf, batch_size=4, num_batches=0, eps2=0.1)
    bad = Hf.copy()
    bad[:, :] = np.nan
    with pytest.raises(ValueError, match="mini-batch DGL"):
        dgl.dgl_minibatch(key, bad, Y, kf, batch_size=4, eps2=0.1)
    with pytest.raises(ValueError, match="eps2"):
        dgl.loo_residuals(K, Y, eps2=-1.0)
    r, v = dgl.loo_residuals(K.astype(np.int32), Y, eps2=0.5)  # promoted, not truncated
    assert r.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(r)))


def test_eps2_must_be_a_scalar_also_under_jit(x64):
    """A vector eps2 under ``jit`` once broadcast into a vector "loss" (shape (6,)): refused
    at trace time by name; a 0-d array eps2 (traced) gives the brute-force LOO loss."""
    H, Y = _data(13, 6, 2, 2)
    K = np.asarray(_rbf(jnp.asarray(H)))
    for fn, f in (("dgl_loss", lambda e: dgl.dgl_loss(K, Y, eps2=e)),
                  ("loo_residuals", lambda e: dgl.loo_residuals(K, Y, eps2=e)[1]),
                  ("dgl_linear", lambda e: dgl.dgl_linear(H, Y, eps2=e))):
        for e in (jnp.full(6, 0.1), jnp.array([0.1])):
            with pytest.raises(ValueError, match=rf"{fn}: eps2 must be a scalar \(0-d\), got "
                                                 rf"shape \({e.shape[0]},\)"):
                jax.jit(f)(e)
        with pytest.raises(ValueError, match=rf"{fn}: eps2 must be a scalar"):
            f(np.full(6, 0.1))  # eagerly too
    with pytest.raises(ValueError, match=r"dgl_features: eps_rel must be a scalar"):
        dgl.dgl_features(H, Y, _rbf, eps_rel=jnp.full(6, 0.1))
    r, v = _brute_loo(K, Y, 0.1)
    np.testing.assert_allclose(jax.jit(lambda e: dgl.dgl_loss(K, Y, eps2=e))(jnp.asarray(0.1)),
                               np.sum(r**2), rtol=1e-9)
    np.testing.assert_allclose(jax.jit(lambda e: dgl.loo_residuals(K, Y, eps2=e)[1])(
        jnp.asarray(0.1)), v, rtol=1e-7)


def test_check_kernel_takes_integer_and_half_precision_kernels():
    """``check_kernel`` once failed inside numpy on float16 / bfloat16 / integer kernels (no
    LAPACK, no finfo): they are checked in float32, as ``dgl_loss`` computes them."""
    X = np.random.default_rng(0).integers(-2, 3, size=(6, 3))
    K = X @ X.T + 3 * np.eye(6, dtype=X.dtype)
    for k in (K.astype(np.int32), K.astype(np.float16), jnp.asarray(K, jnp.bfloat16)):
        dgl.check_kernel(k, 0.1, np.ones((6, 2)))
        with pytest.raises(ValueError, match="not positive definite"):
            dgl.check_kernel(k - 20 * np.eye(6, dtype=k.dtype), 0.0)


def _relu_top_dgl(h, y):
    top = dgl.top_kernel_fn(jnp.array([2.0, 1.0]), jnp.array([0.1, 0.1]))
    return dgl.dgl_features(h, y, top, eps_rel=0.05)


# jitted, shared by both cases: one program each, not ~280 op-by-op compiles
_relu_top_hessian = jax.jit(jax.hessian(_relu_top_dgl))
_relu_top_grad = jax.jit(jax.grad(_relu_top_dgl))


@pytest.mark.parametrize("duplicate", [False, True])
def test_hessian_of_dgl_features_with_a_relu_top_kernel(x64, duplicate):
    """jax.hessian of dgl_features through a top kernel with a ReLU layer is finite and
    matches central differences of the gradient (it was NaN: the ReLU kernel's arccos/J1
    at the c = 1 diagonal under forward-over-reverse), also with two equal rows."""
    rng = np.random.default_rng(3)
    h = rng.normal(size=(4, 2))
    if duplicate:
        h[3] = h[1]
    h = jnp.asarray(h)
    y = jnp.asarray(rng.normal(size=(4, 2)))
    hess = _relu_top_hessian(h, y)
    assert bool(jnp.all(jnp.isfinite(hess)))

    def g(h):
        return _relu_top_grad(h, y)

    d = jnp.asarray(rng.normal(size=h.shape))
    e = 1e-5
    fd = (g(h + e * d) - g(h - e * d)) / (2 * e)
    np.testing.assert_allclose(jnp.einsum("ijkl,kl->ij", hess, d), fd, rtol=1e-5,
                               atol=1e-5 * float(jnp.max(jnp.abs(fd))))


def test_loss_errors_name_the_public_function_called():
    """The shared square/kernel checks and the rank checks of dgl_linear and ib_pairwise_loss
    once raised "K must be ..." / "H must be ..." without the function's name; each message
    now starts with the public function the user called."""
    H, Y = _data(9, 6, 2, 2)
    K = H @ H.T + np.eye(6)
    for fn, f in (("dgl_loss", lambda k: dgl.dgl_loss(k, Y[:len(k)], eps2=0.1)),
                  ("loo_residuals", lambda k: dgl.loo_residuals(k, Y[:len(k)], eps2=0.1)),
                  ("check_kernel", lambda k: dgl.check_kernel(k, 0.1, Y[:len(k)]))):
        with pytest.raises(ValueError, match=rf"^{fn}: K must be a square \(N, N\) kernel "
                                             r"matrix, got shape \(6, 5\)\."):
            f(K[:, :5])
        with pytest.raises(ValueError, match=rf"^{fn}: K must have N >= 2 rows: .*N = 2 "
                                             r"training points .*got shape \(1, 1\)\."):
            f(K[:1, :1])
        with pytest.raises(ValueError, match=rf"^{fn}: K \+ eps2\*I is not positive definite"):
            f(K - 20.0 * np.eye(6))
        with pytest.raises(ValueError, match=rf"^{fn}: K is not symmetric"):
            f(K + np.triu(np.ones((6, 6)), 1))
        with pytest.raises(ValueError, match=rf"^{fn}: K has 1 non-finite entries"):
            f(np.where(np.eye(6, dtype=bool) & (np.arange(6) == 0), np.nan, K))
    with pytest.raises(ValueError, match=r"^check_kernel: Y has 1 non-finite entries"):
        dgl.check_kernel(K, 0.1, np.where(np.arange(12).reshape(6, 2) == 3, np.inf, Y))
    with pytest.raises(ValueError, match=r"^check_kernel: eps2 must be >= 0\.0 .*got -1\.0"):
        dgl.check_kernel(K, -1.0)
    with pytest.raises(ValueError, match=r"^check_kernel: eps2 must be finite"):
        dgl.check_kernel(K, np.nan)
    with pytest.raises(TypeError, match=r"^check_kernel: K must be an array, got None"):
        dgl.check_kernel(None)
    with pytest.raises(ValueError, match=r"^dgl_linear: H must be \[N, d\] representations "
                                         r"\(rank 2\), got shape \(6,\)\."):
        dgl.dgl_linear(H[:, 0], Y, eps2=0.1)
    with pytest.raises(ValueError, match=r"^ib_pairwise_loss: H must be \[N, d\] "
                                         r"representations \(rank 2\), got shape \(6,\)\."):
        dgl.ib_pairwise_loss(H[:, 0], Y, beta=1.0, eta=1.0)
    with pytest.raises(TypeError, match=r"^ib_pairwise_loss: H must be an array, got None"):
        dgl.ib_pairwise_loss(None, Y, beta=1.0, eta=1.0)


def test_dgl_subsets_exact_checks_its_arguments():
    """batch_size 0 or 1 once reached a vmap over empty / 1-point subsets (an error naming
    dgl_loss, or a reshape error), batch_size > N an empty index array, a float batch_size
    itertools; now each is named, as in dgl_minibatch, before any subset is enumerated."""
    H, Y = _data(3, 5, 2, 2)
    kf = lambda h: h @ h.T + np.eye(len(h))  # noqa: E731

    def f(**kw):
        return dgl.dgl_subsets_exact(H, Y, kf, **{"batch_size": 3, "eps2": 0.1, **kw})

    for bs in (0, 1, 6, -2):
        with pytest.raises(ValueError, match=rf"^dgl_subsets_exact: batch_size must be in "
                                             rf"\[2, N = 5\] .*got {bs}\."):
            f(batch_size=bs)
    for bs in (2.0, None, "3", True):
        with pytest.raises(TypeError, match=r"^dgl_subsets_exact: batch_size must be an "
                                            r"integer"):
            f(batch_size=bs)
    with pytest.raises(ValueError, match=r"^dgl_subsets_exact: eps2 must be >= 0\.0"):
        f(eps2=-0.1)
    with pytest.raises(ValueError, match=r"^dgl_subsets_exact: eps2 must be a scalar"):
        f(eps2=np.full(3, 0.1))
    with pytest.raises(TypeError, match=r"^dgl_subsets_exact: kernel_fn must be callable"):
        dgl.dgl_subsets_exact(H, Y, None, batch_size=3, eps2=0.1)
    with pytest.raises(ValueError, match=r"^dgl_subsets_exact: Y must have shape \(N, C\)"):
        dgl.dgl_subsets_exact(H, Y[:4], kf, batch_size=3, eps2=0.1)
    big = np.zeros((40, 1))
    with pytest.raises(ValueError, match=r"^dgl_subsets_exact: batch_size=20 with N=40 points "
                                         r"would enumerate C\(40, 20\) = 137846528820 subsets"):
        dgl.dgl_subsets_exact(big, big, kf, batch_size=20, eps2=0.1)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_traced_negative_eps2_gives_nan_and_valid_eps2_the_eager_values(dtype):
    """A traced negative eps2 (eps_rel) once gave a finite wrong loss (14.72 for eps2 = -0.5
    under jit; eager calls raise): NaN now, as a traced negative kernel variance gives; a
    valid traced eps2 gives the eager value and gradient."""
    with jax.enable_x64(dtype == jnp.float64):
        H, Y = _data(21, 8, 3, 2)
        H, Y = jnp.asarray(H, dtype), jnp.asarray(Y, dtype)
        K = _rbf(H)
        key = jax.random.key(0)
        fns = {
            "dgl_loss": lambda e: dgl.dgl_loss(K, Y, eps2=e),
            "dgl_loss(variance)": lambda e: dgl.dgl_loss(K, Y, eps2=e, variance=True),
            "loo_residuals": lambda e: dgl.loo_residuals(K, Y, eps2=e)[0],
            "dgl_features(eps2)": lambda e: dgl.dgl_features(H, Y, _rbf, eps2=e),
            "dgl_features(eps_rel)": lambda e: dgl.dgl_features(H, Y, _rbf, eps_rel=e),
            "dgl_minibatch": lambda e: dgl.dgl_minibatch(key, H, Y, _rbf, batch_size=6,
                                                         num_batches=2, eps2=e),
        }
        for name, f in fns.items():
            assert bool(jnp.all(jnp.isnan(jax.jit(f)(-0.5)))), name
            assert bool(jnp.all(jnp.isnan(jax.jit(f)(jnp.inf)))), name
            with pytest.raises(ValueError, match=r"must be >= 0"):
                f(-0.5)  # eagerly: the ValueError
            rtol = 1e-6 if dtype == jnp.float32 else 1e-12
            np.testing.assert_allclose(jax.jit(f)(0.1), f(0.1), rtol=rtol, err_msg=name)
        g = jax.grad(lambda e: dgl.dgl_loss(K, Y, eps2=e))
        np.testing.assert_allclose(jax.jit(g)(0.1), g(0.1), rtol=1e-5 if dtype == jnp.float32
                                   else 1e-12)


def test_traced_asymmetric_kernel_gives_nan_not_its_lower_triangle_loss():
    """Under jit an asymmetric K (eagerly the "K is not symmetric" ValueError) once gave a
    finite loss: the Cholesky reads only the lower triangle (the loss of another matrix).
    NaN now (value and gradient), at check_kernel's threshold; a
    symmetric traced K keeps the eager value and gradient."""
    H, Y = _data(22, 6, 3, 2)
    K = np.asarray(_rbf(jnp.asarray(H, jnp.float32)))
    bad = K + np.triu(np.full_like(K, 1.0), 1)

    @jax.jit
    def f(K):
        return (dgl.dgl_loss(K, Y, eps2=0.1), jax.grad(dgl.dgl_loss)(K, Y, eps2=0.1),
                dgl.loo_residuals(K, Y, eps2=0.1)[0])

    for out in f(bad):
        assert bool(jnp.all(jnp.isnan(out)))
    with pytest.raises(ValueError, match=r"^dgl_loss: K is not symmetric"):
        dgl.dgl_loss(bad, Y, eps2=0.1)
    v, g, r = f(K)
    np.testing.assert_allclose(v, dgl.dgl_loss(K, Y, eps2=0.1), rtol=1e-6)
    np.testing.assert_allclose(r, dgl.loo_residuals(K, Y, eps2=0.1)[0], rtol=1e-5, atol=1e-6)
    assert bool(jnp.all(jnp.isfinite(g)))


def test_variance_flag_and_minibatch_key_are_checked():
    """dgl_loss took variance="no" (or 2) by its truthiness, adding the variance term, and a
    traced flag failed with JAX's boolean-conversion error; dgl_minibatch met an integer key
    with JAX's "invalid PRNG key data".  Each is a TypeError naming the argument now; numpy
    and 0-d array bools are still flags."""
    H, Y = _data(23, 5, 2, 2)
    K = H @ H.T + np.eye(5)
    for bad, got in (("no", r"str 'no'"), (2, r"int 2"), (None, "NoneType")):
        with pytest.raises(TypeError, match=rf"^dgl_loss: variance must be a bool .*{got}"):
            dgl.dgl_loss(K, Y, eps2=0.1, variance=bad)
    with pytest.raises(TypeError, match=r"^dgl_loss: variance must be a bool .*traced"):
        jax.jit(lambda v: dgl.dgl_loss(K, Y, eps2=0.1, variance=v))(True)
    assert float(dgl.dgl_loss(K, Y, eps2=0.1, variance=np.bool_(True))) == float(
        dgl.dgl_loss(K, Y, eps2=0.1, variance=jnp.array(True)))
    with pytest.raises(TypeError, match=r"^dgl_minibatch: key must be"):
        dgl.dgl_minibatch(0, H, Y, _rbf, batch_size=3, eps2=0.1)


def test_zero_target_columns_are_refused():
    """``Y`` ``[N, 0]`` has no targets: a loss of 0.0 would be silently meaningless."""
    K = jnp.eye(3)
    with pytest.raises(ValueError, match=r"dgl_loss: Y must .* C >= 1 columns; got \(3, 0\)"):
        dgl.dgl_loss(K, jnp.ones((3, 0)), eps2=0.1)


def test_dgl_features_names_kernel_fn_for_a_wrong_kernel():
    """A ``kernel_fn`` returning the wrong shape was blamed as dgl_loss's "K"."""
    H = jnp.ones((6, 3))
    Y = jnp.eye(6)[:, :2]
    with pytest.raises(ValueError, match=r"dgl_features: kernel_fn\(H\) must .* got shape "
                                         r"\(6, 5\)"):
        dgl.dgl_features(H, Y, lambda h: jnp.ones((6, 5)), eps2=0.1)
    with pytest.raises(TypeError, match="dgl_features: kernel_fn must be callable"):
        dgl.dgl_features(H, Y, "linear", eps2=0.1)
