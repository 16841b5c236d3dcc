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
