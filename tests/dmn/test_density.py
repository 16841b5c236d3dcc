"""Tests for layerlab.dmn._density: class density matrices, streaming, spectra, selection."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab.dmn import _density as D


def _data(seed=0, n=203, d=5, c=3):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d)) + rng.normal(size=(1, d))
    y = rng.integers(0, c, size=n)
    return h, y


def test_class_density_matrices_equal_numpy_second_moments(x64):
    h, y = _data()
    rho = np.asarray(D.class_density_matrices(jnp.asarray(h), jnp.asarray(y), 3))
    n = h.shape[0]
    for c in range(3):
        hc = h[y == c]
        ref = sum(np.outer(v, v) for v in hc) / n  # N = total number of samples (eq. 15)
        np.testing.assert_allclose(rho[c], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(rho.sum(0), np.asarray(D.naive_density_matrix(jnp.asarray(h))),
                               rtol=1e-12)


def test_eigenvectors_match_numpy_up_to_sign(x64):
    h, y = _data(1)
    lam, vec = D.density_eigh(D.class_density_matrices(jnp.asarray(h), jnp.asarray(y), 3))
    lam, vec = np.asarray(lam), np.asarray(vec)
    for c in range(3):
        hc = h[y == c]
        l_np, v_np = np.linalg.eigh(hc.T @ hc / h.shape[0])
        l_np, v_np = l_np[::-1], v_np[:, ::-1]
        np.testing.assert_allclose(lam[c], l_np, rtol=1e-10)
        assert np.all(np.diff(lam[c]) <= 0)
        # same eigenvectors up to sign: |<v, v_np>| = 1 column by column
        np.testing.assert_allclose(np.abs(np.sum(vec[c] * v_np, 0)), 1.0, atol=1e-8)


def test_streaming_equals_one_shot(x64):
    h, y = _data(2, n=101)
    h, y = jnp.asarray(h), jnp.asarray(y)
    ref = D.class_density_matrices(h, y, 3)
    scan = jax.jit(D.streaming_class_density_matrices, static_argnums=2,
                   static_argnames="chunk_size")(h, y, 3, chunk_size=16)  # 101 = 6*16 + 5: padded
    np.testing.assert_allclose(scan, ref, rtol=1e-12, atol=1e-14)
    chunks = [(h[i:i + 30], y[i:i + 30]) for i in range(0, 101, 30)]
    st = D.density_from_chunks(chunks, 3, 5, dtype=jnp.float64)
    np.testing.assert_allclose(D.density_finalize(st), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(st.count, np.bincount(np.asarray(y), minlength=3))
    np.testing.assert_allclose(st.total[1], np.asarray(h)[np.asarray(y) == 1].sum(0), rtol=1e-12)
    # merge of two halves == whole
    a = D.density_from_chunks(chunks[:2], 3, 5, dtype=jnp.float64)
    b = D.density_from_chunks(chunks[2:], 3, 5, dtype=jnp.float64)
    np.testing.assert_allclose(D.density_finalize(D.density_merge(a, b)), ref, rtol=1e-12)


def test_sharded_matches_one_shot_on_one_device_mesh(x64):
    h, y = _data(3, n=40)
    mesh = jax.make_mesh((1,), ("data",))
    out = jax.jit(lambda a, b: D.sharded_class_density_matrices(a, b, 3, mesh=mesh,
                                                                axis_name="data"))(h, y)
    np.testing.assert_allclose(out, D.class_density_matrices(h, y, 3), rtol=1e-12)


def test_num_components_hand_built():
    lam = np.array([5.0, 3.0, 1.0, 0.5, 0.5])  # trace 10: cumulative 0.5, 0.8, 0.9, 0.95, 1.0
    assert D.num_components(lam, 0.5) == 1
    assert D.num_components(lam, 0.51) == 2
    assert D.num_components(lam, 0.8) == 2
    assert D.num_components(lam, 0.85) == 3
    assert D.num_components(lam, 1.0) == 5
    with pytest.raises(ValueError, match="descending"):
        D.num_components(lam[::-1], 0.5)
    with pytest.raises(ValueError, match="var_fraction"):
        D.num_components(lam, 1.5)


def _rot(theta):
    return np.array([[np.cos(theta), -np.sin(theta), 0], [np.sin(theta), np.cos(theta), 0],
                     [0, 0, 1.0]])


def test_select_filters_dedup_on_hand_built_spectra():
    # class 0: eigvecs e1, e2, e3 with lambdas 4, 2, 1
    # class 1: eigvecs rotated by 10 deg in the (e1, e2) plane (cos 10deg = 0.985 > 0.9),
    #          lambdas 3, 0.5, 0.1
    # class 2: eigvecs rotated by 60 deg (cos = 0.5 < 0.9), lambdas 3.5, 1.5, 0.2
    lam = np.array([[4.0, 2.0, 1.0], [3.0, 0.5, 0.1], [3.5, 1.5, 0.2]])
    vec = np.stack([np.eye(3), _rot(np.deg2rad(10)), _rot(np.deg2rad(60))])
    f = D.select_filters(lam, vec, num_filters=4, cutoff=0.9)
    # visit order by eigenvalue: (4,c0,0) keep; (3.5,c2,0) |cos60|=.5 keep; (3,c1,0) dup of c0
    # (cos10); (2,c0,1) |e2 . rot60 e1| = sin60 = .87 < .9 keep; (1.5,c2,1) vs (c0,0):
    # |e1 . rot60 e2| = .87 keep -> 4 filters
    assert list(zip(f.source.tolist(), f.index.tolist())) == [(0, 0), (2, 0), (0, 1), (2, 1)]
    np.testing.assert_allclose(f.eigvals, [4.0, 3.5, 2.0, 1.5])
    np.testing.assert_allclose(f.w[:, 0], [1, 0, 0])
    # without de-duplication the 10-degree twin is kept
    f2 = D.select_filters(lam, vec, num_filters=3, cutoff=None)
    assert list(zip(f2.source.tolist(), f2.index.tolist())) == [(0, 0), (2, 0), (1, 0)]
    # var_fraction per class: class0 trace 7 -> 4/7=.57 < .6 -> 2 comps; class1 3/3.6=.83 -> 1;
    # class2 3.5/5.2=.67 -> 1.  Candidates (4,c0,0),(3.5,c2,0),(3,c1,0 dup),(2,c0,1)
    f3 = D.select_filters(lam, vec, var_fraction=0.6, cutoff=0.9)
    assert list(zip(f3.source.tolist(), f3.index.tolist())) == [(0, 0), (2, 0), (0, 1)]


def test_select_filters_naive_single_spectrum_and_errors():
    lam = np.array([3.0, 2.0, 1.0])
    vec = np.eye(3)
    f = D.select_filters(lam, vec, num_filters=2)
    np.testing.assert_allclose(f.w, np.eye(3)[:, :2])
    with pytest.raises(ValueError, match="num_filters, var_fraction"):
        D.select_filters(lam, vec)
    with pytest.raises(ValueError, match="NaN"):
        D.select_filters(np.array([np.nan, 1.0, 0.0]), vec, num_filters=1)


def test_fix_signs_positive_overlap_with_mean():
    v = np.array([[0.6, 0.8], [0.8, -0.6]])  # columns
    mu = np.array([-1.0, -1.0])
    out = np.asarray(D.fix_signs(v, mu))
    assert np.all(out.T @ mu >= 0)
    # float32 result vs float64 input: only the representation error (<= 2^-24 relative)
    np.testing.assert_allclose(np.abs(out), np.abs(v), rtol=4 * np.finfo(np.float32).eps)


def test_bad_inputs_raise():
    h = jnp.ones((4, 3))
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        D.class_density_matrices(jnp.ones((4,)), jnp.zeros(4, int), 2)
    with pytest.raises(ValueError, match="labels of shape"):
        D.class_density_matrices(h, jnp.zeros(5, int), 2)
    with pytest.raises(TypeError, match="integer"):
        D.class_density_matrices(h, jnp.zeros(4), 2)


def test_data_fraction_is_stratified(key):
    y = np.repeat(np.arange(4), [10, 20, 30, 40])
    idx = D.data_fraction_indices(key, y, 0.25)
    np.testing.assert_array_equal(np.bincount(y[idx]), [3, 5, 8, 10])
    assert len(np.unique(idx)) == idx.size


@pytest.mark.multidevice
def test_sharded_two_devices_subprocess():
    """Two simulated CPU devices (Auto and Explicit meshes) give the one-shot answer."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=2")
        import jax, numpy as np
        from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
        from layerlab.dmn import _density as D
        h = np.random.default_rng(0).normal(size=(40, 5)).astype(np.float32)
        y = np.arange(40) % 3
        ref = np.asarray(D.class_density_matrices(h, y, 3))
        errs = []
        for t in (AxisType.Auto, AxisType.Explicit):
            mesh = jax.make_mesh((2,), ("data",), axis_types=(t,))
            f = jax.jit(lambda a, b: D.sharded_class_density_matrices(
                a, b, 3, mesh=mesh, axis_name="data"))
            errs.append(float(np.abs(f(h, y) - ref).max()))
        mesh = jax.make_mesh((2,), ("data",), axis_types=(AxisType.Auto,))
        hs = jax.device_put(h, NamedSharding(mesh, P("data", None)))
        ys = jax.device_put(y, NamedSharding(mesh, P("data")))
        out = jax.jit(D.class_density_matrices, static_argnums=2)(hs, ys, 3)
        errs.append(float(np.abs(out - ref).max()))
        print("ERRS", max(errs))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    err = float(r.stdout.split("ERRS")[1])
    assert err < 1e-5


