"""Tests for layerlab.dmn._apply / _build / _head: conv/dense DMN layers, stacking, heads."""
import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import layerlab.dmn as L
from layerlab.dmn import _density as D


def _brute_conv(x, kern, padding):
    """Loop over every output pixel: ReLU(<patch, v_f>), patch flattened (a, b, c)."""
    n, h, w, c = x.shape
    k, _, _, f = kern.shape
    if padding == "SAME":
        p = (k - 1) // 2
        x = np.pad(x, ((0, 0), (p, k - 1 - p), (p, k - 1 - p), (0, 0)))
    ho, wo = x.shape[1] - k + 1, x.shape[2] - k + 1
    out = np.zeros((n, ho, wo, f))
    v = kern.reshape(k * k * c, f)
    for i in range(n):
        for r in range(ho):
            for s in range(wo):
                patch = np.concatenate([x[i, r + a, s + b, :] for a in range(k) for b in range(k)])
                out[i, r, s] = np.maximum(patch @ v, 0)
    return out


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv_dmn_equals_brute_force_patch_projection(padding):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 6, 5, 2)).astype(np.float32)
    kern = rng.normal(size=(3, 3, 2, 4)).astype(np.float32)
    out = np.asarray(L.dmn_conv_apply(jnp.asarray(kern), jnp.asarray(x), padding=padding))
    np.testing.assert_allclose(out, _brute_conv(x, kern, padding), rtol=1e-5, atol=1e-5)


def _np_patch_density(h, y, c, k, padding):
    """Class density matrices of all k x k patches, labels inherited from the image."""
    n = h.shape[0]
    if padding == "SAME":
        p = (k - 1) // 2
        h = np.pad(h, ((0, 0), (p, k - 1 - p), (p, k - 1 - p), (0, 0)))
    ho, wo = h.shape[1] - k + 1, h.shape[2] - k + 1
    d = k * k * h.shape[3]
    rho = np.zeros((c, d, d))
    for i in range(n):
        for r in range(ho):
            for s in range(wo):
                v = np.concatenate([h[i, r + a, s + b] for a in range(k) for b in range(k)])
                rho[y[i]] += np.outer(v, v)
    return rho / (n * ho * wo)


def _np_pool(h):
    n, hh, ww, c = h.shape
    return h[:, : hh // 2 * 2, : ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c).max((2, 4))


def _same_span(a, b):
    """Columns of a equal columns of b up to sign."""
    np.testing.assert_allclose(np.abs(np.sum(a * b, 0)), 1.0, atol=2e-4)


def test_stacked_build_matches_numpy_pipeline(key):
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(12, 8, 8, 1)).astype(np.float32)
    x[6:, :4] *= 0.2  # two visibly different classes
    y = np.repeat([0, 1], 6)
    cfg = L.DMNConfig(pca="class", cutoff=0.9, chunk_size=5)  # 12 = 5 + 5 + 2: padded chunk
    layers = L.parse_spec("d3,m,d2,de2")
    prefix, _ = L.split_spec(layers)
    params, info = L.build_dmn(key, prefix, x, y, 2, cfg)
    # layer 1: class-based PCA of 3x3 patches, selected exactly as select_filters would
    rho1 = _np_patch_density(x.astype(np.float64), y, 2, 3, "SAME")
    lam, vec = np.linalg.eigh(rho1)
    lam, vec = lam[:, ::-1], vec[:, :, ::-1]
    ref1 = D.select_filters(lam, vec, num_filters=3, cutoff=0.9)
    w1 = np.asarray(params[0]["w"]).reshape(9, -1)
    assert info.widths[0] == 3 and info.input_dims == [9, 27]
    _same_span(w1, ref1.w)
    np.testing.assert_allclose(info.eigvals[0], ref1.eigvals, rtol=1e-4)
    # signs: each filter has non-negative overlap with its class's mean patch
    # layer 2 is built on the pooled ReLU outputs of layer 1
    h1 = _np_pool(_brute_conv(x.astype(np.float64), np.asarray(params[0]["w"], np.float64),
                              "SAME"))
    rho2 = _np_patch_density(h1, y, 2, 3, "SAME")
    lam2, vec2 = np.linalg.eigh(rho2)
    ref2 = D.select_filters(lam2[:, ::-1], vec2[:, :, ::-1], num_filters=2, cutoff=0.9)
    _same_span(np.asarray(params[2]["w"]).reshape(27, -1), ref2.w)
    # naive PCA: eigenvectors of the summed density matrix
    pn, _ = L.build_dmn(key, prefix[:1], x, y, 2, L.DMNConfig(pca="naive"))
    ln, vn = np.linalg.eigh(rho1.sum(0))
    _same_span(np.asarray(pn[0]["w"]).reshape(9, -1), vn[:, ::-1][:, :3])


