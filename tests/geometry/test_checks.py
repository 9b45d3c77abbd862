"""The one real-number rule of the library's array arguments (camflow_jax.geometry.checks), and
the surfaces that share it (bases, the JAX and the numpy warps)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from camflow_jax import bases
from camflow_jax.geometry import checks, device, host


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64, np.float16, np.float32, np.float64,
                                   ml_dtypes.bfloat16])
def test_integer_and_floating_dtypes_are_real(dtype):
    a = np.ones((2, 3), dtype)
    assert checks.real_array("f", "x", a) is a  # arrays pass as they are


@pytest.mark.parametrize("value, words", [
    (np.ones(3, bool), "dtype bool"),
    (np.ones(3, np.complex64), "dtype complex64"),
    (np.array(["a", "b"]), "dtype <U1"),
    (np.array([object(), 1], dtype=object), "dtype object"),
])
def test_what_is_not_real_is_refused_in_one_line_naming_the_function_and_argument(value, words):
    with pytest.raises(ValueError, match=f"^f: x must hold real numbers, got {words}"):
        checks.real_array("f", "x", value)


def test_booleans_only_where_asked_and_lists_converted_ragged_ones_refused():
    assert checks.real_array("f", "x", np.ones(2, bool), booleans=True).dtype == bool
    np.testing.assert_array_equal(checks.real_array("f", "x", [[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match="^f: x must be an array of numbers"):
        checks.real_array("f", "x", [[1, 2], [3]])


def test_jax_arrays_and_tracers_pass_unconverted():
    x = jnp.ones((2, 2), jnp.bfloat16)
    assert checks.real_array("f", "x", x) is x
    seen = []

    @jax.jit
    def f(y):
        seen.append(type(checks.real_array("f", "y", y)))
        return y

    f(jnp.ones(3))
    assert seen and issubclass(seen[0], jax.core.Tracer)


def test_the_surfaces_share_the_rule():
    """bases.combine and the JAX warp refuse a boolean array in the same words; the numpy warp
    warps a boolean mask (as 0/1), and a bfloat16 image as float32."""
    for call in (lambda: bases.combine(np.ones(2, bool), np.zeros((2, 4, 4, 2), np.float32)),
                 lambda: device.warp(np.zeros((4, 4, 1), np.float32), np.ones((4, 4, 2), bool))):
        with pytest.raises(ValueError, match="must hold real numbers, got dtype bool"):
            call()
    flow = np.zeros((4, 5, 2), np.float32)
    mask = np.eye(4, 5, dtype=bool)
    inside = host.warp_validity(flow)  # the warp's own rule of what stays in the frame
    np.testing.assert_array_equal(host.warp(mask, flow), mask * inside)
    img = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(host.warp(img.astype(ml_dtypes.bfloat16), flow), img * inside)