def test_grouped_update_equals_repeated_labels(x64):
    rng = np.random.default_rng(5)
    h = jnp.asarray(rng.normal(size=(7, 4, 3)))  # 7 groups (images) of 4 samples (patches)
    y = jnp.asarray(rng.integers(0, 3, size=7))
    mask = jnp.asarray([1, 1, 1, 1, 1, 0, 0.0])  # last two groups are padding
    st = D.density_update_grouped(D.density_init(3, 3, jnp.float64), h, y, mask)
    ref = D.class_density_matrices(h[:5].reshape(20, 3), jnp.repeat(y[:5], 4), 3)
    np.testing.assert_allclose(D.density_finalize(st), ref, rtol=1e-12)
    assert float(st.n) == 20.0
    np.testing.assert_allclose(st.count, np.bincount(np.repeat(np.asarray(y[:5]), 4), minlength=3))


def test_integer_inputs_and_bad_labels():
    """uint8 / int32 features give the float density matrices (no integer overflow), uint8
    images give the float features, and build_dmn refuses labels it would drop."""
    from layerlab import data, dmn

    h = np.array([[200, 100], [10, 20]], np.uint8)
    want = np.array([[200.0 * 200 + 10 * 10, 200.0 * 100 + 10 * 20],
                     [200.0 * 100 + 10 * 20, 100.0 * 100 + 20 * 20]]) / 2
    np.testing.assert_allclose(dmn.class_density_matrices(h, np.array([0, 0]), 1)[0], want,
                               rtol=1e-6)
    np.testing.assert_allclose(dmn.naive_density_matrix(h), want, rtol=1e-6)
    big = np.array([[70000, 1]], np.int32)
    np.testing.assert_allclose(dmn.naive_density_matrix(big)[0, 0], 4.9e9, rtol=1e-6)
    tr = data.load("digits", n=60, balanced=True, seed=0)
    prefix, _ = dmn.split_spec(dmn.parse_spec("d4,m,de10"))
    params, _ = dmn.build_dmn(jax.random.key(0), prefix, tr.x, tr.y, 10, jit=False)
    x8 = np.round(np.asarray(tr.x) * 16).astype(np.uint8)  # digits are 0..16 counts
    got = dmn.dmn_apply(params, prefix, x8)
    np.testing.assert_allclose(got, dmn.dmn_apply(params, prefix, x8.astype(np.float32)),
                               rtol=1e-5, atol=1e-5)
    assert jnp.issubdtype(got.dtype, jnp.floating)
    for bad in (np.asarray(tr.y) + 1, np.asarray(tr.y) + 0.5):
        with pytest.raises((ValueError, TypeError), match="build_dmn: y must"):
            dmn.build_dmn(jax.random.key(0), prefix, tr.x, bad, 10, jit=False)
    with pytest.raises(ValueError, match=r"dmn_apply: x must be a batch of images"):
        dmn.dmn_apply(params, prefix, tr.x[0])
    with pytest.raises(ValueError, match="DMNConfig.chunk_size"):
        dmn.DMNConfig(chunk_size=0)