def test_network_apply_is_jittable_and_vmappable(key):
    rng = np.random.default_rng(2)
    x = rng.uniform(size=(10, 8, 8, 1)).astype(np.float32)
    y = np.arange(10) % 2
    net = L.make_network("d4,m,c3,bn,m,de2", 2, L.DMNConfig())
    dmn, _ = net.build(key, x, y)
    feats = net.features(dmn, x)
    assert feats.shape == (10, 4, 4, 4)
    head = net.init_head(key, feats)
    assert "batch_stats" in head and head["batch_stats"]
    params = {"dmn": dmn, "head": head}
    ref = net.apply(params, x)
    np.testing.assert_allclose(jax.jit(net.apply)(params, x), ref, rtol=1e-5, atol=1e-5)
    # the conv DMN layer maps one image like a batch of one
    one = jax.vmap(lambda im: L.dmn_conv_apply(dmn[0]["w"], im))(jnp.asarray(x))
    np.testing.assert_allclose(one, L.dmn_conv_apply(dmn[0]["w"], jnp.asarray(x)), rtol=1e-6)


def test_bnw_normalises_per_image_column_as_keras_axis_minus1_on_channels_first():
    """``bnw``: batch-norm statistics per image column (over samples, rows, channels), which
    is Keras' ``BatchNormalization(axis=-1)`` on NCHW data; ``bn``: per channel.  Checked in
    training mode (batch statistics, scale 1, offset 0 at init) against numpy moments of the
    layer's input, in float64; the token round-trips and cannot precede a DMN layer."""
    from layerlab.dmn._spec import format_spec, parse_spec, split_spec

    x = np.asarray(jax.random.normal(jax.random.key(0), (40, 5, 6, 3)), np.float64)
    x = x * np.arange(1.0, 4.0)[None, None, None, :] + np.arange(6.0)[None, None, :, None]
    for token, axes in (("bnw", (0, 1, 3)), ("bn", (0, 1, 2))):
        net = L.make_network(f"d2,m,{token},de2", 2, L.DMNConfig())
        head = net.head
        variables = head.init(jax.random.key(1), jnp.asarray(x[:2], jnp.float32))
        # the head's first layer is the batch-norm: run it alone on x, training mode
        bn_only = type(head)(layers=head.layers[:1], padding=head.padding)
        vs = {"params": {"BatchNorm_0": variables["params"]["BatchNorm_0"]},
              "batch_stats": {"BatchNorm_0": variables["batch_stats"]["BatchNorm_0"]}}
        with jax.enable_x64(True):
            y, _ = bn_only.apply(jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64),
                                                        vs),
                                 jnp.asarray(x), train=True, mutable=["batch_stats"])
        want = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-3)
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-9, atol=1e-9)
        n_stat = x.shape[2] if token == "bnw" else x.shape[3]  # per column / per channel
        assert variables["params"]["BatchNorm_0"]["scale"].shape == (n_stat,)
        assert variables["batch_stats"]["BatchNorm_0"]["mean"].shape == (n_stat,)
    assert format_spec(parse_spec("d3,m,bnw,de2")) == "d3,m,bnw,de2"
    with pytest.raises(ValueError, match="DMN layers must come before"):
        split_spec(parse_spec("bnw,d3,de2"))
    # after a dense layer: refused by the spec grammar, and by a Head made by hand
    with pytest.raises(ValueError, match=r"parse_spec: layer 2 \(bnw\) of 'c3,de5,bnw,de2' "
                                         r"needs \[N, H, W, C\] maps but comes after the dense "
                                         r"layer 1 \(de5\)"):
        L.make_network("c3,de5,bnw,de2", 2, L.DMNConfig())
    head = L.Head(layers=(L.Layer("conv", 3), L.Layer("dense", 5), L.Layer("bn_col"),
                          L.Layer("dense", 2)))
    with pytest.raises(ValueError, match=r"bnw normalises per image column.*\[N, H, W, C\]"):
        head.init(jax.random.key(0), jnp.zeros((2, 4, 4, 1)))


