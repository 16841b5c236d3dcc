"""Tests for layerlab.dmn._spec: the architecture grammar of the paper's tables."""
import jax
import numpy as np
import pytest

import layerlab.dmn as L


def test_spec_parsing_and_errors():
    lay = L.parse_spec("d15, m, c80, m, de10")
    assert [t.kind for t in lay] == ["dmn_conv", "pool", "conv", "pool", "dense"]
    assert L.format_spec(lay) == "d15,m,c80,m,de10"
    assert L.format_spec(L.convnet_spec("d6,m,dd40,de10")) == "c6,m,de40,de10"
    pre, head = L.split_spec(lay)
    assert L.format_spec(pre) == "d15,m" and L.format_spec(head) == "c80,m,de10"
    pre, head = L.split_spec(L.parse_spec("d6,m,m,de10"))
    assert L.format_spec(pre) == "d6,m,m" and L.format_spec(head) == "de10"
    with pytest.raises(ValueError, match="bad architecture token"):
        L.parse_spec("d6,x3,de10")
    with pytest.raises(ValueError, match="must end with the classifier"):
        L.parse_spec("d6,m")
    with pytest.raises(ValueError, match="before trainable"):
        L.split_spec(L.parse_spec("c6,d4,de10"))
    with pytest.raises(ValueError, match="num_classes=3"):
        L.make_network("d6,de10", 3)
    with pytest.raises(ValueError, match="NaN"):
        L.build_dmn(jax.random.key(0), L.parse_spec("d2,de2")[:1],
                    np.full((2, 4, 4, 1), np.nan), np.array([0, 1]), 2)
