"""``python -m roll_viz serve``: the server starts with the model stack already imported."""

from __future__ import annotations

import sys

from roll_viz.cli import serve


def test_help_and_a_missing_script(capsys) -> None:
    assert serve.main(["--help"]) == 0
    assert "warm before anyone comes" in capsys.readouterr().out
    assert serve.main(["no_such_app.py"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no app script no_such_app.py")
    assert err.count("\n") == 1


def test_the_router_is_the_default_script() -> None:
    assert serve.ROUTER.name == "app.py"
    assert serve.ROUTER.is_file()


def test_warm_imports_load_the_model_stack() -> None:
    seconds = serve.warm_imports()
    assert seconds >= 0
    assert {"torch", "transformers", "peft"} <= set(sys.modules)


def test_streamlit_gets_the_script_and_flags(monkeypatch) -> None:
    seen = {}

    def fake_run_module(name: str, run_name: str, alter_sys: bool) -> None:
        seen.update(name=name, run_name=run_name, argv=list(sys.argv))
        raise SystemExit(3)

    monkeypatch.setattr(serve.runpy, "run_module", fake_run_module)
    monkeypatch.setattr(sys, "argv", ["python"])
    assert serve.main(["--server.port=1234"]) == 3
    assert seen["name"] == "streamlit"
    assert seen["run_name"] == "__main__"
    assert seen["argv"] == ["streamlit", "run", str(serve.ROUTER), "--server.port=1234"]