def test_build_dmn_warns_on_channels_first_images():
    rng = np.random.default_rng(0)
    x = rng.random((8, 3, 6, 6)).astype(np.float32)  # NCHW by mistake
    y = np.arange(8) % 2
    prefix = L.split_spec(L.parse_spec("d2,de2"))[0]
    with pytest.warns(UserWarning, match=r"looks channels-first \(NCHW\).*transpose"):
        L.build_dmn(jax.random.key(0), prefix, x, y, 2, L.DMNConfig())
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NHWC input: no warning
        L.build_dmn(jax.random.key(0), prefix, x.transpose(0, 2, 3, 1), y, 2, L.DMNConfig())


def test_grid_patches_weights_are_float_for_integer_images():
    # 9x9 images, 3x3 blocks at offsets {0, 1}^2: 9, 6, 6 and 4 blocks (P = 25); each offset
    # weighs P / (4 * count): the uint8 images' weights were truncated to 0 and 1
    x8 = np.random.default_rng(0).integers(0, 256, (2, 9, 9, 1)).astype(np.uint8)
    p8, w8 = L.grid_patches(x8, 3)
    pf, wf = L.grid_patches(x8.astype(np.float32), 3)
    want = np.concatenate([np.full(c, 25 / (4 * c)) for c in (9, 6, 6, 4)])
    assert w8.dtype == jnp.float32
    np.testing.assert_allclose(w8, want, rtol=1e-6)
    np.testing.assert_allclose(wf, want, rtol=1e-6)
    assert float(w8.sum()) == pytest.approx(25.0)
    np.testing.assert_array_equal(np.asarray(p8, np.float32), pf)


def test_uint8_images_train_as_their_float32_values(key):
    """uint8 images: the noise, the head and so train_and_evaluate work on their float32
    values (they raised "dtype argument to `uniform` must be a float dtype")."""
    rng = np.random.default_rng(0)
    x8 = rng.integers(0, 256, (24, 6, 6, 1)).astype(np.uint8)
    xf = x8.astype(np.float32)
    noisy = L.add_input_noise(key, x8, 0.5)
    assert noisy.dtype == jnp.float32
    np.testing.assert_allclose(noisy, xf + 0.5 * np.asarray(jax.random.uniform(key, x8.shape)),
                               rtol=1e-6)
    assert L.add_input_noise(key, x8, 0.0).dtype == jnp.float32
    net = L.make_network("c2,m,de2", 2, L.DMNConfig())  # no DMN prefix: images go to the head
    np.testing.assert_array_equal(net.prepare(key, x8), xf)
    v8, vf = net.init_head(key, x8[:2]), net.init_head(key, xf[:2])
    assert v8["params"]["Conv_0"]["kernel"].dtype == jnp.float32
    np.testing.assert_array_equal(net.head_apply(v8, x8), net.head_apply(vf, xf))
    # with a DMN prefix, prepare adds the config's noise (what train_and_evaluate calls first)
    auth = L.make_network("d2,m,de2", 2, L.DMNConfig.authors())  # U[0, 1/255)
    np.testing.assert_allclose(auth.prepare(key, x8), auth.prepare(key, xf), rtol=1e-6)
    assert not np.array_equal(auth.prepare(key, x8), xf)


