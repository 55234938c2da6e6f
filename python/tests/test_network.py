"""Network options of gvx.Sandbox: NAT to a host loopback server, published ports."""

from __future__ import annotations

import socket
import socketserver
import threading
from pathlib import Path
from typing import Iterator

import pytest

import gvx



def _first_reply(family: int, address: "str | tuple[str, int]") -> bytes:
    """What a published guest server first sends, trying for 5 s while it starts."""
    for _ in range(100):
        with socket.socket(family) as c:
            try:
                c.connect(address)
                data = c.recv(100)
            except OSError:
                data = b""
        if data:
            return data
        threading.Event().wait(0.05)
    return b""


def test_parse_port() -> None:
    assert gvx.parse_port("8080:80") == {"host_port": 8080, "guest_port": 80}
    assert gvx.parse_port("127.0.0.1:8080:80/udp") == {"host_port": 8080, "guest_port": 80, "host_ip": "127.0.0.1", "protocol": "udp"}
    assert gvx.parse_port("unix:/tmp/d.sock:2375") == {"host_path": "/tmp/d.sock", "guest_port": 2375}
    # No host port, or 0: the host picks one.
    assert gvx.parse_port("80") == {"host_port": 0, "guest_port": 80}
    assert gvx.parse_port("127.0.0.1::53/udp") == {"host_port": 0, "guest_port": 53, "host_ip": "127.0.0.1", "protocol": "udp"}
    for bad in ("127.0.0.1:80", "a:b", "unix:/x"):
        with pytest.raises(gvx.InvalidArgumentError, match="GUESTPORT"):
            gvx.parse_port(bad)


@pytest.fixture
def echo_server() -> Iterator[int]:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.wfile.write(b"hello from the host: " + self.rfile.readline())

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_nat_reaches_host_loopback_only_when_allowed(echo_server: int) -> None:
    with gvx.Sandbox(network="nat", host_loopback=True) as sb:
        r = sb.exec(f"echo ping | nc 10.0.2.2 {echo_server}", timeout=20)
        assert r.stdout == "hello from the host: ping\n", r
    with gvx.Sandbox(network="nat") as sb:  # no host_loopback: the host is off limits
        r = sb.exec(f"echo ping | nc -w 2 10.0.2.2 {echo_server}", timeout=20)
        assert "hello" not in r.stdout
    with gvx.Sandbox() as sb:  # network="none": no route at all
        r = sb.exec(f"echo ping | nc -w 2 10.0.2.2 {echo_server}", timeout=20)
        assert r.exit_code != 0 and "hello" not in r.stdout


def test_nat_after_a_restore(echo_server: int, tmp_path: Path) -> None:
    """The guest used the NAT before the snapshot; the restored sandbox gets a
    new eth0 and reaches the host again. A NAT sandbox must stop to be saved."""
    snap = tmp_path / "nat.snap"
    with gvx.Sandbox(network="nat", host_loopback=True) as sb:
        assert sb.exec(f"echo before | nc 10.0.2.2 {echo_server}", timeout=20).stdout == "hello from the host: before\n"
        with pytest.raises(gvx.InvalidArgumentError, match="only be checkpointed with --stop"):
            sb.checkpoint(snap)
        sb.checkpoint(snap, stop=True)
    for i in range(2):
        with gvx.Sandbox(network="nat", host_loopback=True, restore=snap) as ep:
            r = ep.exec(f"echo after{i} | nc 10.0.2.2 {echo_server}", timeout=20)
            assert r.stdout == f"hello from the host: after{i}\n", r


def test_published_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "svc.sock"
    with gvx.Sandbox(ports=[f"unix:{sock}:8000"]) as sb:
        sb.exec("nc -l -p 8000 -e echo served-by-guest >/dev/null 2>&1 &")
        assert _first_reply(socket.AF_UNIX, str(sock)) == b"served-by-guest\n"
    assert not sock.exists(), "the published socket outlived the sandbox"


def test_a_host_port_the_host_picks() -> None:
    """A fleet publishing the same guest port cannot choose host ports without
    races: ports=["8000"] lets the host pick, and sb.port(8000) says which."""
    with gvx.Sandbox(ports=["8000"]) as a, gvx.Sandbox(ports=["127.0.0.1::8000"]) as b:
        for i, sb in enumerate((a, b)):
            p = sb.port(8000)
            assert p.host_ip == "127.0.0.1" and p.host_port > 0 and p.protocol == "tcp" and sb.info.ports == (p,)
            sb.exec(f"nc -l -p 8000 -e echo served-by-{i} >/dev/null 2>&1 &")
            assert _first_reply(socket.AF_INET, (p.host_ip, p.host_port)) == f"served-by-{i}\n".encode()
        assert a.port(8000).host_port != b.port(8000).host_port
        with pytest.raises(gvx.NotFoundError, match=r'ports=\["9000"\]'):
            a.port(9000)
