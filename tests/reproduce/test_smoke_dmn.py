"""Every `reproduce/dmn_*.py` script: a --smoke run writes a valid record and figure
(parametrized in tests/reproduce/conftest.py)."""
PAPER = "dmn"


def test_smoke_run_writes_a_valid_record(smoke_script, tmp_path, run_smoke):
    run_smoke(smoke_script, tmp_path)


def test_convnet_input_ablation_refuses_an_unknown_arm(capsys):
    import pytest

    from reproduce._dmn_convnet_input import main

    with pytest.raises(SystemExit):
        main(["--arms", "unit,tanh"])
    assert "unknown arm(s) ['tanh']" in capsys.readouterr().err


def test_convnet_budget_matches_need_both_accuracies_within_tolerance():
    from reproduce._dmn_convnet_budget import matches

    val, train = [40.0, 50.0, 51.0, 53.0], [45.0, 57.0, 61.0, 66.0]
    assert matches(val, train, 51.94, None) == [2, 3, 4]        # test accuracy only
    assert matches(val, train, 51.94, 62.69) == [3]              # 51.0 / 61.0 both within 2
    assert matches(val, train, 51.94, 70.0) == []
    assert matches([49.94], [0.0], 51.94, None) == [1]           # the bound is inclusive
    assert matches([float("nan"), 51.0], [61.0, float("nan")], 51.94, 62.69) == []  # no score