def test_too_many_pools_and_no_images_raise_naming_the_layer(key):
    """A pool on a 1x1 map gave an empty map (then a ZeroDivisionError in the head's init);
    N = 0 images gave "range() arg 3 must not be zero"."""
    rng = np.random.default_rng(0)
    x = rng.random((6, 8, 8, 1)).astype(np.float32)
    y = np.arange(6) % 2
    prefix = L.split_spec(L.parse_spec("d3,m,m,m,m,de2"))[0]
    with pytest.raises(ValueError, match=r"build_dmn: layer 4 \(m\) of d3,m,m,m,m: a 2x2 "
                                         r"max-pool needs maps of at least 2x2, got 1x1"):
        L.build_dmn(key, prefix, x, y, 2, jit=False)
    with pytest.raises(ValueError, match=r"build_dmn: x must hold at least one training "
                                         r"image, got shape \(0, 8, 8, 1\)"):
        L.build_dmn(key, prefix[:2], x[:0], y[:0], 2, jit=False)
    with pytest.raises(ValueError, match=r"build_dmn: layer 0 \(d3\) of d3,m: 3x3 patches with "
                                         r"VALID padding need maps of at least 3x3, got 2x2"):
        L.build_dmn(key, prefix[:2], x[:, :2, :2], y, 2, L.DMNConfig(padding="VALID"), jit=False)
    with pytest.raises(ValueError, match=r"max_pool_2x2: a 2x2 max-pool needs maps of at least "
                                         r"2x2, got 1x3"):
        L.max_pool_2x2(jnp.ones((2, 1, 3, 4)))
    params, _ = L.build_dmn(key, prefix[:2], x, y, 2, jit=False)
    with pytest.raises(ValueError, match=r"dmn_apply: layer 1 \(m\): a 2x2 max-pool needs maps "
                                         r"of at least 2x2, got 1x1"):
        L.dmn_apply(params, prefix[:2], x[:, :1, :1])
    net = L.make_network("c2,m,m,de2", 2)
    with pytest.raises(ValueError, match=r"Head: layer 2 \(m\) of the head c2,m,m,de2: a 2x2 "
                                         r"max-pool needs maps of at least 2x2, got 1x1"):
        net.init_head(key, x[:2, :2, :2])
    # the largest stack that fits still builds: 8 -> 4 -> 2 -> 1
    _, info = L.build_dmn(key, prefix[:4], x, y, 2, jit=False)
    assert info.widths[0] >= 1


def test_build_dmn_warns_on_classes_without_samples(key):
    rng = np.random.default_rng(0)
    x = rng.random((48, 4, 4, 1)).astype(np.float32)
    y = np.arange(48) % 2  # classes 0 and 1 of range(3)
    prefix = L.split_spec(L.parse_spec("d2,de3"))[0]
    cfg = L.DMNConfig(cutoff=None, chunk_size=12)
    with pytest.warns(UserWarning, match=r"build_dmn: 1 of the 3 classes have no training "
                                         r"samples among the 48 images used: class\(es\) 2\."):
        _, info = L.build_dmn(key, prefix, x, y, 3, cfg, jit=False)
    assert np.all(info.spectra[0][2] == 0) and set(info.sources[0]) <= {0, 1}
    # the random fraction (the authors') can drop a class: 12 of 48 images miss the one
    # sample of class 2 (stratified sampling keeps it); the warning comes before any layer
    y[5] = 2
    for sampling, n in (("random", 12), ("stratified", 13)):
        frac = dataclasses.replace(cfg, input_fraction=0.25, frac_sampling=sampling)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            L.build_dmn(key, (), x, y, 3, frac, jit=False)
        msgs = [str(w.message) for w in got if w.category is UserWarning]
        assert msgs == ([f"build_dmn: 1 of the 3 classes have no training samples among the "
                         f"{n} images used after input_fraction=0.25 (frac_sampling='random'):"
                         " class(es) 2. Their density matrices are zero and give no filters; "
                         "use more data, a larger input_fraction or frac_sampling="
                         "'stratified'."] if sampling == "random" else [])


