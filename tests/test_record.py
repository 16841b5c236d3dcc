"""The record schema (``layerlab.record``): what Row / Claim refuse at construction, and the
edge cases they accept."""
from __future__ import annotations

import numpy as np
import pytest

from layerlab.record import Claim, Record, Row, load_record, write_record


@pytest.mark.parametrize("holds", [np.bool_(True), np.float64(1.0) < 2.0, np.array(True)])
def test_numpy_bools_are_accepted_and_converted(tmp_path, holds):
    r, c = Row("r", 1.0, holds=holds), Claim("c", holds)
    assert r.holds is True and c.holds is True
    assert Claim("c", np.bool_(False)).holds is False
    rec = Record("dgl", "x", "t", "reduced", {}, rows=[r], claims=[c], wall_s=None)
    d = load_record(write_record(rec, tmp_path))
    assert d["rows"][0]["holds"] is True and d["claims"][0]["holds"] is True
    assert d["wall_s"] is None


@pytest.mark.parametrize("holds", [1, 0, np.int64(1), np.array(0), np.float64(1.0), "True"])
def test_row_and_claim_refuse_non_bool_holds(holds):
    with pytest.raises(TypeError, match=r"Row 'r': holds must be True, False or None"):
        Row("r", 1.0, holds=holds)
    with pytest.raises(TypeError, match=r"Claim 'c': holds must be True, False or None"):
        Claim("c", holds)
