"""A host is an address: one given with a port or as a URL is said as such, not as an address
other machines reach (quantbench.ports.host_problem, held by bench.host)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quantbench.ports import host_problem


def test_a_host_with_a_port_or_a_scheme_is_named_with_the_fix() -> None:
    for host, address in (("127.0.0.1:8000", "127.0.0.1"), ("[::1]:8000", "::1"),
                          ("localhost:80", "localhost")):  # fmt: skip
        problem = host_problem(host)
        assert problem is not None and "holds a port" in problem, host
        assert f"give the address alone ({address})" in problem
    assert "is a URL" in str(host_problem("http://127.0.0.1"))
    assert "neither an IP address nor a host name" in str(host_problem("my host"))
    for host in ("127.0.0.1", "::1", "::", "localhost", "node-3.cluster.local", "0.0.0.0"):
        assert host_problem(host) is None, host


def test_bench_host_with_a_port_is_not_called_non_loopback() -> None:
    """127.0.0.1:8000 was refused as 'not a loopback address', with the fix to expose the
    servers (allow_non_loopback)."""
    from quantbench.bench.spec import BenchSettings

    with pytest.raises(ValidationError) as err:
        BenchSettings(host="127.0.0.1:8000")
    text = str(err.value)
    assert "holds a port" in text and "not a loopback" not in text
    assert "allow_non_loopback" not in text
    with pytest.raises(ValidationError, match="not a loopback address"):
        BenchSettings(host="10.0.0.1")
    assert BenchSettings(host="10.0.0.1", allow_non_loopback=True).host == "10.0.0.1"