def test_features_take_a_batch_and_vmap_over_x_none(key):
    """net.features is not vmap-able over images as is (docs/dmn.md said so): a dense DMN
    prefix gave a bare dot_general error; mapping x[None] gives the batch's features."""
    rng = np.random.default_rng(0)
    x = rng.random((6, 4, 4, 1)).astype(np.float32)
    net = L.make_network("d2,m,dd3,de2", 2, L.DMNConfig(standardize="sample"))
    p = [{"w": jnp.asarray(rng.normal(size=(3, 3, 1, 2)), jnp.float32)}, None,
         {"w": jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)}]  # any filters will do
    batch = net.features(p, x)
    one = jax.vmap(lambda im: net.features(p, im[None])[0])(jnp.asarray(x))
    np.testing.assert_allclose(one, batch, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"dmn_dense_apply: x must be a batch \[N, \.\.\.\] whose "
                                         r"samples flatten to D = 8 features \(w has shape "
                                         r"\(8, 3\)\), got x of shape \(2, 2\) \(2 features"):
        L.dmn_dense_apply(p[2]["w"], jnp.ones((2, 2, 2))[0])
    with pytest.raises(ValueError, match=r"dmn_dense_apply: x must be a batch.*got x of shape "
                                         r"\(8,\) \(no features per sample\)\. For one sample "
                                         r"pass x\[None\]"):
        L.dmn_dense_apply(p[2]["w"], jnp.ones(8))


def test_dmn_config_fields_are_validated_by_name():
    cfg = L.DMNConfig(var_fraction=[0.9, 0.99])  # a list: one per DMN layer, kept as a tuple
    assert cfg.var_fraction == (0.9, 0.99) and cfg == L.DMNConfig(var_fraction=(0.9, 0.99))
    assert cfg.layer_var(0) == 0.9 and cfg.layer_var(5) == 0.99 and hash(cfg)
    with pytest.raises(TypeError, match=r"DMNConfig\.var_fraction must be a number in \(0, 1\], "
                                        r"None, .*got \(0\.9, '0\.99'\) \(an entry of type str\)"):
        L.DMNConfig(var_fraction=(0.9, "0.99"))
    with pytest.raises(ValueError, match=r"DMNConfig\.var_fraction must .*got \(\)"):
        L.DMNConfig(var_fraction=[])
    with pytest.raises(ValueError, match=r"DMNConfig\.var_fraction must .*got nan"):
        L.DMNConfig(var_fraction=float("nan"))
    for bad, kind in ((2.5, "float 2.5"), (True, "bool True")):
        with pytest.raises(TypeError, match=rf"DMNConfig\.patch must be an integer, got {kind}"):
            L.DMNConfig(patch=bad)
    with pytest.raises(ValueError, match=r"DMNConfig\.input_noise must be finite .*got nan"):
        L.DMNConfig(input_noise=float("nan"))
    with pytest.raises(ValueError, match=r"DMNConfig\.input_noise must be >= 0\.0 .*got -1\.0"):
        L.DMNConfig(input_noise=-1.0)
    assert L.DMNConfig(patch=np.int64(5)).patch == 5