def test_streaming_and_sharded_promote_integer_features():
    """uint8 / int32 features: the float64 numpy second moments (int32 products overflowed
    in the scan, uint8 broke its carry, the sharded sum wrapped uint8 products)."""
    rng = np.random.default_rng(0)
    h8 = rng.integers(0, 256, (48, 4)).astype(np.uint8)
    y = rng.integers(0, 3, 48)
    hf = h8.astype(np.float64)
    want = np.stack([hf[y == c].T @ hf[y == c] for c in range(3)]) / 48
    mesh = jax.make_mesh((1,), ("data",))
    sharded = jax.jit(lambda a, b: D.sharded_class_density_matrices(a, b, 3, mesh=mesh,
                                                                    axis_name="data"))
    for h in (h8, h8.astype(np.int32)):
        stream = D.streaming_class_density_matrices(h, y, 3, chunk_size=10)  # 48 = 4*10 + 8
        for got in (stream, sharded(h, y)):
            assert jnp.issubdtype(got.dtype, jnp.floating)
            np.testing.assert_allclose(got, want, rtol=1e-5)
    big = np.array([[50000], [3]], np.int32)  # 50000^2 > 2^31
    np.testing.assert_allclose(
        D.streaming_class_density_matrices(big, np.array([0, 0]), 1, chunk_size=1)[0, 0, 0],
        (50000.0**2 + 9) / 2, rtol=1e-6)
    np.testing.assert_allclose(sharded(big, np.array([0, 0]))[0, 0, 0],
                               (50000.0**2 + 9) / 2, rtol=1e-6)


