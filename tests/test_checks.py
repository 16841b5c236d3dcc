"""Tests for layerlab._checks (the shared argument checkers): eager checks raise, traced
arguments pass through (the same functions stay jit-able)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from layerlab import _checks as C


def test_check_int_refuses_bools_floats_and_out_of_range():
    assert C.check_int(np.int64(3), "k") == 3
    assert C.check_int(jnp.asarray(4), "k") == 4
    for bad in (True, 2.7, 2.0, "3", None):
        with pytest.raises(TypeError, match=r"f: k must be an integer"):
            C.check_int(bad, "k", fn="f")
    with pytest.raises(ValueError, match=r"k must be >= 1, got 0"):
        C.check_int(0, "k", min_value=1)
    assert C.check_int(None, "k", allow_none=True) is None


def test_check_number_ranges_and_arrays():
    assert C.check_number(0.5, "lr", min_value=0.0, lo_open=True) == 0.5
    with pytest.raises(ValueError, match=r"lr must be > 0.0 \(a rate\), got 0.0"):
        C.check_number(0.0, "lr", min_value=0.0, lo_open=True, what="a rate")
    with pytest.raises(ValueError, match=r"lam must be >= 0.0, got \[0.1, -1.0\]"):
        C.check_number(np.array([0.1, -1.0]), "lam", min_value=0.0)
    with pytest.raises(ValueError, match="finite"):
        C.check_number(np.inf, "x")
    with pytest.raises(TypeError, match="number"):
        C.check_number("1e-3", "lr")
    # traced: passes through unchecked (eager only)
    out = jax.jit(lambda v: C.check_number(v, "lr", min_value=0.0) * 2)(-1.0)
    assert float(out) == -2.0


def test_check_labels_eager_and_traced():
    y = C.check_labels([0, 2, 1], 3, "y", fn="f")
    np.testing.assert_array_equal(np.asarray(y), [0, 2, 1])
    with pytest.raises(ValueError, match=r"f: y must be integer class labels in \[0, 3\) "
                                         r"\(num_classes=3\), got values in \[0, 3\]"):
        C.check_labels(jnp.array([0, 3]), 3, "y", fn="f")
    with pytest.raises(TypeError, match="integer"):
        C.check_labels(np.array([0.0, 1.0]), 3, "y")
    with pytest.raises(ValueError, match="2 labels"):
        C.check_labels(np.array([0, 1, 2]), 3, "y", n=2)
    traced = jax.jit(lambda v: C.check_labels(v, 3, "y") + 1)(jnp.array([0, 7]))
    np.testing.assert_array_equal(np.asarray(traced), [1, 8])


def test_check_array_shapes_types_and_finiteness():
    a = C.check_array([[1.0, 2.0]], "x", ndim=2, shape=(None, 2), kind="float")
    assert a.shape == (1, 2)
    with pytest.raises(ValueError, match=r"x must have rank 2 .*got shape \(2,\)"):
        C.check_array([1.0, 2.0], "x", ndim=2, shape=(None, 2))
    with pytest.raises(ValueError, match=r"x must have shape \[\?, 3\], got \(1, 2\)"):
        C.check_array([[1.0, 2.0]], "x", shape=(None, 3))
    with pytest.raises(TypeError, match="floating-point"):
        C.check_array(np.arange(3), "x", kind="float")
    with pytest.raises(TypeError, match="must be an array, got None"):
        C.check_array(None, "x")
    with pytest.raises(TypeError, match="a string"):
        C.check_array("abc", "x")
    with pytest.raises(ValueError, match="1 non-finite"):
        C.check_array([1.0, np.nan], "x", finite=True)
    with pytest.raises(ValueError, match="at least 2 rows"):
        C.check_array(np.zeros((1, 3)), "x", min_rows=2)
    # under jit the static checks still run (at trace time), value checks are skipped
    f = jax.jit(lambda v: C.check_array(v, "x", ndim=1, finite=True))
    assert np.isnan(np.asarray(f(jnp.array([jnp.nan])))[0])
    with pytest.raises(ValueError, match="rank 1"):
        f(jnp.zeros((2, 2)))


def test_same_length_and_result_finite():
    assert C.check_same_length(("a", [1, 2]), ("b", np.zeros(2))) == 2
    with pytest.raises(ValueError, match=r"len\(a\) = 2, len\(b\) = 3"):
        C.check_same_length(("a", [1, 2]), ("b", [1, 2, 3]), fn="f")
    with pytest.raises(C.NonFiniteResultError, match="rescale"):
        C.check_result_finite(jnp.array([1.0, jnp.inf]), "k", hint=lambda: "rescale")
    assert issubclass(C.NonFiniteResultError, ValueError)
    assert issubclass(C.NonFiniteResultError, FloatingPointError)


def test_bfloat16_is_checked_like_the_numpy_floats():
    """bfloat16 (ml_dtypes) is no numpy ``inexact``/``number``: np.issubdtype let a NaN pass
    check_finite and check_result_finite, and check_number refused a bfloat16 scalar."""
    bad = jnp.array([1.0, jnp.nan], jnp.bfloat16)
    with pytest.raises(ValueError, match=r"f: x has 1 non-finite"):
        C.check_finite(bad, "x", fn="f")
    with pytest.raises(ValueError, match="1 non-finite"):
        C.check_array(bad, "x", finite=True)
    with pytest.raises(C.NonFiniteResultError, match=r"f: the result \(k\) has 1 non-finite"):
        C.check_result_finite(bad, "k", fn="f")
    C.check_finite(jnp.array([1.0, 2.0], jnp.bfloat16), "x")
    assert float(C.check_number(jnp.bfloat16(0.5), "lr", min_value=0.0)) == 0.5
    with pytest.raises(ValueError, match=r"f: lr must be finite, got nan"):
        C.check_number(jnp.bfloat16(jnp.nan), "lr", fn="f")
    with pytest.raises(ValueError, match=r"lr must be >= 0.0, got -1.0"):
        C.check_number(jnp.bfloat16(-1.0), "lr", min_value=0.0)


def test_check_key_single_typed_or_raw_keys():
    k = jax.random.key(0)
    assert C.check_key(k, fn="f") is k
    raw = jax.random.PRNGKey(0)
    assert C.check_key(raw) is raw
    for bad, what in ((0, "int 0"), (None, "None"), ("k", "a string"),
                      (jnp.zeros(2, jnp.float32), "dtype float32")):
        with pytest.raises(TypeError, match=rf"^f: key must be a PRNG key .*{what}"):
            C.check_key(bad, fn="f")
    with pytest.raises(ValueError, match=r"^f: key must be a single PRNG key, .*\(3,\)"):
        C.check_key(jax.random.split(k, 3), fn="f")
    # raw key data of the wrong length (jnp.array([1, 2, 3], uint32)): refused, named
    for bad in (jnp.array([1, 2, 3], jnp.uint32), jnp.zeros(1, jnp.uint32)):
        with pytest.raises(ValueError, match=r"^f: key is raw key data of shape \(\d,\), but "
                                             r"the PRNG implementation 'threefry2x32' uses 2"):
            C.check_key(bad, fn="f")
    # static: under vmap and jit a traced key passes
    out = jax.vmap(lambda kk: jax.random.normal(C.check_key(kk)))(jax.random.split(k, 2))
    assert out.shape == (2,)
    # an optional key: None passes with allow_none, anything else is still checked
    assert C.check_key(None, fn="f", allow_none=True) is None
    assert C.check_key(k, allow_none=True) is k
    with pytest.raises(TypeError, match=r"^f: key must be a PRNG key .*int 3"):
        C.check_key(3, fn="f", allow_none=True)


def test_check_float_dtype_refuses_an_array_or_a_number_in_place_of_a_dtype():
    """jnp.dtype(x) reads an array's dtype: dmn.density_init(3, 4, x) once took the array x
    as its dtype silently."""
    from layerlab import dmn

    x = jnp.ones((5, 4))
    for bad, what in ((x, r"a value of type ArrayImpl of shape \(5, 4\); pass its \.dtype"),
                      (np.ones(3, np.float32), r"a value of type ndarray of shape \(3,\)"),
                      (np.float32(1.0), r"a value of type float32 of shape \(\)"),
                      (1.0, r"a value of type float\.$")):
        with pytest.raises(TypeError, match=rf"^f: dtype must be a floating-point dtype "
                                            rf"\(e\.g\. jnp\.float32\), got {what}"):
            C.check_float_dtype(bad, fn="f")
    with pytest.raises(TypeError, match=r"^density_init: dtype must be a floating-point dtype"):
        dmn.density_init(3, 4, x)
    for ok in (jnp.float32, np.float64, float, "bfloat16", np.dtype("float16"), x.dtype):
        assert C.check_float_dtype(ok) == jnp.dtype(ok)


def test_check_float_dtype_refuses_integer_bool_complex_and_none():
    assert C.check_float_dtype(jnp.bfloat16, fn="f") == jnp.bfloat16
    assert C.check_float_dtype("float16") == np.float16
    for bad, what in ((jnp.int32, "int32"), (np.uint8, "uint8"), (bool, "bool"),
                      (jnp.complex64, "complex64"), (None, "None"), ("abc", "'abc'")):
        with pytest.raises(TypeError, match=rf"^f: dtype must be a floating-point dtype "
                                            rf"\(e\.g\. jnp\.float32\), got {what}\.$"):
            C.check_float_dtype(bad, fn="f")


def test_jit_or_eager_floats_0d_scales_and_falls_back_on_unhashable():
    import functools
    calls = []

    @functools.partial(jax.jit, static_argnames=("s", "f"))
    def g(x, *, s, f):
        calls.append(type(s))
        return f(x) * s

    x = jnp.arange(3.0)
    np.testing.assert_array_equal(C.jit_or_eager(g, x, s=np.float32(2.0), f=jnp.sin),
                                  jnp.sin(x) * 2.0)
    assert calls == [float]  # traced once, with the 0-d array made a Python float
    C.jit_or_eager(g, x, s=jnp.asarray(2.0), f=jnp.sin)
    assert calls == [float]  # the same static value: the cached program
    out = C.jit_or_eager(g, x, s=np.array([1.0, 2.0, 3.0]), f=jnp.sin)  # unhashable: eager
    np.testing.assert_allclose(out, jnp.sin(x) * np.array([1.0, 2.0, 3.0]), rtol=1e-6)
    assert calls[-1] is np.ndarray


@pytest.mark.parametrize("enable_x64", [False, True])
def test_promote_float_sends_integers_alone_to_the_default_float(enable_x64):
    """Integer or bool arrays alone go to ``jnp.result_type(float)`` (float64 under x64, where
    they went to float32); floats decide beside them; half precision is computed in float32."""
    with jax.enable_x64(enable_x64):
        default = jnp.result_type(float)
        assert default == (jnp.float64 if enable_x64 else jnp.float32)
        cases = [((jnp.int64,), default), ((jnp.uint8,), default), ((jnp.bool_,), default),
                 ((jnp.int8, jnp.bool_), default), ((jnp.float16,), jnp.float32),
                 ((jnp.bfloat16,), jnp.float32), ((jnp.float32,), jnp.float32),
                 ((jnp.float32, jnp.int64), jnp.float32), ((jnp.float16, jnp.uint8), jnp.float32),
                 ((jnp.float64,), default), ((jnp.float64, jnp.int32), default)]
        for dtypes, want in cases:
            out = C.promote_float(*(np.asarray([3, 1], dt) for dt in dtypes))
            assert [a.dtype for a in out] == [jnp.dtype(want)] * len(dtypes), dtypes
            np.testing.assert_array_equal(np.asarray(out[0], np.float64),
                                          np.asarray([3, 1], dtypes[0]).astype(np.float64))
        # an int64 beyond 2^24 is exact in float64, rounded in float32
        (big,) = C.promote_float(np.array([2**24 + 1]))
        assert float(big[0]) == (2**24 + 1 if enable_x64 else 2**24)