def test_grid_patches_and_input_noise_check_their_arguments():
    from layerlab.dmn._apply import grid_patches
    from layerlab.dmn._head import add_input_noise

    x = jnp.ones((2, 6, 6, 1))
    with pytest.raises(ValueError, match="grid_patches: k must be >= 1, got 0"):
        grid_patches(x, 0)
    with pytest.raises(ValueError, match="add_input_noise: amplitude must be >= 0"):
        add_input_noise(jax.random.key(0), x, -0.1)
    # a valid call: U[0, a) noise, within [x, x + a)
    y = add_input_noise(jax.random.key(0), x, 0.5)
    assert float(y.min()) >= 1.0 and float(y.max()) < 1.5


def test_float16_images_are_built_in_float32(key):
    """float16 passed the np.floating test and reached LAPACK ('NotImplementedError:
    Unsupported dtype float16'); now built in float32, against numpy's float64 eigh."""
    rng = np.random.default_rng(1)
    x = rng.uniform(size=(12, 8, 8, 1)).astype(np.float16)
    x[6:, :4] *= 0.2
    y = np.repeat([0, 1], 6)
    cfg = L.DMNConfig(pca="class", cutoff=0.9)
    prefix, _ = L.split_spec(L.parse_spec("d3,m,de2"))
    params, info = L.build_dmn(key, prefix, x, y, 2, cfg, jit=False)
    assert params[0]["w"].dtype == jnp.float32
    rho1 = _np_patch_density(x.astype(np.float64), y, 2, 3, "SAME")
    lam, vec = np.linalg.eigh(rho1)
    ref = D.select_filters(lam[:, ::-1], vec[:, :, ::-1], num_filters=3, cutoff=0.9)
    _same_span(np.asarray(params[0]["w"]).reshape(9, -1), ref.w)
    np.testing.assert_allclose(info.eigvals[0], ref.eigvals, rtol=1e-4)
    # the network's build goes the same way
    net = L.make_network("d3,m,de2", 2)
    p2, _ = net.build(key, x, y, jit=False)
    np.testing.assert_array_equal(np.asarray(p2[0]["w"]), np.asarray(
        L.build_dmn(key, prefix, x.astype(np.float32), y, 2, L.DMNConfig(), jit=False)[0][0]["w"]))


def test_input_noise_amplitude_is_traceable():
    # jit/vmap over the amplitude (its `amplitude == 0` shortcut was a
    # ConcretizationTypeError): the eager values; a traced 0 adds 0 * U; a traced negative
    # amplitude gives NaN (eagerly: the ValueError)
    from layerlab.dmn._head import add_input_noise

    key = jax.random.key(1)
    x = jnp.linspace(0.0, 1.0, 12).reshape(3, 4)
    amps = jnp.asarray([0.0, 0.1, 0.5])
    got = jax.vmap(lambda a: add_input_noise(key, x, a))(amps)
    for i, a in enumerate(amps):
        np.testing.assert_allclose(got[i], add_input_noise(key, x, float(a)), rtol=1e-7)
        np.testing.assert_allclose(jax.jit(lambda a: add_input_noise(key, x, a))(a),
                                   add_input_noise(key, x, float(a)), rtol=1e-7)
    assert add_input_noise(key, x, 0.0) is x  # concrete 0: x itself
    assert bool(jnp.all(jnp.isnan(jax.jit(lambda a: add_input_noise(key, x, a))(-0.1))))
    x8 = jnp.ones((2, 3), jnp.uint8)
    assert jax.jit(lambda a: add_input_noise(key, x8, a))(0.5).dtype == jnp.float32


