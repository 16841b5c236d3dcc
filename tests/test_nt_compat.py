"""Tests for layerlab._nt_compat: neural-tangents importable, TensorFlow-free, JAX untouched."""
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import _nt_compat
from layerlab.kernels import monte_carlo_kernel_fn, nt, predict, relu_nngp, stax

REPO = pathlib.Path(__file__).resolve().parents[1]

_ISOLATION_SCRIPT = textwrap.dedent(
    """
    import builtins, importlib.util, sys, types
    import jax, jax.core, jax.interpreters, jax.interpreters.ad

    WATCH = ["jax", "jax.core", "jax.interpreters", "jax.interpreters.ad"]
    before = {m: dict(vars(sys.modules[m])) for m in WATCH}
    import_before = builtins.__import__
    jax_modules_before = {m for m in sys.modules if m == "jax" or m.startswith("jax.")}

    import layerlab.kernels as K
    import jax.numpy as jnp
    assert callable(K.stax.serial(K.stax.Dense(8), K.stax.Relu())[2])

    # 1. TensorFlow is importable in this interpreter (fake package) but never imported.
    assert importlib.util.find_spec("tensorflow") is not None
    assert "tensorflow" not in sys.modules, "tensorflow was imported"
    assert "tf2jax" not in sys.modules
    # 2. JAX's modules: no attribute replaced or added, except submodules JAX itself
    #    attaches when they are imported (jax.example_libraries, ...).
    for m in WATCH:
        now = vars(sys.modules[m])
        for name, val in before[m].items():
            assert now.get(name) is val, f"{m}.{name} changed"
        for name in set(now) - set(before[m]):
            val = now[name]
            assert isinstance(val, types.ModuleType) and val.__name__ == f"{m}.{name}", (
                f"{m}.{name} added")
    assert "jax.util" not in sys.modules, "a fake jax.util was registered"
    assert builtins.__import__ is import_before
    new = {m for m in sys.modules if m == "jax" or m.startswith("jax.")} - jax_modules_before
    assert all(type(sys.modules[m]) is types.ModuleType or
               type(sys.modules[m]).__module__.startswith("jax") for m in new), new
    # 3. the TensorFlow-only subpackage is a placeholder with a clear message.
    try:
        K.nt.experimental.empirical_ntk_fn_tf
    except AttributeError as e:
        assert "TensorFlow" in str(e)
    else:
        raise AssertionError("placeholder did not raise")
    print("ISOLATION-OK")
    """
)


