"""Tests for layerlab/probes/_spectra.py: spectra and ranks against numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import probes as P


def test_singular_values_of_a_params_tree():
    rng = np.random.default_rng(6)
    params = [
        {"w": rng.normal(size=(5, 3)), "b": np.zeros(3)},
        {"w": rng.normal(size=(3, 3, 2, 4)), "b": np.zeros(4)},
    ]
    sv = P.singular_values(params)
    assert sv[0]["b"] is None and sv[1]["b"] is None
    np.testing.assert_allclose(
        sv[0]["w"], np.linalg.svd(params[0]["w"], compute_uv=False), rtol=1e-5
    )
    np.testing.assert_allclose(
        sv[1]["w"], np.linalg.svd(params[1]["w"].reshape(18, 4), compute_uv=False), rtol=1e-5
    )


def test_product_singular_values_vs_numpy(x64):
    rng = np.random.default_rng(7)
    ws = [rng.normal(size=s) for s in [(4, 6), (6, 6), (6, 3)]]  # row convention, x @ W
    got = P.product_singular_values([{"w": w} for w in ws])
    want = [ws[0] @ ws[1] @ ws[2], ws[1] @ ws[2], ws[2]]
    for g, m in zip(got, want):
        np.testing.assert_allclose(g, np.linalg.svd(m, compute_uv=False), rtol=1e-10)
    pre = P.product_singular_values(ws, suffix=False)
    for g, m in zip(pre, [ws[0], ws[0] @ ws[1], ws[0] @ ws[1] @ ws[2]]):
        np.testing.assert_allclose(g, np.linalg.svd(m, compute_uv=False), rtol=1e-10)
    # column convention on square matrices: product W_3 W_2 W_1, not W_1 W_2 W_3
    sq = [rng.normal(size=(4, 4)) for _ in range(3)]
    col = P.product_singular_values(sq, convention="column")
    np.testing.assert_allclose(
        col[0], np.linalg.svd(sq[2] @ sq[1] @ sq[0], compute_uv=False), rtol=1e-10
    )
    assert not np.allclose(col[0], np.linalg.svd(sq[0] @ sq[1] @ sq[2], compute_uv=False))
    with pytest.raises(ValueError, match="does not chain"):
        P.product_singular_values([np.ones((3, 4)), np.ones((3, 4))])


def test_effective_rank_stable_rank_participation(x64):
    np.testing.assert_allclose(
        float(P.effective_rank(jnp.array([2.0, 2.0, 2.0, 0.0]))), 3.0, rtol=1e-12
    )
    np.testing.assert_allclose(float(P.effective_rank(jnp.array([1.0, 0.0, 0.0]))), 1.0, rtol=1e-12)
    # p = (1/2, 1/4, 1/4): H = 1.5 log 2
    np.testing.assert_allclose(
        float(P.effective_rank(jnp.array([2.0, 1.0, 1.0]))), 2**1.5, rtol=1e-12
    )
    rng = np.random.default_rng(8)
    u, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    v, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    s = np.array([3.0, 2.0, 1.0, 0.5])
    m = u[:, :4] @ np.diag(s) @ v.T
    np.testing.assert_allclose(float(P.effective_rank(m)), float(P.effective_rank(s)), rtol=1e-10)
    np.testing.assert_allclose(float(P.stable_rank(m)), (9 + 4 + 1 + 0.25) / 9, rtol=1e-10)
    np.testing.assert_allclose(float(P.stable_rank(np.diag([3.0, 4.0]))), 25 / 16, rtol=1e-12)
    np.testing.assert_allclose(float(P.participation_ratio(jnp.array([1.0, 1.0, 1.0, 0.0]))), 3.0)
    np.testing.assert_allclose(float(P.participation_ratio(jnp.array([3.0, 1.0]))), 16 / 10)
    assert int(P.count_near_one(jnp.array([1.05, 0.5, 0.97, 1.2]), tol=0.1)) == 2
    np.testing.assert_array_equal(P.count_near_one(jnp.array([[1.0, 0.0], [1.0, 1.01]])), [1, 2])
    # a [k] tol was compared value by value (silently): refused, naming tol
    with pytest.raises(ValueError, match=r"^count_near_one: tol must be a scalar, got "
                                         r"shape \(2,\)"):
        P.count_near_one(jnp.array([1.05, 1.3]), tol=jnp.array([0.1, 0.01]))


def test_effective_rank_jit_and_vmap():
    er = jax.jit(jax.vmap(P.effective_rank))(jnp.array([[1.0, 1.0], [1.0, 0.0]]))
    np.testing.assert_allclose(np.asarray(er), [2.0, 1.0], rtol=1e-6)


def test_spectra_of_bfloat16_weights_are_computed_in_float32():
    """LAPACK has no bfloat16 SVD: singular_values / effective_rank raised an opaque
    NotImplementedError ('Unsupported dtype bfloat16')."""
    rng = np.random.default_rng(0)
    m = jnp.asarray(rng.normal(size=(20, 10)), jnp.bfloat16)
    s_ref = np.linalg.svd(np.asarray(m, np.float64), compute_uv=False)  # of the bf16 values
    s = P.singular_values({"w": m, "b": m[0]})
    assert s["b"] is None and s["w"].dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(s["w"]), s_ref, rtol=1e-5)
    p = s_ref / s_ref.sum()
    np.testing.assert_allclose(float(P.effective_rank(m)), np.exp(-(p * np.log(p)).sum()),
                               rtol=1e-5)
    np.testing.assert_allclose(float(P.stable_rank(m)), (s_ref**2).sum() / s_ref[0] ** 2,
                               rtol=1e-5)
    np.testing.assert_allclose(np.asarray(P.product_singular_values([m.T, m])[0]), s_ref**2,
                               rtol=1e-4)


@pytest.mark.parametrize("dtype, eigs", [
    (jnp.float16, [300.0, 200.0, 100.0, 50.0]),  # squares overflow float16 (was NaN)
    (np.uint8, [200, 100, 50]),                  # sums and squares wrapped (was 443.8)
    (np.int32, [50000, 50000, 10]),              # squares overflow int32 (was 2.00284)
])
def test_participation_ratio_of_half_or_integer_spectra_is_computed_in_float32(dtype, eigs):
    e = np.asarray(eigs, np.float64)
    want = e.sum() ** 2 / (e**2).sum()
    got = P.participation_ratio(jnp.asarray(np.asarray(eigs, dtype)))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(float(got), want, rtol=1e-6)


def test_participation_ratio_keeps_float64(x64):
    e = np.array([3.0, 1.0, 1e-9])
    got = P.participation_ratio(jnp.asarray(e))
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(float(got), e.sum() ** 2 / (e**2).sum(), rtol=1e-14)


@pytest.mark.parametrize("s", [1e-20, 1e-10, 1e10, 1e20])
def test_stable_rank_and_participation_ratio_are_scale_invariant_in_float32(s):
    """Both are scale invariant, but float32 squares under/overflow: stable_rank(1e-20 M)
    was 0.0 (1e20 M: NaN), participation_ratio of eigenvalues ~1e-24 was 0.0 (1e24: NaN).
    The spectrum is now rescaled by an exact power of two: the float64 numpy value holds."""
    rng = np.random.default_rng(12)
    m = rng.normal(size=(9, 6)) @ np.diag([5.0, 3.0, 2.0, 1.0, 0.5, 0.1])
    sv = np.linalg.svd(m, compute_uv=False)
    want_sr = np.sum(sv ** 2) / sv[0] ** 2
    np.testing.assert_allclose(float(P.stable_rank((s * m).astype(np.float32))), want_sr,
                               rtol=1e-5)
    np.testing.assert_allclose(float(P.stable_rank((s * sv).astype(np.float32))), want_sr,
                               rtol=1e-5)
    lam = sv ** 2
    want_pr = lam.sum() ** 2 / np.sum(lam ** 2)
    for t in (s, s * s if abs(np.log10(s)) <= 18 else s):  # eigenvalues down to 1e-36
        np.testing.assert_allclose(float(P.participation_ratio((t * lam).astype(np.float32))),
                                   want_pr, rtol=1e-5)


def test_participation_ratio_gradient_is_scale_covariant_and_matches_differences(x64):
    """The rescaling is a constant for autodiff: the gradient at 1e-200 lam (whose float64
    squares underflow) is the scale-1 gradient / 1e-200, which matches central differences."""
    lam = np.array([3.0, 2.0, 0.5, 0.25])
    g = np.asarray(jax.grad(P.participation_ratio)(lam))
    fd = np.array([(float(P.participation_ratio(lam + e)) - float(P.participation_ratio(lam - e)))
                   / 2e-6 for e in 1e-6 * np.eye(4)])
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    gs = np.asarray(jax.grad(P.participation_ratio)(1e-200 * lam))
    assert np.all(np.isfinite(gs))
    np.testing.assert_allclose(gs * 1e-200, g, rtol=1e-12)


def test_participation_ratio_reads_round_off_negatives_as_zero_and_refuses_others():
    """Negative eigenvalues gave values outside the documented [1, k] ([3, -1, -1]: 0.09,
    [1, -1]: 0.0).  Now entries down to -8 log2(k) eps max|eigs| (eigvalsh round-off) count as
    0, larger negatives are refused eagerly and give NaN under jit."""
    rng = np.random.default_rng(14)
    h = rng.normal(size=(5, 12)).astype(np.float32)  # 5 samples, 12 features: rank <= 4
    h -= h.mean(0)
    lam = np.linalg.eigvalsh(h.T @ h / 5)  # float32: 8 round-off eigenvalues around 0
    assert lam.min() < 0
    clean = np.where(lam < 0, 0.0, lam.astype(np.float64))
    want = clean.sum() ** 2 / np.sum(clean ** 2)
    np.testing.assert_allclose(float(P.participation_ratio(lam)), want, rtol=1e-5)
    assert 1.0 <= float(P.participation_ratio(lam)) <= 4.0 + 1e-5
    with pytest.raises(ValueError, match=r"^participation_ratio: eigs must be non-negative"):
        P.participation_ratio(np.array([1.0, -1.0]))
    assert np.isnan(float(jax.jit(P.participation_ratio)(jnp.array([3.0, -1.0, -1.0]))))
    # the gradient at an exactly zero eigenvalue is the formula's, not halved
    g = np.asarray(jax.grad(P.participation_ratio)(jnp.array([2.0, 1.0, 0.0])))
    s1, s2 = 3.0, 5.0
    np.testing.assert_allclose(g, 2 * s1 / s2 - s1 ** 2 * 2 * np.array([2.0, 1.0, 0.0]) / s2 ** 2,
                               rtol=1e-6)


def test_times_pow2_is_exact_or_overflows_for_any_exponent():
    """The private power-of-two rescaler: exact for exponents a float32 power can reach, and
    inf / 0 past them (2^130 used to come out as -1.18e-38: the exponent wrapped into the sign
    bit)."""
    from layerlab.probes._scale import times_pow2

    for k in (0, 1, -1, 100, 127, -126, -125):
        want = np.float32(np.ldexp(np.float64(1.0), k))  # numpy: exact, then rounded to f32
        assert float(times_pow2(jnp.float32(1.0), k)) == float(want), k
    for k in (130, 254, 300, 10**6):
        assert float(times_pow2(jnp.float32(1.0), k)) == np.inf, k
        assert float(times_pow2(jnp.float32(1.0), -k)) == 0.0, k
    assert float(times_pow2(jnp.float32(0.75), 129)) == np.inf
    # a subnormal result: exact, or 0 where the CPU flushes subnormals (XLA's default)
    assert float(times_pow2(jnp.float32(3.0), -130)) in (0.0, float(np.float32(3.0 * 2.0 ** -130)))
    assert float(times_pow2(jnp.float32(2.0 ** 100), -220)) == float(np.float32(2.0 ** -120))


def test_count_near_one_refuses_a_non_finite_spectrum_and_compares_in_float32():
    """[1, NaN] counted 1: the NaN was silently left out of the count."""
    with pytest.raises(ValueError, match=r"^count_near_one: s has 1 non-finite"):
        P.count_near_one(jnp.array([1.0, jnp.nan]))
    # tol was rounded to bf16 (0.2501 -> 0.25): |0.75 - 1| = 0.25 < 0.2501 went uncounted
    assert int(P.count_near_one(jnp.asarray([0.75, 1.3], jnp.bfloat16), tol=0.2501)) == 1


def test_integer_inputs_are_computed_in_the_default_float_under_x64(x64):
    """int64 matrices and spectra gave float32 singular values and ranks under x64; now
    float64, equal to numpy's float64 values."""
    rng = np.random.default_rng(12)
    w = rng.integers(-20, 21, size=(7, 5))
    s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    p = s / s.sum()
    eigs = np.array([9, 4, 4, 1, 0])
    got = {
        "singular_values": (P.singular_values({"w": w})["w"], s),
        "product_singular_values": (P.product_singular_values([w, w.T])[0],
                                    np.linalg.svd(w @ w.T.astype(np.float64),
                                                  compute_uv=False)),
        "effective_rank": (P.effective_rank(w), np.exp(-np.sum(p * np.log(p)))),
        "stable_rank": (P.stable_rank(w), np.sum(s**2) / s[0] ** 2),
        "participation_ratio": (P.participation_ratio(eigs),
                                eigs.sum() ** 2 / np.sum(eigs.astype(np.float64) ** 2)),
    }
    for name, (val, ref) in got.items():
        assert val.dtype == jnp.float64, name
        np.testing.assert_allclose(np.asarray(val), ref, rtol=1e-10, atol=1e-9, err_msg=name)
