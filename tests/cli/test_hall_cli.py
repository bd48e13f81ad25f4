"""``python -m roll_viz hall``: the proxy's configuration, the bounds, the dry run."""

from __future__ import annotations

import pytest

from roll_viz.cli import hall


def test_the_proxy_is_sticky_by_cookie_and_health_checked():
    cfg = hall.haproxy_config("127.0.0.1", 8500, [9001, 9002])
    assert "bind 127.0.0.1:8500" in cfg
    assert "cookie RVHALL insert indirect nocache" in cfg  # not by source IP: one NAT, many phones
    assert "balance source" not in cfg
    assert "option redispatch" in cfg  # a dead process's students go to another
    assert "option httpchk GET /_stcore/health" in cfg
    assert "timeout tunnel 1h" in cfg  # the websockets of a lecture stay open
    assert "server app1 127.0.0.1:9001 check cookie app1" in cfg
    assert "server app2 127.0.0.1:9002 check cookie app2" in cfg


def test_apps_share_redis_and_one_cookie_secret(tmp_path):
    h = hall.Hall(folder=tmp_path, processes=2, redis_port=6400, app_ports=[9001, 9002])
    env = h.app_env("s3cret")
    assert env["ROLL_VIZ_REDIS"] == "redis://127.0.0.1:6400/0"
    assert env["STREAMLIT_SERVER_COOKIE_SECRET"] == "s3cret"
    cmds = h.commands(["--theme.base=dark"])
    assert list(cmds) == ["redis", "app1", "app2", "proxy"]
    assert "--appendonly" in cmds["redis"]
    assert cmds["redis"][cmds["redis"].index("--appendonly") + 1] == "yes"
    assert "--server.port=9002" in cmds["app2"]
    assert cmds["app1"][-1] == "--theme.base=dark"


@pytest.mark.parametrize("n", ["0", str(hall.MAX_PROCESSES + 1)])
def test_processes_are_bounded(n, capsys):
    with pytest.raises(SystemExit):
        hall.parse(["--processes", n])
    assert f"1..{hall.MAX_PROCESSES}" in capsys.readouterr().err


def test_dry_run_writes_the_config_and_starts_nothing(tmp_path, capsys):
    assert hall.main(["--processes", "3", "--dir", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("roll_viz serve") == 3
    assert "cookie RVHALL" in (tmp_path / "haproxy.cfg").read_text()


def test_the_hall_states_what_a_redis_restart_keeps(tmp_path, capsys):
    assert hall.main(["--processes", "1", "--dir", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert hall.PERSISTENCE in out
    redis_line = next(line for line in out.splitlines() if line.startswith("redis: "))
    assert "--appendonly yes" in redis_line  # what the sentence promises
    assert "--appendfsync everysec" in redis_line
    assert "every second" in hall.PERSISTENCE