def test_updates_validate_labels_and_mask():
    """density_update_grouped refused nothing (float labels and out-of-range labels counted in
    no class); a wrong-length mask gave a bare broadcast error in both updates."""
    rng = np.random.default_rng(1)
    st = D.density_init(3, 2)
    hg = rng.normal(size=(4, 5, 2)).astype(np.float32)
    with pytest.raises(TypeError, match=r"density_update_grouped: y must hold integer values"):
        D.density_update_grouped(st, hg, np.full(4, 0.5))
    with pytest.raises(ValueError, match=r"density_update_grouped: y must be integer class "
                                         r"labels in \[0, 3\) \(num_classes=3\), got values in "
                                         r"\[0, 5\]"):
        D.density_update_grouped(st, hg, np.array([0, 5, 1, 2]))
    with pytest.raises(ValueError, match=r"density_update_grouped: y must have 4 labels \(one "
                                         r"per sample\), got shape \(3,\)"):
        D.density_update_grouped(st, hg, np.array([0, 1, 2]))
    h = hg.reshape(20, 2)
    for fn, args in ((D.density_update, (h, np.arange(20) % 3)),
                     (D.density_update_grouped, (hg, np.arange(4) % 3))):
        with pytest.raises(ValueError, match=rf"{fn.__name__}: mask must have shape "
                                             rf"\[{args[0].shape[0]}\], got \(7,\)"):
            fn(st, *args, mask=np.ones(7))
    # a valid grouped update still equals the per-sample one
    got = D.density_update_grouped(st, hg, np.array([0, 2, 1, 2]), np.array([1, 1, 0, 1]))
    want = D.density_update(st, h, np.repeat([0, 2, 1, 2], 5), np.repeat([1, 1, 0, 1], 5))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_num_components_refuses_non_finite_eigenvalues():
    # [nan, 1] returned 1 (NaN compares False everywhere); the sorted-order check passed too
    for lam in ([np.nan, 1.0], [2.0, np.inf], [1.0, -np.inf]):
        with pytest.raises(ValueError, match=r"num_components: eigvals must be finite, got "):
            D.num_components(np.array(lam), 0.9)
    assert D.num_components(np.array([3.0, 1.0]), 0.75) == 1  # finite input unchanged


