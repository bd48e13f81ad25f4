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


def test_serve_prints_this_computer_and_the_phones_address(monkeypatch, capsys) -> None:
    seen = {}

    def fake_run_module(name: str, run_name: str, alter_sys: bool) -> None:
        seen.update(argv=list(sys.argv))

    monkeypatch.setattr(serve.runpy, "run_module", fake_run_module)
    monkeypatch.setattr(serve.network, "network_ip", lambda: "192.168.1.23")
    monkeypatch.delenv("STREAMLIT_SERVER_PORT", raising=False)
    monkeypatch.delenv("STREAMLIT_SERVER_ADDRESS", raising=False)
    assert serve.main([]) == 0
    out = capsys.readouterr().out
    assert "on this computer (the projector): http://localhost:8501" in out
    assert "phones on the same network:       http://192.168.1.23:8501" in out
    assert seen["argv"][-1] == "--server.port=8501"  # pinned: the printed port is the port


def test_address_lines() -> None:
    lines = serve.address_lines(["--server.port", "8600"], "10.0.0.7")
    assert lines[0].endswith("http://localhost:8600")
    assert "http://10.0.0.7:8600" in lines[1]
    offline = serve.address_lines([], None)
    assert "no network address, so no phone can reach it" in offline[1]
    assert "http://" not in offline[1]  # no dead link
    assert (
        "listens on 127.0.0.1 only" in serve.address_lines(["--server.address=127.0.0.1"], "x")[1]
    )
    assert serve.address_lines(["--server.address=10.1.2.3"], "10.0.0.7") == [
        "roll-viz: on this computer and on phones: http://10.1.2.3:8501"
    ]
    assert (
        "http://10.0.0.7:8501" in serve.address_lines(["--server.address=0.0.0.0"], "10.0.0.7")[1]
    )