@pytest.mark.parametrize("spec", ["d3,m,de3", "d3,de3"])
def test_non_finite_images_are_refused_eagerly_and_give_nan_features_under_jit(key, spec):
    """NaN images passed unchecked: XLA's CPU max-pool drops a NaN for batches of about 40
    and more, so a NaN image became finite (zero) features and a finite, wrong accuracy.
    Eagerly the image arrays are now refused naming the function and argument; under jit
    (no check possible) every sample with a non-finite pixel gets all-NaN features, with or
    without a pool (without one, only the features the inf pixel touches were NaN)."""
    rng = np.random.default_rng(0)
    x = rng.random((48, 8, 8, 1)).astype(np.float32)
    y = np.arange(48) % 3
    net = L.make_network(spec, 3)
    p, _ = net.build(key, x, y, jit=False)
    xv = x.copy()
    xv[:24] = np.nan
    xv[30, 2, 3, 0] = np.inf
    bad = np.zeros(48, bool)
    bad[:24] = bad[30] = True
    msg = rf"dmn_apply: x has {24 * 64 + 1} non-finite \(NaN/Inf\) entries out of 3072"
    with pytest.raises(ValueError, match=msg):
        net.features(p, xv)
    v = net.init_head(key, net.features(p, x[:2]))
    with pytest.raises(ValueError, match=msg):
        net.apply({"dmn": p, "head": v}, xv)
    with pytest.raises(ValueError, match=r"dmn_conv_apply: x has .* non-finite"):
        L.dmn_conv_apply(p[0]["w"], jnp.asarray(xv))
    with pytest.raises(ValueError, match=r"dmn_dense_apply: x has 1 non-finite"):
        L.dmn_dense_apply(jnp.ones((64, 2)), xv[30:31])
    f = np.asarray(jax.jit(net.features)(p, xv)).reshape(48, -1)
    assert np.isnan(f[bad]).all()
    np.testing.assert_array_equal(f[~bad], np.asarray(net.features(p, x[~bad])).reshape(
        f[~bad].shape))
    logits = np.asarray(jax.jit(net.apply)({"dmn": p, "head": v}, xv))
    assert np.isnan(logits[bad]).all() and np.isfinite(logits[~bad]).all()


def test_dmn_apply_and_back_project_check_params_against_layers():
    """Params not aligned with the layers gave zip()'s "argument 2 is shorter than argument
    1" or a TypeError on None; now the entry and the layer are named."""
    rng = np.random.default_rng(0)
    k = jnp.asarray(rng.normal(size=(3, 3, 2, 4)), jnp.float32)
    x = jnp.asarray(rng.normal(size=(2, 6, 6, 2)), jnp.float32)
    prefix = L.parse_spec("d4,m,de3")[:2]
    for fn, call in (("dmn_apply", lambda ps: L.dmn_apply(ps, prefix, x)),
                     ("back_project", lambda ps: L.back_project(ps, prefix))):
        with pytest.raises(ValueError, match=rf"{fn}: params has 1 entries but layers 'd4,m' "
                                             r"has 2: one per layer"):
            call([{"w": k}])
        with pytest.raises(ValueError, match=rf"{fn}: params\[0\] \(layer 0, d4\) must be "
                                             r"\{'w': kernel\}, got None"):
            call([None, {"w": k}])
        with pytest.raises(ValueError, match=rf"{fn}: params\[1\] \(layer 1, m\) must be None"):
            call([{"w": k}, {"w": k}])
        with pytest.raises(ValueError, match=rf"{fn}: params\[0\] \(layer 0, d4\): w must have "
                                             r"rank 4 \(\[k, k, C, F\]\), got shape \(3, 3, 2\)"):
            call([{"w": k[..., 0]}, None])
    np.testing.assert_array_equal(L.dmn_apply([{"w": k}, {}], prefix, x),
                                  L.dmn_apply([{"w": k}, None], prefix, x))