def test_density_init_refuses_integer_accumulators():
    """Integer running sums once truncated every real chunk cast into them silently."""
    with pytest.raises(TypeError, match=r"^density_init: dtype must be a floating-point dtype "
                                        r".*got int32\."):
        D.density_init(3, 2, jnp.int32)
    with pytest.raises(TypeError, match=r"^density_from_chunks: dtype .*got int64\."):
        D.density_from_chunks([], 3, 2, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^density_init: num_classes must be >= 1, got 0"):
        D.density_init(0, 2)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_density_init_refuses_half_precision_accumulators(dtype):
    """A float16 state's count and n overflowed to inf past 65504 samples and density_finalize
    returned NaN silently; bfloat16 sums stop growing (256 + 1 == 256)."""
    name = jnp.dtype(dtype).name
    with pytest.raises(TypeError, match=rf"^density_init: dtype must be float32 or float64 for "
                                        rf"running sums, got {name}: half-precision sums "
                                        r"overflow .*Pass jnp.float32"):
        D.density_init(2, 2, dtype)
    with pytest.raises(TypeError, match=rf"^density_from_chunks: dtype must be float32 or "
                                        rf"float64 for running sums, got {name}"):
        D.density_from_chunks([], 2, 2, dtype=dtype)


def test_half_precision_features_accumulate_in_a_float32_state():
    """The documented route for half-precision features: a float32 state (100 000 samples,
    past float16's 65504)."""
    h = jnp.tile(jnp.asarray([[1.0, 0.5]], jnp.float16), (1000, 1))
    y = jnp.zeros(1000, jnp.int32)
    upd = jax.jit(D.density_update)
    st = D.density_init(2, 2)
    for _ in range(100):
        st = upd(st, h, y)
    assert st.n.dtype == jnp.float32 and float(st.n) == 100_000.0
    np.testing.assert_allclose(np.asarray(D.density_finalize(st)),
                               [np.outer([1.0, 0.5], [1.0, 0.5]), np.zeros((2, 2))], rtol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_density_eigh_of_half_precision_is_computed_in_float32(dtype):
    """LAPACK has no half-precision eigh: 'NotImplementedError: Unsupported dtype bfloat16',
    naming no function."""
    a = np.random.default_rng(0).normal(size=(2, 6, 4))
    rho = jnp.asarray(np.einsum("cni,cnj->cij", a, a) / 6, dtype)
    r64 = np.asarray(rho, np.float64)
    lam, vec = D.density_eigh(rho)
    assert lam.dtype == vec.dtype == jnp.float32
    lam_ref, vec_ref = np.linalg.eigh(r64)
    np.testing.assert_allclose(np.asarray(lam), lam_ref[:, ::-1], rtol=1e-5, atol=1e-6)
    overlap = np.abs(np.einsum("cia,cia->ca", np.asarray(vec, np.float64), vec_ref[:, :, ::-1]))
    np.testing.assert_allclose(overlap, 1.0, atol=1e-4)


@pytest.mark.parametrize("order", ["eigenvalue", "class"])
def test_select_filters_checks_threshold_and_num_filters_always(order):
    """threshold was checked only through num_components, i.e. with var_fraction: a typo
    ("bogus") in the fixed-count mode acted like "below" under the class order; num_filters=2.5
    kept 3 filters.  Both are checked on every call now."""
    lam = np.array([[0.6, 0.3, 0.1], [0.5, 0.45, 0.05]])
    vec = np.stack([np.eye(3), np.eye(3)[:, [1, 0, 2]]])
    with pytest.raises(ValueError, match=r"select_filters: threshold must be one of "
                                         r"\('crossing', 'below'\); got 'bogus'"):
        D.select_filters(lam, vec, num_filters=2, threshold="bogus", order=order, cutoff=None)
    for bad, err, match in ((2.5, TypeError, r"num_filters must be an integer, got float 2\.5"),
                            (True, TypeError, r"num_filters must be an integer, got bool"),
                            (0, ValueError, r"num_filters must be >= 1, got 0")):
        with pytest.raises(err, match=rf"select_filters: {match}"):
            D.select_filters(lam, vec, num_filters=bad, order=order, cutoff=None)
    f = D.select_filters(lam, vec, num_filters=np.int64(2), order=order, cutoff=None)
    assert f.w.shape == (3, 2)


def test_density_matrices_of_no_samples_are_refused():
    """N = 0 gave 0/0 = NaN density matrices (class_density_matrices, naive_density_matrix);
    the one-shot estimators now refuse it by name (a static check, also under jit)."""
    h, y = np.zeros((0, 2)), np.zeros(0, int)
    msg = r"h must hold at least one sample \(N >= 1\), got shape \(0, 2\)"
    with pytest.raises(ValueError, match=rf"class_density_matrices: {msg}"):
        D.class_density_matrices(h, y, 2)
    with pytest.raises(ValueError, match=rf"class_density_matrices: {msg}"):
        jax.jit(D.class_density_matrices, static_argnums=2)(h, y, 2)
    with pytest.raises(ValueError, match=rf"naive_density_matrix: {msg}"):
        D.naive_density_matrix(h)
    with pytest.raises(ValueError, match=rf"streaming_class_density_matrices: {msg}"):
        D.streaming_class_density_matrices(h, y, 2, chunk_size=4)
    # the running sums keep their guard: an empty stream is zero, not NaN
    np.testing.assert_array_equal(D.density_finalize(D.density_init(2, 2)), np.zeros((2, 2, 2)))