def test_import_is_tensorflow_free_and_leaves_jax_untouched(tmp_path):
    # A fake TensorFlow (as a plain `pip install` would provide a real one) that
    # fails loudly if anything imports it.
    for pkg in ("tensorflow", "tf2jax"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text(
            f"raise RuntimeError('{pkg} must not be imported by layerlab')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]),
               JAX_PLATFORMS="cpu")
    env.pop(_nt_compat.ENV_VAR, None)
    out = subprocess.run([sys.executable, "-c", _ISOLATION_SCRIPT], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ISOLATION-OK" in out.stdout


def test_shims_forward_real_names_and_alias_only_missing_ones():
    layer = next(f for f in sys.meta_path if isinstance(f, _nt_compat._Finder)).layer
    core = layer.redirect["jax.core"]
    import jax.extend.core as jex_core

    # existing names come from the real module ...
    assert core.ShapedArray is jax.core.ShapedArray
    assert core.eval_context is jax.core.eval_context
    assert layer.jax.numpy is jnp
    # ... missing ones from where JAX keeps them now
    assert core.Jaxpr is jex_core.Jaxpr and core.Primitive is jex_core.Primitive
    assert layer.redirect["jax.util"].safe_zip([1], [2]) == [(1, 2)]
    with pytest.raises(ValueError):  # it really is safe_zip (length-checked)
        layer.redirect["jax.util"].safe_zip([1], [2, 3])
    with pytest.raises(AttributeError, match="no attribute"):
        core.definitely_not_a_jax_name
    # the neural-tangents modules see the shims, the rest of the world does not
    from neural_tangents._src import empirical as nt_empirical

    assert nt_empirical.Jaxpr is jex_core.Jaxpr
    assert not hasattr(jax.core, "Jaxpr") or jax.core.Jaxpr is jex_core.Jaxpr


def test_step_aside_decision():
    assert _nt_compat.needs_layer("0.6.5")
    assert _nt_compat.needs_layer("0.6.4")
    assert not _nt_compat.needs_layer("0.6.6")
    assert not _nt_compat.needs_layer("0.7.0rc1")
    # leading digits per part: "5rc1" is 5, not 51 (which ranked 0.6.5rc1 above 0.6.5)
    assert _nt_compat._version_tuple("0.6.5rc1") == (0, 6, 5)
    assert _nt_compat._version_tuple("0.6.5.post2") == (0, 6, 5)
    assert _nt_compat._version_tuple("1.0.0+local3") == (1, 0, 0)
    assert _nt_compat._version_tuple("0.6.dev1") == (0, 6, 0)
    assert _nt_compat.needs_layer("0.6.5rc1") and _nt_compat.needs_layer("0.6.4b12")
    assert not _nt_compat.needs_layer("0.6.10")
    # an already imported, complete neural_tangents is returned untouched
    assert _nt_compat.import_neural_tangents() is nt
    assert _nt_compat.import_neural_tangents("off") is nt
    with pytest.raises(ValueError, match="LAYERLAB_NT_COMPAT"):
        _nt_compat.import_neural_tangents("sometimes")


def _jit(kernel_fn):
    # neural-tangents' kernel_fn runs op by op; one compiled call is much cheaper here
    return jax.jit(kernel_fn, static_argnames=("get",))


def _relu_net(width, depth, w_std, b_std):
    layers = []
    for _ in range(depth):
        layers += [stax.Dense(width, W_std=w_std, b_std=b_std), stax.Relu()]
    return stax.serial(*layers, stax.Dense(1, W_std=w_std, b_std=b_std))


def test_stax_kernel_fn_get_and_native_closed_form(x64):
    x1 = jax.random.normal(jax.random.key(0), (5, 4))
    x2 = jax.random.normal(jax.random.key(1), (3, 4))
    kernel_fn = _jit(_relu_net(16, 2, 1.3, 0.2)[2])
    both = kernel_fn(x1, x2, get=("nngp", "ntk"))
    nngp = kernel_fn(x1, x2, get="nngp")
    np.testing.assert_allclose(nngp, both.nngp, rtol=1e-12)
    np.testing.assert_allclose(kernel_fn(x1, x2, get="ntk"), both.ntk, rtol=1e-12)
    ref = relu_nngp(x1, x2, depth=2, w_var=1.3**2, b_var=0.2**2)
    np.testing.assert_allclose(nngp, ref, rtol=1e-10, atol=1e-12)


def test_conv_flatten_equals_dense_on_flattened_images(x64):
    # A VALID conv whose filter covers the whole image is a dense layer on the flattened
    # image (same fan-in H*W*C), so the two kernels must agree exactly.
    x = jax.random.normal(jax.random.key(2), (4, 3, 3, 2))
    conv = stax.serial(stax.Conv(8, (3, 3), padding="VALID", W_std=1.2, b_std=0.3),
                       stax.Relu(), stax.Flatten(), stax.Dense(1, W_std=1.1))
    dense = stax.serial(stax.Flatten(), stax.Dense(8, W_std=1.2, b_std=0.3), stax.Relu(),
                        stax.Dense(1, W_std=1.1))
    kc = _jit(conv[2])(x, None, get=("nngp", "ntk"))
    kd = _jit(dense[2])(x, None, get=("nngp", "ntk"))
    np.testing.assert_allclose(kc.nngp, kd.nngp, rtol=1e-10)
    np.testing.assert_allclose(kc.ntk, kd.ntk, rtol=1e-7)  # NT clips its diagonal
    ref = relu_nngp(x.reshape(4, -1), depth=1, w_var=[1.2**2, 1.1**2], b_var=[0.09, 0.0])
    np.testing.assert_allclose(kc.nngp, ref, rtol=1e-10)


def test_parallel_branches_add_kernels(x64):
    x = jax.random.normal(jax.random.key(3), (4, 5))
    net = stax.serial(stax.FanOut(2),
                      stax.parallel(stax.Dense(3, W_std=1.0, b_std=0.5),
                                    stax.Dense(3, W_std=2.0, b_std=0.1)),
                      stax.FanInSum())
    with pytest.warns(UserWarning, match="FanIn"):  # NT's reminder; each branch is Dense
        k = _jit(net[2])(x, None, get="nngp")
    expected = (0.25 + 0.01) + (1.0 + 4.0) * (x @ x.T) / 5
    np.testing.assert_allclose(k, expected, rtol=1e-12)


def test_monte_carlo_kernel_fn_approaches_analytic():
    x = jax.random.normal(jax.random.key(4), (4, 3))
    # wide readout too: the estimate averages over its 512 output channels
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Dense(512, W_std=1.4, b_std=0.1), stax.Relu(), stax.Dense(512, W_std=1.4))
    mc = monte_carlo_kernel_fn(init_fn, apply_fn, jax.random.key(5), n_samples=8)
    k_mc, k = mc(x, None, "nngp"), _jit(kernel_fn)(x, None, get="nngp")
    np.testing.assert_allclose(k_mc, k, atol=0.05 * float(jnp.max(jnp.abs(k))), rtol=0.1)


def test_predict_gradient_descent_mse_ensemble_is_kernel_regression(x64):
    x_train = jax.random.normal(jax.random.key(6), (6, 3))
    x_test = jax.random.normal(jax.random.key(7), (2, 3))
    y_train = jax.random.normal(jax.random.key(8), (6, 1))
    kernel_fn = _jit(_relu_net(8, 1, 1.5, 0.1)[2])
    reg = 1e-3
    pred = predict.gradient_descent_mse_ensemble(kernel_fn, x_train, y_train, diag_reg=reg)
    mean = pred(None, x_test, get="ntk")  # t = infinity
    k_tt = kernel_fn(x_train, None, get="ntk")
    k_st = kernel_fn(x_test, x_train, get="ntk")
    # neural-tangents scales diag_reg by the mean trace of the train kernel
    a = k_tt + reg * jnp.trace(k_tt) / 6 * jnp.eye(6)
    np.testing.assert_allclose(mean, k_st @ np.linalg.solve(a, y_train), rtol=1e-6)
    # at t = 0 the ensemble mean is the prior mean, 0
    np.testing.assert_allclose(pred(0.0, x_test, get="ntk"), 0.0, atol=1e-12)