def test_padding_is_checked_by_name():
    """``dmn_conv_apply(padding="full")`` reached lax.conv's own error; now the function and
    argument are named.  Any case of SAME/VALID is accepted (as conv3x3 and DMNConfig)."""
    rng = np.random.default_rng(0)
    k = jnp.asarray(rng.normal(size=(3, 3, 2, 4)), jnp.float32)
    x = jnp.asarray(rng.normal(size=(2, 6, 6, 2)), jnp.float32)
    with pytest.raises(ValueError, match=r"dmn_conv_apply: padding must be 'SAME' or 'VALID' "
                                         r"\(any case\), got 'full'"):
        L.dmn_conv_apply(k, x, padding="full")
    with pytest.raises(TypeError, match=r"dmn_conv_apply: padding must be .* got int 1"):
        L.dmn_conv_apply(k, x, padding=1)
    with pytest.raises(ValueError, match=r"dmn_apply: padding must be .* got 'vaild'"):
        L.dmn_apply([{"w": k}], L.parse_spec("d4,de3")[:1], x, padding="vaild")
    with pytest.raises(ValueError, match=r"dmn_conv_apply: kernel must be \[k, k, C, F\]"):
        L.dmn_conv_apply(k[..., 0], x)
    for a, b in (("same", "SAME"), ("Valid", "VALID")):
        np.testing.assert_array_equal(L.dmn_conv_apply(k, x, padding=a),
                                      L.dmn_conv_apply(k, x, padding=b))
    assert L.dmn_conv_apply(k, x, padding="valid").shape == (2, 4, 4, 4)


def test_dmn_config_checks_types_and_options_that_would_be_ignored():
    """within_class="yes" was accepted (truthy), cutoff="0.9" raised a raw str/float
    comparison error, pca="naive" silently ignored a cutoff, and a var_fraction tuple longer
    than the DMN layers silently dropped its extra entries."""
    with pytest.raises(TypeError, match=r"DMNConfig\.within_class must be a bool; got str 'yes'"):
        L.DMNConfig(within_class="yes")
    with pytest.raises(TypeError, match=r"DMNConfig\.cutoff must be a number in \(0, 1\] or "
                                        r"None; got str '0\.9'"):
        L.DMNConfig(cutoff="0.9")
    with pytest.raises(TypeError, match=r"DMNConfig\.input_fraction must be a number in "
                                        r"\(0, 1\]; got str '1'"):
        L.DMNConfig(input_fraction="1")
    with pytest.raises(ValueError, match=r"DMNConfig\.cutoff=0\.5 has no effect with "
                                         r"DMNConfig\.pca='naive'.*cutoff=None"):
        L.DMNConfig(pca="naive", cutoff=0.5)
    with pytest.raises(ValueError, match=r"DMNConfig\.cutoff=0\.3 has no effect"):
        L.DMNConfig.authors(pca="naive", cutoff=0.3)
    # what the presets and the committed naive records carry, and the cutoff that acts
    assert L.DMNConfig.authors(pca="naive").cutoff == 0.9
    assert L.DMNConfig.paper(pca="naive", cutoff=None).cutoff is None
    assert L.DMNConfig(pca="naive_first", cutoff=0.5).cutoff == 0.5
    assert L.DMNConfig(within_class=np.bool_(True)).within_class is True

    rng = np.random.default_rng(0)
    x = rng.uniform(size=(12, 6, 6, 1)).astype(np.float32)
    y = np.arange(12) % 2
    cfg = L.DMNConfig(var_fraction=(0.9, 0.5, 0.1))
    with pytest.raises(ValueError, match=r"build_dmn: DMNConfig\.var_fraction has 3 entries "
                                         r"\(0\.9, 0\.5, 0\.1\) but the prefix 'd3,m' has 1 "
                                         r"DMN layer"):
        L.make_network("d3,m,de2", 2, cfg).build(jax.random.key(0), x, y, jit=False)
    # as many as (or fewer than) the DMN layers; a ConvNet builds nothing and ignores it
    _, info = L.make_network("d3,m,d2,de2", 2, L.DMNConfig(var_fraction=(0.9, 0.5))).build(
        jax.random.key(0), x, y, jit=False)
    assert len(info.widths) == 2
    assert L.make_network("c3,m,de2", 2, cfg).build(jax.random.key(0), x, y)[0] == []
