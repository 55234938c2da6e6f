"""What gvx calls return: frozen descriptions of how a command ended, a sandbox, a file."""

from __future__ import annotations

import html
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class ExecResult:
    """How a command ended. ``stdout``/``stderr`` decode the raw bytes as UTF-8."""

    exit_code: int
    stdout_bytes: bytes
    stderr_bytes: bytes
    duration: float
    timed_out: bool = False
    signal: int = 0
    truncated: bool = False

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def _repr_html_(self) -> str:
        color = "#2a7" if self.ok else "#c33"
        parts = [f"<div><b style='color:{color}'>exit {self.exit_code}</b> in {self.duration * 1000:.1f} ms"]
        if self.timed_out:
            parts.append(" (timed out)")
        parts.append("</div>")
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                parts.append(f"<details open><summary>{name}</summary><pre>{html.escape(text[-20000:])}</pre></details>")
        return "".join(parts)


@dataclass(frozen=True)
class PublishedPort:
    """A guest port reachable from the host: at ``host_ip:host_port``, or at the unix
    socket ``host_path``."""

    guest_port: int
    protocol: str = "tcp"
    host_ip: str = ""
    host_port: int = 0
    host_path: str = ""

    @property
    def address(self) -> str:
        """``host_ip:host_port`` (``[ip]:port`` for IPv6), or the socket path."""
        if self.host_path:
            return self.host_path
        ip = f"[{self.host_ip}]" if ":" in self.host_ip else self.host_ip
        return f"{ip}:{self.host_port}"


@dataclass(frozen=True)
class SandboxInfo:
    """What a sandbox is: its id, the rungv process, the image and its published ports."""

    id: str
    pid: int
    image: str
    hostname: str
    platform: str
    spinning: bool
    rungv: str
    ports: tuple[PublishedPort, ...] = ()


@dataclass(frozen=True)
class SandboxStats:
    """A sandbox's resource use: host memory it holds (bytes), guest tasks, OOM kills."""

    memory_usage: int
    tasks: int
    oom_kills: int = 0
    memory_limit: int = 0
    pids_limit: int = 0


@dataclass(frozen=True)
class FileInfo:
    """A file in the sandbox, as ``stat(2)`` describes it (symlinks followed)."""

    path: str
    mode: int  # file type and permission bits, as os.stat's st_mode
    size: int
    uid: int
    gid: int
    mtime: float  # seconds since the epoch

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    @property
    def permissions(self) -> int:
        """The permission bits (``0o755``), with set-user-ID, set-group-ID and sticky."""
        return stat.S_IMODE(self.mode)
