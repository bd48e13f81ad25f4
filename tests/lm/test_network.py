"""This server's network address: the lookup behind Streamlit's "Network URL", uncached."""

from __future__ import annotations

import pytest
from streamlit import net_util

from roll_viz.lm import network


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("app.localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("192.168.1.23", False),
        ("10.0.0.7", False),
        ("class.example.org", False),
        ("", False),
        (None, False),
    ],
)
def test_is_loopback(host, loopback):
    assert network.is_loopback(host) is loopback


class FakeSocket:
    def __init__(self, address: str | None) -> None:
        self.address = address

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def connect(self, target) -> None:
        if self.address is None:
            raise OSError(101, "Network is unreachable")

    def getsockname(self):
        return (self.address, 40000)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("192.168.1.23", "192.168.1.23"), ("127.0.0.1", None), ("0.0.0.0", None), (None, None)],
)
def test_network_ip(monkeypatch, answer, expected):
    monkeypatch.setattr(network.socket, "socket", lambda *a: FakeSocket(answer))
    assert network.network_ip() == expected


def test_agrees_with_streamlits_network_url():
    ours = network.network_ip()
    theirs = net_util.get_internal_ip()
    assert ours == (None if network.is_loopback(theirs) else theirs)


def test_host_port():
    assert network.host_port("10.0.0.7", 8501) == "10.0.0.7:8501"
    assert network.host_port("fe80::1", 8501) == "[fe80::1]:8501"
    assert network.host_port("10.0.0.7", None) == "10.0.0.7"
