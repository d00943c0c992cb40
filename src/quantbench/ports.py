"""Ports and hosts: pick a free port safely, say clearly when a chosen one is taken, tell a
loopback host from one other machines reach."""

from __future__ import annotations

import socket

from quantbench.errors import UserError

# What validate checks here, one line each: docs/FAULTS.md's table is made of these
# (quantbench.checks; `python -m quantbench.validation --checks`).
CHECKS_WHERE = "settings"
CHECKS: tuple[tuple[str, str], ...] = (
    (
        "host",
        "bench.host given with a port or as a URL, or neither an IP address nor a host name; an "
        "address other machines reach unless bench.allow_non_loopback",
    ),
)


class PortInUseError(UserError):
    """The port a server was asked to use is already taken."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free now (bind to port 0). Another process may still take it before
    the server binds; `check_port_free` right before the start catches most of those races."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As servers do: a port whose last connections linger in TIME_WAIT is free to listen on;
        # only a live listener makes the bind fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortInUseError(
                f"port {port} on {host} is already in use ({exc.strerror}); stop whatever holds "
                f"it (`ss -ltnp 'sport = :{port}'` shows it) or choose another port"
            ) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_problem(host: str) -> str | None:
    """Why ``host`` is not an address a server can bind (None where it is one): a host given
    with a port (``127.0.0.1:8000``; quantbench picks each server's port), a URL, or a name
    that is neither an IP address nor a host name."""
    import ipaddress
    import re

    if "://" in host:
        return (
            f"host {host!r} is a URL; give the address alone (e.g. 127.0.0.1): quantbench "
            "starts each server on a free port of it"
        )
    bare, sep, port = host.rpartition(":")
    if sep and port.isdigit() and (bare.count(":") == 0 or bare.startswith("[")):
        address = bare.strip("[]")
        return (
            f"host {host!r} holds a port; give the address alone ({address}): quantbench "
            "starts each server on a free port of it"
        )
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    label = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
    if len(host) <= 253 and re.fullmatch(rf"{label}(\.{label})*", host):
        return None
    return f"host {host!r} is neither an IP address nor a host name; give one (e.g. 127.0.0.1)"
