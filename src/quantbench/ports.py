"""Ports and hosts: pick a free port safely, say clearly when a chosen one is taken, tell a
loopback host from one other machines reach."""

from __future__ import annotations

import socket

from quantbench.errors import UserError


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
