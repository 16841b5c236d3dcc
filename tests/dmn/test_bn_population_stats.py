"""reproduce._dmn_bn's exact batch-norm population statistics (the Table 4 BN diagnosis)."""
import jax
import jax.numpy as jnp
import numpy as np

from layerlab.dmn import make_network
from reproduce._dmn_bn import _bn_population_stats


def test_bn_population_stats_equal_numpy_moments_of_the_bn_input():
    net = make_network("c4,bn,de3", 3)
    x = np.asarray(jax.random.normal(jax.random.key(0), (600, 6, 6, 1))) * 2.0 + 0.5
    variables = net.init_head(jax.random.key(1), x[:2])
    # make the running averages wrong on purpose: the result must not depend on them
    variables = {**variables, "batch_stats": jax.tree_util.tree_map(
        lambda a: a + 3.0, variables["batch_stats"])}
    got = _bn_population_stats(net, variables, x, chunk=200)
    # independent route: the BN input is relu(conv(x)); flax records the conv output
    _, inter = net.head.apply(variables, x, capture_intermediates=True,
                              mutable=["intermediates"])
    conv = np.asarray(inter["intermediates"]["Conv_0"]["__call__"][0], np.float64)
    h = np.maximum(conv, 0.0).reshape(-1, conv.shape[-1])
    np.testing.assert_allclose(got["BatchNorm_0"]["mean"], h.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["BatchNorm_0"]["var"], h.var(0), rtol=1e-4, atol=1e-6)
    assert jnp.all(got["BatchNorm_0"]["var"] > 0)
