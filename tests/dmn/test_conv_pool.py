"""The CPU-fast conv and pooling of the trainable ConvNet layers against independent routes:
``conv3x3`` against a float64 numpy loop over output pixels (and ``lax.conv``), its gradients
against ``lax.conv``'s, ``max_pool_2x2`` against a numpy window loop and flax's
``reduce_window`` pooling, and the Head's parameters against ``nn.Conv``'s."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import layerlab.dmn as L


def _numpy_conv(x, k, padding):
    x = np.asarray(x, np.float64)
    k = np.asarray(k, np.float64)
    kh, kw, _, co = k.shape
    if padding == "SAME":
        x = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    n, h, w, _ = x.shape
    out = np.zeros((n, h - kh + 1, w - kw + 1, co))
    for i in range(h - kh + 1):
        for j in range(w - kw + 1):
            out[:, i, j, :] = np.einsum("nabc,abco->no", x[:, i : i + kh, j : j + kw, :], k)
    return out


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("im2col", [True, False])
def test_conv3x3_equals_numpy_loop(padding, im2col):
    kx, kk = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (3, 7, 6, 4))  # odd/even sizes, several channels
    k = jax.random.normal(kk, (3, 3, 4, 5))
    y = L.conv3x3(x, k, padding, im2col=im2col)
    ref = _numpy_conv(x, k, padding)
    assert y.shape == ref.shape
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_conv3x3_gradients_match_lax_conv(padding):
    kx, kk, kg = jax.random.split(jax.random.key(1), 3)
    x = jax.random.normal(kx, (2, 9, 9, 3), jnp.float64) if jax.config.jax_enable_x64 \
        else jax.random.normal(kx, (2, 9, 9, 3))
    k = jax.random.normal(kk, (3, 3, 3, 4), x.dtype)
    probe = jax.random.normal(kg, L.conv3x3(x, k, padding).shape, x.dtype)

    def f(route):
        return lambda k, x: jnp.sum(probe * jnp.tanh(L.conv3x3(x, k, padding, im2col=route)))

    g_patch = jax.jit(jax.grad(f(True), argnums=(0, 1)))(k, x)
    g_lax = jax.jit(jax.grad(f(False), argnums=(0, 1)))(k, x)
    for a, b in zip(g_patch, g_lax):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


def test_conv3x3_rejects_bad_shapes():
    with pytest.raises(ValueError, match="x must be"):
        L.conv3x3(jnp.zeros((2, 5, 5, 3)), jnp.zeros((3, 3, 2, 4)))
    with pytest.raises(ValueError, match="padding"):
        L.conv3x3(jnp.zeros((2, 5, 5, 3)), jnp.zeros((3, 3, 3, 4)), "FULL")


def test_max_pool_equals_window_loop_and_flax():
    x = jax.random.normal(jax.random.key(2), (2, 7, 6, 3))  # odd height: last row dropped
    y = np.asarray(L.max_pool_2x2(x))
    xn = np.asarray(x)
    ref = np.array([[[[xn[n, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2, c].max() for c in range(3)]
                      for j in range(3)] for i in range(3)] for n in range(2)])
    np.testing.assert_array_equal(y, ref)
    np.testing.assert_array_equal(y, np.asarray(nn.max_pool(x, (2, 2), strides=(2, 2))))
    # without ties the gradient is the indicator of each window's maximum, as reduce_window's
    g = jax.jit(jax.grad(lambda x: jnp.sum(L.max_pool_2x2(x) ** 2)))(x)
    g_ref = jax.jit(jax.grad(lambda x: jnp.sum(nn.max_pool(x, (2, 2), strides=(2, 2)) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=1e-6)


def test_max_pool_propagates_nan_under_jit():
    """A NaN in a window gives NaN for that window only, eagerly and under jit.  The reshape
    and jnp.max form returned the window's largest finite value under jit on CPU (XLA's
    max-reduction), for every batch size tried (8, 40, 128 maps)."""
    for n in (8, 40):
        x = np.array(jax.random.normal(jax.random.key(n), (n, 8, 8, 3)))
        x[3, 5, 6, 2] = np.nan                      # window (2, 3) of map 3, channel 2
        want = np.array(L.max_pool_2x2(np.nan_to_num(x, nan=-np.inf)))
        want[3, 2, 3, 2] = np.nan
        for f in (L.max_pool_2x2, jax.jit(L.max_pool_2x2)):
            np.testing.assert_array_equal(np.asarray(f(x)), want)
    # ties split the gradient as jnp.maximum does: 2 or 4 equal values equally, 3 as 1/4,1/4,1/2
    t = jnp.array([[1.0, 1.0], [1.0, 0.0]]).reshape(1, 2, 2, 1)
    g = jax.grad(lambda z: jnp.sum(L.max_pool_2x2(z)))(t)
    np.testing.assert_array_equal(np.asarray(g).ravel(), [0.25, 0.25, 0.5, 0.0])
    g4 = jax.grad(lambda z: jnp.sum(L.max_pool_2x2(z)))(jnp.ones((1, 2, 2, 1)))
    np.testing.assert_array_equal(np.asarray(g4).ravel(), [0.25] * 4)


def test_head_conv_has_nn_conv_parameters_and_values():
    x = jax.random.normal(jax.random.key(3), (4, 10, 10, 3))
    net = L.make_network("c6,m,c5,m,de10", 10, L.DMNConfig.paper())
    v = jax.jit(net.init_head)(jax.random.key(4), x)
    p = v["params"]
    assert p["Conv_0"]["kernel"].shape == (3, 3, 3, 6) and p["Conv_1"]["bias"].shape == (5,)

    @jax.jit  # one program (eager, every op compiles apart)
    def both(v, x):
        p = v["params"]
        ref = nn.Conv(6, (3, 3), padding="VALID").apply({"params": p["Conv_0"]}, x)
        h = jax.nn.relu(L.conv3x3(x, p["Conv_0"]["kernel"], "VALID")
                        + p["Conv_0"]["bias"].reshape(1, 1, 1, -1))
        return h, jax.nn.relu(ref), net.head_apply(v, x)

    h, ref, out = both(v, x)
    np.testing.assert_allclose(np.asarray(h), np.asarray(ref), rtol=1e-5, atol=1e-5)
    assert out.shape == (4, 10)


def test_head_default_route_equals_lax_ops_route():
    x = jax.random.normal(jax.random.key(5), (3, 12, 12, 3))
    y = jnp.array([0, 3, 7])
    net = L.make_network("c4,m,c5,m,de10", 10, L.DMNConfig.paper())
    p = jax.jit(net.init_head)(jax.random.key(6), x)["params"]
    ref = net.head.clone(lax_ops=True)

    def loss(head):
        return lambda p: jnp.mean(jax.nn.logsumexp(head.apply({"params": p}, x), axis=1)
                                  - head.apply({"params": p}, x)[jnp.arange(3), y])

    # jitted: eager, each op of the forward and backward pass compiled apart (~20 s)
    v, g = jax.jit(jax.value_and_grad(loss(net.head)))(p)
    v_ref, g_ref = jax.jit(jax.value_and_grad(loss(ref)))(p)
    np.testing.assert_allclose(float(v), float(v_ref), rtol=1e-5)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("act", ["relu", "linear"])
def test_head_conv_activation_against_a_float64_numpy_forward(act):
    # c4,m,de10 forward pass by hand: float64 numpy conv, optional ReLU, 2x2 max-pool, dense
    x = jax.random.normal(jax.random.key(7), (3, 8, 8, 2))
    net = L.make_network("c4,m,de10", 10, L.DMNConfig.paper(conv_activation=act))
    p = jax.jit(net.init_head)(jax.random.key(8), x)["params"]
    h = _numpy_conv(x, p["Conv_0"]["kernel"], "VALID") + np.asarray(p["Conv_0"]["bias"],
                                                                      np.float64)
    if act == "relu":
        h = np.maximum(h, 0.0)
    n, hh, ww, c = h.shape
    h = h[:, : hh // 2 * 2, : ww // 2 * 2].reshape(n, hh // 2, 2, ww // 2, 2, c).max(axis=(2, 4))
    want = h.reshape(n, -1) @ np.asarray(p["Dense_0"]["kernel"], np.float64) + np.asarray(
        p["Dense_0"]["bias"], np.float64)
    np.testing.assert_allclose(np.asarray(jax.jit(net.head_apply)({"params": p}, x)), want,
                               rtol=1e-4, atol=1e-4)
    other = L.make_network("c4,m,de10", 10, L.DMNConfig.paper(
        conv_activation="linear" if act == "relu" else "relu"))
    assert np.max(np.abs(np.asarray(jax.jit(other.head_apply)({"params": p}, x)) - want)) > 1e-3


def test_conv_activation_must_be_relu_or_linear():
    with pytest.raises(ValueError, match=r"DMNConfig.conv_activation must be one of .*'tanh'"):
        L.DMNConfig(conv_activation="tanh")
