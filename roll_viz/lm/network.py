"""This server's address on the local network: the one phones in the room can open.

A browser on the server itself shows ``localhost`` (or ``127.0.0.1``, ``[::1]``), which a phone
cannot open. The lesson page's room link and QR code, and ``python -m roll_viz serve``'s start
lines, use this address instead. The lookup is the one behind Streamlit's "Network URL"
(``streamlit.net_util.get_internal_ip``): a UDP socket "connected" to a public address (no
packet is sent) reports the address of the interface the system would route through. Written
out here because the command line may not import Streamlit (tests/test_layers.py), and not
cached for the process as Streamlit's is: a laptop that joins the classroom wifi after the
server started gets its address on the next page run (the lookup costs microseconds).
"""

from __future__ import annotations

import ipaddress
import socket

#: where the probe socket "connects" (any routable address: nothing is sent)
PROBE = ("8.8.8.8", 1)
DEFAULT_PORT = 8501  # Streamlit's


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an IP, IPv6 with or without brackets) is this machine only."""
    if not host:
        return False
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def network_ip() -> str | None:
    """This machine's IPv4 address on its network, or None when it has none (offline).

    None as well for a loopback or unspecified answer: no phone could open that.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(PROBE)
            address = probe.getsockname()[0]
    except OSError:  # no route at all: no network interface is up
        return None
    if not address or is_loopback(address) or ipaddress.ip_address(address).is_unspecified:
        return None
    return address


def host_port(host: str, port: int | None) -> str:
    """``host:port`` as a URL writes it (IPv6 in brackets; no port when None)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return host if port is None else f"{host}:{port}"
