"""layerlab.inspect on plain-JAX models: channels-first convolutions, tuple outputs, custom
kernel layouts, and the errors a user of such a model meets (first-use audit 2026-11-30)."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import inspect


def _nchw_cnn():
    """A small NCHW / OIHW conv net, lax.conv_general_dilated's default layouts."""
    k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
    params = {"conv1": {"w": jax.random.normal(k1, (8, 3, 3, 3)) * 0.3},
              "conv2": {"w": jax.random.normal(k2, (16, 8, 3, 3)) * 0.2},
              "relu": None,
              "head": {"w": jax.random.normal(k3, (16, 4)) * 0.3}}
    x = jax.random.normal(k4, (24, 3, 10, 10))

    def conv(p, h):
        return jax.lax.conv_general_dilated(h, p["w"], (1, 1), "SAME")  # NCHW, OIHW

    layers = [("conv1", conv), ("conv2", conv), ("relu", lambda p, h: jax.nn.relu(h)),
              ("head", lambda p, h: h.mean((2, 3)) @ p["w"])]
    return params, x, layers


def test_channels_first_representations_pool_over_the_spatial_axes():
    params, x, layers = _nchw_cnn()
    model = inspect.from_layers(layers)
    h = model.features(params, x)
    cfg1 = inspect.InspectConfig(channel_axis=1)
    for conv, red in (("mean", np.mean), ("max", np.max)):
        reps = inspect.representations(model, params, x,
                                       config=inspect.InspectConfig(conv=conv, channel_axis=1))
        for name in ("conv1", "conv2", "relu"):
            want = red(np.asarray(h[name]), axis=(2, 3))  # [n, C], numpy
            np.testing.assert_allclose(reps[name], want, rtol=1e-5, atol=1e-6)
    # the same net read channels-last (the default) on NCHW maps pools the wrong axes: warned,
    # naming the layer and the fix; not with channel_axis=1, nor when flattening
    with pytest.warns(RuntimeWarning, match=r"it looks channels-first") as rec:
        inspect.representations(model, params, x)
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 3 and all("set InspectConfig(channel_axis=1)" in m for m in msgs)
    assert msgs[0].startswith("representation 'conv1' has shape (24, 8, 10, 10): it looks "
                              "channels-first"), msgs[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inspect.representations(model, params, x, config=cfg1)
        inspect.representations(model, params, x, config=inspect.InspectConfig(conv="flatten"))
    # the DGL of a layer read channels-first equals the one of its NHWC transpose read
    # channels-last (an independent route through the default layout)
    nhwc = inspect.from_features(lambda p, xx: {k: jnp.moveaxis(v, 1, -1) for k, v in
                                                model.features(p, xx).items()
                                                if v.ndim == 4})
    y = jnp.arange(24) % 4
    a = inspect.layer_report(model, params, x, y, config=inspect.InspectConfig(
        channel_axis=1, num_classes=4, diagnostics=("dgl_linear",), layers=("conv2",)))
    b = inspect.layer_report(nhwc, params, x, y, config=inspect.InspectConfig(
        num_classes=4, diagnostics=("dgl_linear",), layers=("conv2",)))
    np.testing.assert_allclose(a.layer_values["dgl_linear"], b.layer_values["dgl_linear"],
                               rtol=1e-5)


def test_channel_axis_is_ignored_for_a_model_of_known_layout():
    """A flax adapter's maps are channels-last (``Inspectable.channels_last``): one config
    with ``channel_axis=1`` serves a plain-JAX NCHW model and its channels-last twin."""
    params, x, layers = _nchw_cnn()
    model = inspect.from_layers(layers)
    twin = inspect.from_features(lambda p, xx: {k: jnp.moveaxis(v, 1, -1) if v.ndim == 4 else v
                                                for k, v in model.features(p, xx).items()})
    twin = twin._replace(channels_last=True)
    cfg = inspect.InspectConfig(channel_axis=1)
    a = inspect.representations(model, params, x, config=cfg)
    b = inspect.representations(twin, params, x, config=cfg)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-6)
    ref = inspect.make_reference(twin, params, x, config=inspect.InspectConfig(
        channel_axis=1, diagnostics=("cka",)))
    rep = inspect.layer_report(model, params, x, reference=ref, config=inspect.InspectConfig(
        channel_axis=1, diagnostics=("cka",)))
    np.testing.assert_allclose(rep.layer_values["cka"], 1.0, rtol=1e-5)


