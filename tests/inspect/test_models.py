"""layerlab.inspect._models: adapters give the right layer names, shapes and values."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from layerlab import gnrev, inspect

N = 16
CFG = inspect.InspectConfig(diagnostics=("dgl_linear", "effective_rank", "spectral_norm"),
                            num_classes=3)


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Conv(4, (3, 3))(x))
        self.sow("intermediates", "conv_relu", h)
        h = nn.Conv(6, (3, 3), strides=(2, 2))(h)
        h = nn.relu(h).reshape(h.shape[0], -1)
        return nn.Dense(3)(h)


class NNXMLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(5, 8, rngs=rngs)
        self.l2 = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.l1(x))
        self.sow(nnx.Intermediate, "h1", h)
        return self.l2(h)


def _labels():
    return jnp.arange(N) % 3


def _report(model, params, x, y=None, *, config):
    """inspect.layer_report under jit: one program (eager, each op compiles apart)."""
    return jax.jit(lambda p: inspect.layer_report(model, p, x, y, config=config))(params)


def test_linen_cnn_names_shapes_values():
    x = jax.random.normal(jax.random.key(0), (N, 6, 6, 1))
    model = CNN()
    variables = model.init(jax.random.key(1), x)
    insp = inspect.from_linen(model)
    feats = insp.features(variables, x)
    assert list(feats) == ["Conv_0", "conv_relu", "Conv_1", "Dense_0"]
    assert feats["Conv_0"].shape == (N, 6, 6, 4) and feats["Conv_1"].shape == (N, 3, 3, 6)
    # the captured values are the layers' outputs: relu(Conv_0) is the sown value, Dense_0 the
    # model output, and Conv_0 is the convolution computed directly with lax
    np.testing.assert_allclose(feats["conv_relu"], jax.nn.relu(feats["Conv_0"]), atol=1e-6)
    np.testing.assert_allclose(feats["Dense_0"], model.apply(variables, x), atol=1e-5)
    k = variables["params"]["Conv_0"]
    direct = jax.lax.conv_general_dilated(x, k["kernel"], (1, 1), "SAME",
                                          dimension_numbers=("NHWC", "HWIO", "NHWC"))
    np.testing.assert_allclose(feats["Conv_0"], direct + k["bias"].reshape(1, 1, 1, 4),
                               atol=1e-5)
    reps = inspect.representations(insp, variables, x, config=inspect.InspectConfig(conv="mean"))
    assert {k: v.shape for k, v in reps.items()} == {
        "Conv_0": (N, 4), "conv_relu": (N, 4), "Conv_1": (N, 6), "Dense_0": (N, 3)}
    np.testing.assert_allclose(reps["Conv_1"], feats["Conv_1"].mean((1, 2)), atol=1e-6)
    flat = inspect.representations(insp, variables, x,
                                   config=inspect.InspectConfig(conv="flatten"))
    assert flat["Conv_1"].shape == (N, 54)
    # sown values only; a bare params tree works too
    only = inspect.from_linen(model, capture=False)
    assert list(only.features(variables["params"], x)) == ["conv_relu"]
    rep = jax.jit(lambda v: inspect.layer_report(insp, v, x, _labels(), config=CFG))(variables)
    assert rep.layers == ("Conv_0", "conv_relu", "Conv_1", "Dense_0")
    assert rep.weights == ("Conv_0/kernel", "Conv_1/kernel", "Dense_0/kernel")
    assert rep.layer_values["dgl_linear"].shape == (4,)
    assert rep.weight_values["spectral_norm"].shape == (3,)
    s = np.linalg.svd(np.asarray(variables["params"]["Conv_1"]["kernel"]).reshape(36, 6),
                      compute_uv=False)
    np.testing.assert_allclose(rep.weight_values["spectral_norm"][1], s[0], rtol=1e-5)


def test_nnx_mlp_names_shapes_values():
    model = NNXMLP(nnx.Rngs(0))
    _, state = nnx.split(model)
    x = jax.random.normal(jax.random.key(2), (N, 5))
    insp = inspect.from_nnx(model)
    feats = insp.features(state, x)
    assert sorted(feats) == ["h1", "l1", "l2"]
    W1, b1 = model.l1.kernel.get_value(), model.l1.bias.get_value()
    np.testing.assert_allclose(feats["l1"], x @ W1 + b1.reshape(1, -1), atol=1e-5)
    np.testing.assert_allclose(feats["h1"], jax.nn.relu(feats["l1"]), atol=1e-6)
    W2, b2 = model.l2.kernel.get_value(), model.l2.bias.get_value()
    np.testing.assert_allclose(feats["l2"], feats["h1"] @ W2 + b2.reshape(1, -1), atol=1e-5)
    np.testing.assert_allclose(insp.apply(state, x), feats["l2"], atol=1e-6)
    assert sorted(inspect.from_nnx(model, capture=False).features(state, x)) == ["h1"]
    rep = jax.jit(lambda s: inspect.layer_report(insp, s, x, _labels(), config=CFG))(state)
    assert sorted(rep.layers) == ["h1", "l1", "l2"]
    assert rep.weights == ("l1/kernel", "l2/kernel")
    assert rep.layer_values["effective_rank"].shape == (3,)
    # the NTK diagnostics run through the merged module's outputs
    cfg = inspect.InspectConfig(diagnostics=("ntk_target_alignment",), num_classes=3,
                                ntk_method="jacobian")
    rep = jax.jit(lambda s: inspect.layer_report(insp, s, x, _labels(), config=cfg))(state)
    assert 0.0 < float(rep.model_values["ntk_target_alignment"]) <= 1.0


def test_layers_and_revmlp_adapters():
    W = [jax.random.normal(jax.random.key(i), (4, 4)) for i in range(3)]
    seq = inspect.from_layers([("a", lambda w, h: jnp.tanh(h @ w)),
                               ("b", lambda w, h: jnp.tanh(h @ w)), ("out", lambda w, h: h @ w)])
    x = jax.random.normal(jax.random.key(5), (N, 4))
    f = seq.features(W, x)
    assert list(f) == ["a", "b", "out"]
    np.testing.assert_allclose(f["b"], jnp.tanh(jnp.tanh(x @ W[0]) @ W[1]), atol=1e-6)
    np.testing.assert_allclose(seq.apply(dict(zip("a b out".split(), W)), x), f["out"],
                               atol=1e-6)
    with pytest.raises(ValueError, match="params has 2 entries for 3 layers"):
        seq.features(W[:2], x)
    params, frozen = gnrev.revmlp_init(jax.random.key(6), 4, 3, bottleneck=6)
    rev = inspect.from_revmlp(frozen)
    f = rev.features(params, x)
    assert list(f) == ["block_1", "block_2", "block_3"]
    np.testing.assert_allclose(f["block_3"], gnrev.revmlp_apply(params, frozen, x), atol=1e-5)
    ws = rev.weights(params)
    assert list(ws) == [f"block_{i}/{k}" for i in (1, 2, 3) for k in ("w1", "w2")]
    np.testing.assert_array_equal(ws["block_2/w2"], params["w2"][1])


class NNXBNDrop(nnx.Module):
    """Call order z_first -> post (sown) -> a_second: not the alphabetical order."""

    def __init__(self, rngs):
        self.z_first = nnx.Linear(5, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.a_second = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x):
        h = jax.nn.relu(self.bn(self.z_first(x)))
        self.sow(nnx.Intermediate, "post", h)
        return self.a_second(self.drop(h))


class Blk(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(4, 4, rngs=rngs)

    def __call__(self, x):
        return jnp.tanh(self.lin(x))


class Twice(nnx.Module):
    def __init__(self, rngs):
        self.inp = nnx.Linear(5, 4, rngs=rngs)
        self.blk = Blk(rngs)

    def __call__(self, x):
        return self.blk(self.blk(self.inp(x)))


def _jacobian(apply, theta, x):
    """Brute force: the Jacobian [n, k, P] of the outputs w.r.t. the flattened theta."""
    import jax.flatten_util

    flat, unravel = jax.flatten_util.ravel_pytree(theta)
    J = jax.jit(jax.jacobian(lambda f: apply(unravel(f), x)))(flat)  # [n, k, P]
    return np.asarray(J)


def _target_alignment(J, labels):
    """A(Theta, yy^T) with Theta = sum_k J_k J_k^T / k, both centred (the report's rule)."""
    K = np.einsum("akp,bkp->ab", J, J)
    y = np.asarray(jax.nn.one_hot(labels, 3) - 1 / 3)
    Kc = K - K.mean(0) - K.mean(1)[:, None] + K.mean()
    Y = y @ y.T
    return (Kc * Y).sum() / np.linalg.norm(Kc) / np.linalg.norm(Y)


def test_nnx_layers_in_call_order_state_untouched_and_ntk_over_params_only():
    model = NNXBNDrop(nnx.Rngs(0))
    model.eval()  # the mode is read when the adapter is built
    insp = inspect.from_nnx(model)
    _, state = nnx.split(model)
    x = jax.random.normal(jax.random.key(1), (N, 5))
    feats = insp.features(state, x)
    assert list(feats) == ["z_first", "post", "a_second"]  # call order, not alphabetical
    mean0 = np.asarray(model.bn.mean.get_value())
    # a train-mode adapter (BatchNorm updates its statistics, Dropout draws): the caller's
    # model and state are not updated, and two eager calls agree
    model_t = NNXBNDrop(nnx.Rngs(0))
    model_t.train()
    insp_t = inspect.from_nnx(model_t)
    _, st_t = nnx.split(model_t)
    a = insp_t.features(st_t, x)
    b = insp_t.features(st_t, x)
    np.testing.assert_array_equal(model_t.bn.mean.get_value(), mean0)
    np.testing.assert_array_equal(st_t["bn"]["mean"].get_value(), mean0)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # the NTK differentiates the nnx.Param leaves only (BatchNorm statistics and the dropout
    # RNG counter held fixed): equal to a brute-force Jacobian over the Params
    cfg = inspect.InspectConfig(diagnostics=("ntk_target_alignment",), num_classes=3,
                                ntk_method="jacobian", ntk_samples=6)
    rep = _report(insp, state, x, _labels(), config=cfg)
    theta, rest = nnx.split_state(state, nnx.Param, ...)
    J = _jacobian(lambda t, xx: insp.apply(nnx.merge_state(t, rest), xx), theta, x[:6])
    np.testing.assert_allclose(float(rep.model_values["ntk_target_alignment"]),
                               _target_alignment(J, _labels()[:6]), rtol=1e-4)


def test_nnx_module_called_twice_is_not_a_layer():
    model = Twice(nnx.Rngs(0))
    _, state = nnx.split(model)
    x = jax.random.normal(jax.random.key(2), (N, 5))
    feats = inspect.from_nnx(model).features(state, x)
    assert list(feats) == ["inp", "blk/lin/0", "blk/lin/1"]  # the container's outputs dropped
    h0 = feats["inp"]
    np.testing.assert_allclose(feats["blk/lin/1"], model.blk.lin(jnp.tanh(model.blk.lin(h0))),
                               atol=1e-5)


def test_linen_ntk_holds_batch_stats_fixed():
    class BNNet(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.BatchNorm(use_running_average=True)(nn.Dense(6)(x))
            return nn.Dense(3)(jax.nn.relu(h))

    x = jax.random.normal(jax.random.key(3), (N, 5))
    model = BNNet()
    variables = jax.jit(model.init)(jax.random.key(4), x)
    variables = {**variables, "batch_stats": jax.tree.map(
        lambda v: v + 0.3, variables["batch_stats"])}  # non-trivial running statistics
    insp = inspect.from_linen(model)
    cfg = inspect.InspectConfig(diagnostics=("ntk_target_alignment",), num_classes=3,
                                ntk_method="jacobian", ntk_samples=6)
    got = float(_report(insp, variables, x, _labels(),
                        config=cfg).model_values["ntk_target_alignment"])
    J = _jacobian(lambda p, xx: model.apply({**variables, "params": p}, xx),
                  variables["params"], x[:6])
    np.testing.assert_allclose(got, _target_alignment(J, _labels()[:6]), rtol=1e-4)


def test_linen_train_mode_with_mutable_batch_stats():
    """apply_kwargs={"train": True, "mutable": ["batch_stats"]}: BatchNorm normalises with the
    batch's own statistics, the updates are discarded, the caller's variables unchanged."""
    class BNNet(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            h = nn.Dense(6)(x)
            self.sow("intermediates", "pre", h)
            h = nn.BatchNorm(use_running_average=not train, epsilon=1e-5)(h)
            self.sow("intermediates", "bn", h)
            return nn.Dense(3)(jax.nn.relu(h))

    x = jax.random.normal(jax.random.key(3), (N, 5))
    model = BNNet()
    variables = model.init(jax.random.key(4), x, train=False)
    before = jax.tree.map(np.asarray, variables)
    insp = inspect.from_linen(model, apply_kwargs={"train": True, "mutable": ["batch_stats"]})
    f = insp.features(variables, x)
    pre = np.asarray(f["pre"])
    want = (pre - pre.mean(0)) / np.sqrt(pre.var(0) + 1e-5)  # scale 1, bias 0 at init
    np.testing.assert_allclose(f["bn"], want, atol=1e-4)
    assert insp.apply(variables, x).shape == (N, 3)
    jax.tree.map(np.testing.assert_array_equal, before, jax.tree.map(np.asarray, variables))
    with pytest.raises(ValueError, match="without 'intermediates'"):
        inspect.from_linen(model, apply_kwargs={"mutable": ["intermediates"]})


def test_nnx_model_with_python_control_flow_still_reports_eagerly():
    """Call order is read off a traced program; a model that branches on values in Python
    cannot be traced, so it keeps NNX's order instead of failing (eager reports worked before
    the ordering existed)."""
    class Branchy(nnx.Module):
        def __init__(self, rngs):
            self.z = nnx.Linear(5, 4, rngs=rngs)
            self.a = nnx.Linear(4, 3, rngs=rngs)

        def __call__(self, x):
            h = self.z(x)
            if float(jnp.abs(h).max()) > 1e6:  # Python branch on a value
                h = h / 1e6
            return self.a(h)

    model = Branchy(nnx.Rngs(0))
    _, state = nnx.split(model)
    x = jax.random.normal(jax.random.key(0), (N, 5))
    feats = inspect.from_nnx(model).features(state, x)
    assert sorted(feats) == ["a", "z"]
    np.testing.assert_allclose(feats["a"], model(x), atol=1e-5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # flax: sow() outside nnx.capture
def test_nnx_state_after_a_call_that_sowed_and_a_module_passed_as_params():
    x = jax.random.normal(jax.random.key(0), (5, 5))
    m = NNXMLP(nnx.Rngs(0))  # sows "h1"
    before = inspect.from_nnx(m)
    want = before.features(nnx.state(m), x)
    m(x)  # sows "h" into the module: its state has one leaf more
    after = inspect.from_nnx(m)
    for ad in (before, after):
        got = ad.features(nnx.state(m), x)
        assert list(got) == ["l1", "h1", "l2"]
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
        np.testing.assert_allclose(ad.apply(nnx.state(m), x), m.l2(jax.nn.relu(m.l1(x))),
                                   rtol=1e-6)
    with pytest.raises(TypeError, match=r"params: .*not the module: pass nnx.state\(model\)"):
        before.features(m, x)
    pure = nnx.state(NNXMLP(nnx.Rngs(0))).to_pure_dict()  # a pure dict (e.g. orbax) still works
    got = jax.jit(before.features)(pure, x)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    theta, rebuild = before.trainable(pure)  # typed through the graph: the NTK's Params
    assert len(jax.tree.leaves(theta)) == 4
    np.testing.assert_allclose(before.apply(rebuild(theta), x), before.apply(pure, x), rtol=1e-6)


# ----------------------------------------------------------------------------- audit fixes
def test_tuple_and_dict_outputs_need_an_output_selector():
    """A model returning (logits, aux) or a dict: a ValueError naming model.apply, what the
    NTK needs and what came; with output= (index, key or callable) the NTK uses that array."""
    class TwoLinen(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(8)(x))
            return nn.Dense(3)(h), nn.Dense(2)(h)

    class DictNNX(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(5, 8, rngs=rngs)
            self.b = nnx.Linear(8, 3, rngs=rngs)

        def __call__(self, x):
            h = jax.nn.relu(self.a(x))
            return {"logits": self.b(h), "h": h}

    x = jax.random.normal(jax.random.key(0), (N, 5))
    cfg = inspect.InspectConfig(diagnostics=("ntk_target_alignment",), num_classes=3,
                                ntk_method="jacobian", ntk_samples=6)
    lin = TwoLinen()
    v = lin.init(jax.random.key(1), x)
    with pytest.raises(ValueError, match=r"model.apply\(params, x\) must return .* one \[n, k\]"
                       r".*returned a tuple \(\[6, 3\], \[6, 2\]\).*output="):
        inspect.layer_report(inspect.from_linen(lin), v, x, _labels(), config=cfg)
    m = DictNNX(nnx.Rngs(0))
    st = nnx.state(m)
    with pytest.raises(ValueError, match=r"returned a dict"):
        inspect.layer_report(inspect.from_nnx(m), st, x, _labels(), config=cfg)

    def logits_linen(p, xx):
        return lin.apply({"params": p}, xx)[0]

    J = _jacobian(logits_linen, v["params"], x[:6])
    want = _target_alignment(J, _labels()[:6])
    for sel in (0, lambda out: out[0]):
        insp = inspect.from_linen(lin, output=sel)
        np.testing.assert_allclose(insp.apply(v, x), lin.apply(v, x)[0], rtol=1e-6)
        rep = _report(insp, v, x, _labels(), config=cfg)
        np.testing.assert_allclose(float(rep.model_values["ntk_target_alignment"]), want,
                                   rtol=1e-4)
    insp = inspect.from_nnx(m, output="logits")
    theta, rest = nnx.split_state(st, nnx.Param, ...)
    J = _jacobian(lambda t, xx: insp.apply(nnx.merge_state(t, rest), xx), theta, x[:6])
    rep = _report(insp, st, x, _labels(), config=cfg)
    np.testing.assert_allclose(float(rep.model_values["ntk_target_alignment"]),
                               _target_alignment(J, _labels()[:6]), rtol=1e-4)
    with pytest.raises(ValueError, match=r"from_nnx: output='logit' selects nothing"):
        inspect.from_nnx(m, output="logit").apply(st, x)
    with pytest.raises(TypeError, match=r"from_linen: output must be"):
        inspect.from_linen(lin, output=1.5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # flax: sow() outside nnx.capture
def test_nnx_weights_are_the_params_only():
    x = jax.random.normal(jax.random.key(0), (N, 5))
    m = NNXMLP(nnx.Rngs(0))
    insp = inspect.from_nnx(m)
    m(x)  # sows h1 into the model: its state holds one entry more
    st = nnx.state(m)
    ws = insp.weights(st)
    assert list(ws) == ["l1/kernel", "l2/kernel"]  # not the sown 'h1/0'
    np.testing.assert_array_equal(ws["l1/kernel"], m.l1.kernel.get_value())
    cfg = inspect.InspectConfig(diagnostics=("effective_rank", "spectral_norm"))
    rep = _report(insp, st, x, config=cfg)
    assert rep.weights == ("l1/kernel", "l2/kernel")
    s = np.linalg.svd(np.asarray(m.l2.kernel.get_value()), compute_uv=False)
    np.testing.assert_allclose(rep.weight_values["spectral_norm"][1], s[0], rtol=1e-5)
    assert list(inspect.from_nnx(m).weights(st)) == list(ws)  # adapter built after the call


def test_linen_weights_are_the_params_collection_only():
    class SN(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.relu(nn.SpectralNorm(nn.Dense(16))(x, update_stats=train))
            return nn.Dense(3)(h)

    x = jax.random.normal(jax.random.key(0), (N, 5))
    model = SN()
    v = model.init(jax.random.key(1), x, train=True)
    assert "batch_stats" in v  # SpectralNorm's u and sigma
    cfg = inspect.InspectConfig(diagnostics=("spectral_norm",))
    rep = _report(inspect.from_linen(model), v, x, config=cfg)
    assert rep.weights == ("Dense_0/kernel", "Dense_1/kernel")
    assert list(inspect.named_weights(v)) == ["Dense_0/kernel", "Dense_1/kernel"]
    s = np.linalg.svd(np.asarray(v["params"]["Dense_1"]["kernel"]), compute_uv=False)
    np.testing.assert_allclose(rep.weight_values["spectral_norm"][1], s[0], rtol=1e-5)


def test_linen_block_reused_twice_in_call_order():
    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.relu(nn.Dense(8, name="b")(nn.relu(nn.Dense(8, name="a")(x))))

    class Rec(nn.Module):
        @nn.compact
        def __call__(self, x):
            blk = Block(name="blk")
            h = blk(nn.Dense(8, name="inp")(x))
            h = blk(nn.Dense(8, name="mid")(h))
            return nn.Dense(3, name="out")(h)

    x = jax.random.normal(jax.random.key(0), (N, 5))
    model = Rec()
    v = model.init(jax.random.key(1), x)
    insp = inspect.from_linen(model)
    order = ["inp", "blk/a/0", "blk/b/0", "mid", "blk/a/1", "blk/b/1", "out"]
    f = insp.features(v, x)
    assert list(f) == order
    cfg = inspect.InspectConfig(diagnostics=("stable_rank",))
    assert jax.jit(lambda v: inspect.layer_report(insp, v, x, config=cfg))(v).layers == \
        tuple(order)
    a = v["params"]["blk"]["a"]  # the second call of blk/a runs on mid's output
    np.testing.assert_allclose(f["blk/a/1"], f["mid"] @ a["kernel"] + a["bias"][None], rtol=1e-5,
                               atol=1e-6)


def _linear_maps_s1(kernels):
    return {k: np.linalg.svd(np.asarray(w, np.float64), compute_uv=False)[0]
            for k, w in kernels.items()}


@pytest.mark.parametrize("use_bias", [True, False])
def test_attention_kernels_read_as_their_linear_maps(use_bias):
    """Query/key/value kernels [d, heads, head_dim] are the maps [d, heads*head_dim]; the
    output kernel [heads, head_dim, d] is [heads*head_dim, d]; [heads, head_dim] biases are
    not weights.  Linen (from the bias, or the module's features) and NNX (LinearGeneral)."""
    class T(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.Dense(16)(x)
            h = h + nn.MultiHeadDotProductAttention(num_heads=4, use_bias=use_bias)(h)
            return nn.Dense(3)(h.mean(1))

    x = jax.random.normal(jax.random.key(0), (8, 6, 5))
    model = T()
    v = jax.jit(model.init)(jax.random.key(1), x)
    att = v["params"]["MultiHeadDotProductAttention_0"]
    want = {"Dense_0/kernel": v["params"]["Dense_0"]["kernel"],
            "Dense_1/kernel": v["params"]["Dense_1"]["kernel"]}
    for k in ("query", "key", "value"):
        want[f"MultiHeadDotProductAttention_0/{k}/kernel"] = np.reshape(att[k]["kernel"], (16, 16))
    want["MultiHeadDotProductAttention_0/out/kernel"] = np.reshape(att["out"]["kernel"], (16, 16))
    cfg = inspect.InspectConfig(diagnostics=("spectral_norm",))
    rep = _report(inspect.from_linen(model), v, x, config=cfg)
    assert sorted(rep.weights) == sorted(want)
    got = dict(zip(rep.weights, np.asarray(rep.weight_values["spectral_norm"])))
    s1 = _linear_maps_s1(want)
    for k in want:
        np.testing.assert_allclose(got[k], s1[k], rtol=1e-5, err_msg=k)
    if use_bias:  # the auditor's numbers: the query map's s_1, not that of the [64, 4] reading
        q = np.asarray(att["query"]["kernel"])
        assert abs(got["MultiHeadDotProductAttention_0/query/kernel"]
                   - np.linalg.svd(q.reshape(64, 4), compute_uv=False)[0]) > 1e-3

    class NT(nnx.Module):
        def __init__(self, rngs):
            self.att = nnx.MultiHeadAttention(4, 16, use_bias=use_bias, decode=False,
                                              rngs=rngs)

        def __call__(self, x):
            return self.att(x)

    nm = NT(nnx.Rngs(0))
    ws = inspect.from_nnx(nm).weights(nnx.state(nm))
    assert sorted(ws) == [f"att/{k}/kernel" for k in ("key", "out", "query", "value")]
    for k in ("query", "key", "value"):
        np.testing.assert_array_equal(
            ws[f"att/{k}/kernel"], getattr(nm.att, k).kernel.get_value().reshape(16, 16))
    np.testing.assert_array_equal(ws["att/out/kernel"],
                                  nm.att.out.kernel.get_value().reshape(16, 16))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # flax: sow() outside nnx.capture
def test_nnx_pure_dict_of_a_model_that_sowed():
    """nnx.to_pure_dict(nnx.state(m)) after m sowed holds the sown values: dropped (they are
    not in the graph definition), for adapters built before and after the call."""
    x = jax.random.normal(jax.random.key(0), (N, 5))
    m = NNXMLP(nnx.Rngs(0))
    before = inspect.from_nnx(m)
    want = before.features(nnx.state(m), x)
    m(x)
    pure = nnx.to_pure_dict(nnx.state(m))
    assert "h1" in pure
    cfg = inspect.InspectConfig(diagnostics=("effective_rank", "spectral_norm",
                                             "ntk_target_alignment"), num_classes=3,
                                ntk_method="jacobian", ntk_samples=4)
    for ad in (before, inspect.from_nnx(m)):
        rep = _report(ad, pure, x, _labels(), config=cfg)
        assert rep.layers == ("l1", "h1", "l2") and rep.weights == ("l1/kernel", "l2/kernel")
        got = jax.jit(ad.features)(pure, x)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    np.testing.assert_allclose(before.apply(pure, x), m.l2(jax.nn.relu(m.l1(x))), rtol=1e-6)


def test_sown_values_are_kept_whatever_their_name():
    """A value sown as "output" (linen, NNX) or under a sub-module's name (NNX) is reported
    with its value (both were dropped silently, as the model's own output / a container's);
    the model's own output is still no layer.  NNX capture=True: the sub-module's layer
    outputs that nnx.capture overwrites are named in a warning."""
    x = jax.random.normal(jax.random.key(0), (N, 5))

    class LinenOut(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.relu(nn.Dense(8)(x))
            self.sow("intermediates", "output", h)
            return nn.Dense(3)(h)

    lm = LinenOut()
    v = lm.init(jax.random.key(1), x)
    for capture in (True, False):
        f = inspect.from_linen(lm, capture=capture).features(v, x)
        assert list(f) == (["Dense_0", "output", "Dense_1"] if capture else ["output"])
        d = v["params"]["Dense_0"]
        np.testing.assert_allclose(f["output"], jax.nn.relu(x @ d["kernel"] + d["bias"][None]),
                                   rtol=1e-5, atol=1e-6)

    class Blk2(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(5, 5, rngs=rngs)

        def __call__(self, h):
            return jax.nn.relu(self.lin(h))

    class Shadow(nnx.Module):
        def __init__(self, rngs):
            self.block = Blk2(rngs)
            self.head = nnx.Linear(5, 3, rngs=rngs)

        def __call__(self, x):
            h = self.block(x)
            self.sow(nnx.Intermediate, "block", h)  # the sub-module's own name
            o = self.head(h)
            self.sow(nnx.Intermediate, "output", o)
            return o

    m = Shadow(nnx.Rngs(0))
    st = nnx.state(m)
    h = jax.nn.relu(x @ m.block.lin.kernel.get_value() + m.block.lin.bias.get_value()[None])
    o = h @ m.head.kernel.get_value() + m.head.bias.get_value()[None]
    with pytest.warns(UserWarning, match=r"the value sown as 'block' has the name of "
                      r"sub-module 'block'.*layers \['block/lin'\] are not reported"):
        f = inspect.from_nnx(m).features(st, x)
    assert list(f) == ["block", "head", "output"]
    g = inspect.from_nnx(m, capture=False).features(st, x)
    assert list(g) == ["block", "output"]
    for feats in (f, g):
        np.testing.assert_allclose(feats["block"], h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(feats["output"], o, rtol=1e-5, atol=1e-6)


class ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, h, _):
        h = nn.relu(nn.Dense(6)(h))
        self.sow("intermediates", "blk", h)
        return h, None


class Scanned(nn.Module):
    length: int = 3

    @nn.compact
    def __call__(self, x):
        blocks = nn.scan(ScanBlock, variable_axes={"params": 0, "intermediates": 0},
                         split_rngs={"params": True}, length=self.length)
        h, _ = blocks(name="blocks")(x, None)
        return nn.Dense(3)(h)


@pytest.mark.parametrize("length", [3, N])  # N: the block axis as long as the sample axis
def test_linen_scan_blocks_split_per_block(length):
    """nn.scan blocks: the [L, n, d] representations are L layers blocks/<name>/i, block by
    block, each equal to the block computed directly; the stacked [L, a, b] kernel is L
    kernels blocks/Dense_0/kernel/i (was one [L a, b] matrix: s_1 2.648 for L = 3, where the
    blocks have 2.069, 1.793, 1.622).  With L = n the layer axis was taken as samples."""
    x = jax.random.normal(jax.random.key(0), (N, 6))
    model = Scanned(length)
    v = model.init(jax.random.key(1), x)
    insp = inspect.from_linen(model)
    f = insp.features(v, x)
    names = [f"blocks/{k}/{i}" for i in range(length) for k in ("Dense_0", "blk")]
    assert list(f) == names + ["Dense_0"]
    K = np.asarray(v["params"]["blocks"]["Dense_0"]["kernel"], np.float64)
    B = np.asarray(v["params"]["blocks"]["Dense_0"]["bias"], np.float64)
    h = np.asarray(x, np.float64)
    for i in range(length):  # block by block, in float64
        z = h @ K[i] + B[i]
        h = np.maximum(z, 0.0)
        np.testing.assert_allclose(f[f"blocks/Dense_0/{i}"], z, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(f[f"blocks/blk/{i}"], h, rtol=1e-4, atol=1e-5)
    cfg = inspect.InspectConfig(num_classes=3, diagnostics=("dgl_linear", "spectral_norm"))
    rep = _report(insp, v, x, _labels(), config=cfg)
    assert rep.layers == (*names, "Dense_0")
    assert rep.weights == ("Dense_0/kernel", *[f"blocks/Dense_0/kernel/{i}"
                                               for i in range(length)])
    s1 = [np.linalg.svd(K[i], compute_uv=False)[0] for i in range(length)]
    np.testing.assert_allclose(rep.weight_values["spectral_norm"][1:], s1, rtol=1e-5)
    if length == 3:
        np.testing.assert_allclose(s1, [2.069, 1.793, 1.622], atol=1e-3)
        assert abs(np.linalg.svd(K.reshape(18, 6), compute_uv=False)[0] - 2.648) < 1e-3


class NNXBlock(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(6, 6, rngs=rngs)

    def __call__(self, h):
        h = jax.nn.relu(self.lin(h))
        self.sow(nnx.Intermediate, "hb", h)
        return h


class NNXScanned(nnx.Module):
    def __init__(self, rngs, length=3):
        @nnx.split_rngs(splits=length)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return NNXBlock(rngs)

        self.blocks = make(rngs)
        self.head = nnx.Linear(6, 3, rngs=rngs)

    def __call__(self, x):
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def body(h, blk):
            return blk(h)

        return self.head(body(x, self.blocks))


def test_nnx_vmap_scan_blocks_split_per_block():
    """nnx.vmap-made blocks run by nnx.scan: representations and kernels per block."""
    x = jax.random.normal(jax.random.key(0), (N, 6))
    m = NNXScanned(nnx.Rngs(0))
    st = nnx.state(m)
    insp = inspect.from_nnx(m)
    f = insp.features(st, x)
    assert sorted(f) == sorted([f"blocks/{k}/{i}" for i in range(3) for k in ("hb", "lin")]
                               + ["head"])
    K = np.asarray(m.blocks.lin.kernel.get_value(), np.float64)
    B = np.asarray(m.blocks.lin.bias.get_value(), np.float64)
    assert K.shape == (3, 6, 6)
    h = np.asarray(x, np.float64)
    for i in range(3):
        z = h @ K[i] + B[i]
        h = np.maximum(z, 0.0)
        np.testing.assert_allclose(f[f"blocks/lin/{i}"], z, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(f[f"blocks/hb/{i}"], h, rtol=1e-4, atol=1e-5)
    cfg = inspect.InspectConfig(diagnostics=("spectral_norm",))
    rep = _report(insp, st, x, config=cfg)
    assert rep.weights == ("blocks/lin/kernel/0", "blocks/lin/kernel/1", "blocks/lin/kernel/2",
                           "head/kernel")
    np.testing.assert_allclose(rep.weight_values["spectral_norm"][:3],
                               [np.linalg.svd(K[i], compute_uv=False)[0] for i in range(3)],
                               rtol=1e-5)


def test_unrecognised_stacked_axis_error_names_it():
    x = jax.random.normal(jax.random.key(0), (N, 6))
    stacked = inspect.from_features(lambda p, xx: {"blocks/h": jnp.stack([xx, xx, xx])})
    with pytest.raises(ValueError, match=r"representation 'blocks/h' has shape \(3, 16, 6\).*"
                       r"leading axis of size 3 may be a stacked layer axis"):
        inspect.layer_report(stacked, None, x,
                             config=inspect.InspectConfig(diagnostics=("stable_rank",)))


def test_from_features_stacked_kernels_are_split_per_layer():
    """Plain params holding three layers stacked, kernel [3, 6, 6] and bias [3, 6]: the
    default weights read them as one [18, 6] map (s_1 15.62 where the layers have 3.86,
    9.71, 13.90), and a custom weights= list of kernels failed in jnp.stack.  The bias shows
    the stack, so the kernel is split into blocks/kernel/i as the nn.scan path does; a list
    from weights= is reported as name/i; a bias-less stack is still one map (documented)."""
    L, d = 3, 6
    k = jax.random.split(jax.random.key(0), 3)
    K = jax.random.normal(k[0], (L, d, d)) * jnp.array([1.0, 2.0, 3.0])[:, None, None]
    params = {"blocks": {"kernel": K, "bias": jnp.zeros((L, d))},
              "head": {"kernel": jax.random.normal(k[1], (d, 2)), "bias": jnp.zeros(2)}}

    def feats(p, x):
        h, out = x, {}
        for i in range(L):
            h = jax.nn.relu(h @ p["blocks"]["kernel"][i] + p["blocks"]["bias"][i][None, :])
            out[f"blocks/{i}"] = h
        out["head"] = h @ p["head"]["kernel"]
        return out

    x = jax.random.normal(k[2], (N, d))
    cfg = inspect.InspectConfig(diagnostics=("spectral_norm",))
    s1 = [np.linalg.svd(np.asarray(K[i], np.float64), compute_uv=False)[0] for i in range(L)]
    s1_head = np.linalg.svd(np.asarray(params["head"]["kernel"]), compute_uv=False)[0]
    names = tuple(f"blocks/kernel/{i}" for i in range(L)) + ("head/kernel",)
    for model in (inspect.from_features(feats),
                  inspect.from_features(feats, weights=lambda p: {
                      "blocks/kernel": list(p["blocks"]["kernel"]),
                      "head/kernel": p["head"]["kernel"]})):
        rep = _report(model, params, x, config=cfg)
        assert rep.weights == names
        np.testing.assert_allclose(rep.weight_values["spectral_norm"], [*s1, s1_head],
                                   rtol=1e-5)
    np.testing.assert_allclose(s1, [3.857, 9.708, 13.904], atol=1e-3)
    # no bias: nothing shows the stack, read as one map; a DenseGeneral-like [d, h, k] kernel
    # with its [h, k] bias stays one [d, h k] map (the bias is the output shape)
    from layerlab.inspect._models import _weight_matrices
    assert _weight_matrices({"blocks": {"kernel": K}})["blocks/kernel"].shape == (L * d, d)
    dg = _weight_matrices({"q": {"kernel": jnp.ones((6, 2, 3)), "bias": jnp.ones((2, 3))}})
    assert {n: a.shape for n, a in dg.items()} == {"q/kernel": (6, 6)}
    # entries that are not kernels are refused, naming the entry
    bad = inspect.from_features(feats, weights=lambda p: {"head/bias": p["head"]["bias"]})
    with pytest.raises(ValueError, match=r"^weights: weights\(params\)\['head/bias'\] must be "
                                         r"a kernel array of rank >= 2 .*got shape \(2,\)\.$"):
        inspect.layer_report(bad, params, x, config=cfg)


def test_linen_variables_with_stale_intermediates_are_ignored():
    """``_, new = m.apply(v, x, train=True, mutable=True)`` returns the "intermediates" the
    model sowed too; variables rebuilt from it gave the stale value as an extra layer and
    renamed the real one ('act/0', 'Dense_0', 'act/1', 'Dense_1').  The adapter drops that
    collection (the one it captures into) from the variables it runs on."""
    class BNSow(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.BatchNorm(use_running_average=not train)(nn.Dense(6)(x))
            self.sow("intermediates", "act", nn.relu(h))
            return nn.Dense(3)(nn.relu(h))

    x = jax.random.normal(jax.random.key(3), (N, 5))
    model = BNSow()
    v = model.init(jax.random.key(4), x)
    _, new = jax.jit(lambda v: model.apply(v, x, train=True, mutable=True))(v)
    stale = {"params": v["params"], **new}
    assert set(stale) == {"params", "batch_stats", "intermediates"}
    clean = {"params": v["params"], "batch_stats": new["batch_stats"]}
    cfg = inspect.InspectConfig(diagnostics=("effective_rank",))
    for kw in (None, {"train": True, "mutable": ["batch_stats"]}):
        insp = inspect.from_linen(model, apply_kwargs=kw)
        got, want = (_report(insp, w, x, config=cfg) for w in (stale, clean))
        assert got.layers == want.layers == ("Dense_0", "act", "Dense_1")
        np.testing.assert_array_equal(got.layer_values["effective_rank"],
                                      want.layer_values["effective_rank"])
        np.testing.assert_array_equal(*(jax.jit(insp.apply)(w, x) for w in (stale, clean)))


def test_nnx_param_only_state_is_refused_naming_params():
    """``graphdef, params, rest = nnx.split(m, nnx.Param, ...)`` and ``params`` passed: a raw
    'Incorrect number of leaves' from inside nnx.merge.  Filling the rest from the model as
    built could use its untrained BatchNorm statistics, so it is an error naming params, the
    missing entries and the fix."""
    m = NNXBNDrop(nnx.Rngs(0))
    m.eval()
    insp = inspect.from_nnx(m)
    _, params, rest = nnx.split(m, nnx.Param, ...)
    x = jax.random.normal(jax.random.key(0), (N, 5))
    msg = (r"^params: the state lacks 4 of the model's 10 entries \('bn/mean' \(BatchStat\), "
           r"'bn/var' \(BatchStat\), 'drop/rngs/count' \(RngCount\), 'drop/rngs/key' "
           r"\(RngKey\)\).*nnx\.state\(model\).*nnx\.merge_state\(params, rest\)")
    for p in (params, nnx.to_pure_dict(params)):
        with pytest.raises(ValueError, match=msg):
            insp.features(p, x)
        with pytest.raises(ValueError, match=msg):
            inspect.layer_report(insp, p, x,
                                 config=inspect.InspectConfig(diagnostics=("stable_rank",)))
    theta, _ = insp.trainable(nnx.merge_state(params, rest))  # what the message asks for
    assert len(jax.tree.leaves(theta)) == 6


class NNXTrainArg(nnx.Module):
    """A ``__call__(x, train)``: BatchNorm on the batch's statistics when ``train``."""

    def __init__(self, rngs):
        self.l1 = nnx.Linear(5, 8, rngs=rngs)
        self.bn = nnx.BatchNorm(8, epsilon=1e-5, rngs=rngs)
        self.l2 = nnx.Linear(8, 3, rngs=rngs)

    def __call__(self, x, train):
        h = self.bn(self.l1(x), use_running_average=not train)
        self.sow(nnx.Intermediate, "bn", h)
        return self.l2(jax.nn.relu(h))


def test_nnx_call_kwargs_reach_the_model_call():
    """from_nnx had no way to pass __call__ arguments (from_linen has apply_kwargs): a model
    with ``__call__(self, x, train)`` failed with a raw TypeError.  call_kwargs= passes them
    to every call (features, apply); the caller's state is not updated."""
    m = NNXTrainArg(nnx.Rngs(0))
    state = nnx.state(m)
    before = jax.tree.map(np.asarray, nnx.to_pure_dict(state))
    x = jax.random.normal(jax.random.key(0), (N, 5))
    for train in (True, False):
        insp = inspect.from_nnx(m, call_kwargs={"train": train})
        f = jax.jit(insp.features)(state, x)
        pre = np.asarray(f["l1"])
        want = (pre - pre.mean(0)) / np.sqrt(pre.var(0) + 1e-5) if train else \
            pre / np.sqrt(1 + 1e-5)  # running mean 0, var 1 at init
        np.testing.assert_allclose(f["bn"], want, atol=1e-4)
        np.testing.assert_allclose(jax.jit(insp.apply)(state, x), f["l2"], atol=1e-6)
    jax.tree.map(np.testing.assert_array_equal, before,
                 jax.tree.map(np.asarray, nnx.to_pure_dict(state)))
    with pytest.raises(TypeError, match=r"^from_nnx: call_kwargs must be a dict"):
        inspect.from_nnx(m, call_kwargs=(("train", True),))
    with pytest.raises(TypeError, match=r"^from_nnx: call_kwargs\['rngs'\] is an nnx.Rngs"):
        inspect.from_nnx(m, call_kwargs={"train": True, "rngs": nnx.Rngs(1)})
