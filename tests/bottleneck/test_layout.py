"""Tests for layerlab.bottleneck._layout (layerlab.nets params and paper A's view of them)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import bottleneck as bn
from layerlab import nets


def test_paper_view_round_trip_and_norm(key, x64):
    params = nets.mlp_init(key, [3, 5, 2], init="he", b_std=0.3, dtype=jnp.float64)
    Ws = bn.from_mlp_params(params, beta=0.5)
    assert [W.shape for W in Ws] == [(5, 4), (2, 6)]
    np.testing.assert_array_equal(Ws[0][:, :3], params[0]["w"].T)
    np.testing.assert_allclose(Ws[1][:, -1], params[1]["b"] / 0.5, rtol=1e-15)
    back = bn.to_mlp_params(Ws, beta=0.5)
    for p, q in zip(params, back):
        np.testing.assert_allclose(q["w"], p["w"], rtol=1e-15)
        np.testing.assert_allclose(q["b"], p["b"], rtol=1e-15)
    # ||W||^2 = sum ||w||^2 + ||b||^2 / beta^2, by hand; beta = 0 leaves the biases out
    by_hand = sum(float(jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2) / 0.25) for p in params)
    assert float(bn.weight_norm_sq(params, beta=0.5)) == pytest.approx(by_hand, rel=1e-12)
    no_bias = sum(float(jnp.sum(p["w"] ** 2)) for p in params)
    assert float(bn.weight_norm_sq(params, beta=0.0)) == pytest.approx(no_bias, rel=1e-12)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_network_fn_is_nets_mlp_apply(key, x64, beta):
    """beta weighs the biases in the norm but does not change the function."""
    params = nets.mlp_init(key, [4, 6, 6, 3], init="he", b_std=0.5, dtype=jnp.float64)
    x = jax.random.normal(jax.random.fold_in(key, 1), (9, 4))
    np.testing.assert_allclose(bn.network_fn(params, x, beta=beta), nets.mlp_apply(params, x),
                               atol=1e-12)
    # beta = 0: a net without biases
    nob = [{"w": p["w"], "b": jnp.zeros_like(p["b"])} for p in params]
    np.testing.assert_allclose(bn.network_fn(params, x, beta=0.0), nets.mlp_apply(nob, x),
                               atol=1e-12)


def test_bad_params_name_the_layer():
    x = jnp.ones((4, 3))
    with pytest.raises(ValueError, match=r"params must be a non-empty list"):
        bn.representations([], x)
    with pytest.raises(ValueError, match=r"params\[0\] \(layer 1\).*n_0 = 3.*got w \(2, 3\)"):
        bn.representations([{"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}], x)
    with pytest.raises(ValueError, match=r"params\[0\] \(layer 1\).*got ndarray|got Array"):
        bn.representations([jnp.ones((2, 4))], x)