def test_channel_axis_is_checked():
    with pytest.raises(ValueError, match=r"InspectConfig: channel_axis must not be 0"):
        inspect.InspectConfig(channel_axis=0)
    with pytest.raises(TypeError, match=r"channel_axis"):
        inspect.InspectConfig(channel_axis=1.0)
    feats = inspect.from_features(lambda p, xx: {"seq": jnp.ones((4, 5, 6))})
    with pytest.raises(ValueError, match=r"channel_axis = 3 is not a feature axis of "
                                         r"representation 'seq' of shape \(4, 5, 6\)"):
        inspect.representations(feats, None, jnp.zeros((4, 2)),
                                config=inspect.InspectConfig(channel_axis=3))
    flat = inspect.representations(feats, None, jnp.zeros((4, 2)), config=inspect.InspectConfig(
        channel_axis=3, conv="flatten"))  # flattening reads any layout
    assert flat["seq"].shape == (4, 30)


def test_oihw_kernels_through_from_layers_weights():
    params, x, layers = _nchw_cnn()
    model = inspect.from_layers(layers, weights=lambda p: {
        "conv1": p["conv1"]["w"].transpose(2, 3, 1, 0),
        "conv2": p["conv2"]["w"].transpose(2, 3, 1, 0), "head": p["head"]["w"]})
    rep = inspect.layer_report(model, params, x, config=inspect.InspectConfig(
        channel_axis=1, diagnostics=("spectral_norm",)))
    assert rep.weights == ("conv1", "conv2", "head")
    for j, name in enumerate(("conv1", "conv2")):
        w = np.asarray(params[name]["w"], np.float64)  # [O, I, kh, kw]
        mat = w.reshape(w.shape[0], -1).T  # [I kh kw, O]: the map from a patch to the outputs
        s1 = np.linalg.svd(mat, compute_uv=False)[0]
        np.testing.assert_allclose(rep.weight_values["spectral_norm"][j], s1, rtol=1e-5)


def test_tuple_output_picked_with_from_features_output():
    params, x, layers = _nchw_cnn()
    plain = inspect.from_layers(layers)
    both = inspect.from_features(plain.features,
                                 apply=lambda p, xx: (plain.apply(p, xx), {"aux": 1.0}),
                                 output=0)
    cfg = inspect.InspectConfig(channel_axis=1, num_classes=4, ntk_method="jacobian",
                                diagnostics=("ntk_target_alignment",))
    y = jnp.arange(24) % 4
    a = inspect.layer_report(both, params, x, y, config=cfg)
    b = inspect.layer_report(plain, params, x, y, config=cfg)
    np.testing.assert_allclose(a.model_values["ntk_target_alignment"],
                               b.model_values["ntk_target_alignment"], rtol=1e-6)
    with pytest.raises(ValueError, match=r"from_features: output=0 picks from apply's output, "
                                         r"but no apply was given"):
        inspect.from_features(plain.features, output=0)


def test_plain_jax_mistakes_get_errors_naming_the_fix():
    params, x, layers = _nchw_cnn()
    model = inspect.from_layers(layers)
    # only reference diagnostics and no reference: not an empty report
    with pytest.raises(ValueError, match=r"reference: the diagnostics asked for, \['cka'\], "
                                         r"all compare against a reference"):
        inspect.layer_report(model, params, x,
                             config=inspect.InspectConfig(diagnostics=("cka",)))
    with pytest.raises(ValueError, match=r"all compare against a reference"):  # before fit
        inspect.monitor(model, x, config=inspect.InspectConfig(diagnostics=("cka",)))
    # a setting stored in params: the NTK cannot differentiate it; named, with the way out
    cfg = inspect.InspectConfig(channel_axis=1, num_classes=4,
                                diagnostics=("ntk_target_alignment",))
    for leaf in ("relu", np.asarray("relu"), np.str_("relu")):  # numpy strings too (an npz)
        bad = {**params, "relu": {"act": leaf}}
        with pytest.raises(TypeError, match=r"params\['relu'\]\['act'\] is not an array"):
            inspect.layer_report(model, bad, x, jnp.arange(24) % 4, config=cfg)
    # numbers, numpy scalars and a PRNG key are leaves it holds fixed or differentiates
    ok = {**params, "relu": {"k": jax.random.key(1), "t": 1.0, "i": 2, "s": np.float32(3.0)}}
    assert np.isfinite(float(inspect.layer_report(model, ok, x, jnp.arange(24) % 4, config=cfg)
                             .model_values["ntk_target_alignment"]))
    # no diagnostics at all is not "all need a reference"
    assert inspect.layer_report(model, params, x, config=inspect.InspectConfig(
        diagnostics=(), channel_axis=1)).layer_values == {}
    # samples as columns
    xm, ym = jnp.ones((5, 30)), jnp.arange(30) % 3
    mlp = inspect.from_layers([("d", lambda p, h: h @ p)])
    with pytest.raises(ValueError, match=r"x looks transposed .*x\.T\?"):
        inspect.layer_report(mlp, [jnp.ones((30, 3))], xm, ym,
                             config=inspect.InspectConfig(num_classes=3))
    # a parameter-free layer missing from dict params: the message says what to pass
    with pytest.raises(KeyError, match=r"params\['relu'\] = None"):
        model.features({k: v for k, v in params.items() if k != "relu"}, x)
