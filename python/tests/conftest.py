"""Shared fixtures: a private image cache, and helpers to look at processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every test session converts images into its own cache."""
    cache = tmp_path_factory.mktemp("gvx-cache")
    old = os.environ.get("GVX_CACHE")
    os.environ["GVX_CACHE"] = str(cache)
    yield cache
    if old is None:
        del os.environ["GVX_CACHE"]
    else:
        os.environ["GVX_CACHE"] = old


# A command whose work is a child process, as an agent's commands usually are
# (`sh -c "pytest …"`, `make test`): a timeout or cancel must end the child too.
BUSY_CHILD = "sh -c ': gvx-busy-marker; while :; do :; done' & wait"
# What lists the guest's processes for busy_children.
PS = "ps -o stat,args"


def busy_children(ps_output: str) -> int:
    """How many live (not zombie) BUSY_CHILD loops a PS listing shows."""
    return sum(1 for line in ps_output.splitlines() if "gvx-busy-marker" in line and not line.lstrip().startswith("Z"))


def children_of(pid: int) -> list[int]:
    """Direct child processes of pid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def sandboxes_of(pid: int) -> list[int]:
    """Direct child processes of pid that are sandboxes (rungv).

    Other children, such as the resource tracker that multiprocessing
    starts once and keeps for the life of the process, are not counted.
    """
    out = []
    for child in children_of(pid):
        try:
            exe = os.readlink(f"/proc/{child}/exe")
        except OSError:
            continue
        if os.path.basename(exe).startswith("rungv"):
            out.append(child)
    return out


def open_fds() -> set[str]:
    """This process's open descriptors, as 'fd -> target'."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:
            pass
    return out
