"""Shared fixtures: a private image cache, helpers to look at processes and to
Ctrl-C a harness in a child process, the reliability battery's counts and
report, and the session's Ray cluster."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator, Optional

import pytest

import raycluster
from waiting import wait_until


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


def live_parents() -> dict[int, int]:
    """Every live (not zombie) process on the host and its parent, from one
    pass over /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            out[int(entry)] = int(fields[1])
    return out


def children_of(pid: int) -> list[int]:
    """Direct child processes of pid."""
    return [p for p, parent in live_parents().items() if parent == pid]


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


def rss_kib() -> int:
    """This process's resident set size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def threads() -> int:
    """This process's threads."""
    return len(os.listdir("/proc/self/task"))


# System calls an idle thread waits in (x86-64 numbers): futex (Go's parked
# threads, Python's locks), epoll_pwait and epoll_wait (Go's network
# poller), nanosleep (Go's sysmon).
IDLE_WAITS = {"202", "281", "232", "35"}


def blocked_threads() -> list[str]:
    """The system calls this process's threads are blocked in, idle waits
    (IDLE_WAITS) and running threads left out: a thread leaked per sandbox
    (in wait4, read, waitid, ...) shows here, Go's pool of parked threads
    does not."""
    out = []
    for tid in os.listdir("/proc/self/task"):
        try:
            nr = Path(f"/proc/self/task/{tid}/syscall").read_text().split()[0]
        except (OSError, IndexError):
            continue
        if nr != "running" and nr not in IDLE_WAITS:
            out.append(nr)
    return sorted(out)


def files_under(root: Path) -> set[str]:
    """Every path below root (files and directories), relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def live(pid: int) -> bool:
    """Whether pid is a process that is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2 :].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children, their children, ...).

    One pass over /proc, not one per process found: with 64 Docker sandboxes
    (about a thousand rungv processes) a pass per process took the load
    test's watcher longer than the run."""
    kids: dict[int, list[int]] = {}
    for p, parent in live_parents().items():
        kids.setdefault(parent, []).append(p)
    out, todo = [], [pid]
    while todo:
        found = kids.get(todo.pop(), [])
        out += found
        todo += found
    return out


class PythonChild:
    """A child Python process running code, with python/ and python/tests on
    its path, whose stdout the test reads line by line with a deadline (to
    wait for what the child announces) and whose stdin, left open, it may
    close to let the child go on."""

    def __init__(self, code: str) -> None:
        tests = Path(__file__).resolve().parent
        path = [str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")]
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )
        self._lines: queue.Queue[Optional[str]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, out: Optional[IO[str]]) -> None:
        assert out is not None
        for line in out:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self, prefix: str, timeout: float) -> str:
        """The next line of stdout that starts with prefix (others are
        skipped); AssertionError, with the child's stderr, if none comes
        within timeout seconds or stdout ends first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"after {timeout:g} s: no line {prefix!r} from the child; stderr:\n{self.stderr()}") from None
            if line is None:
                raise AssertionError(f"the child's stdout ended before a line {prefix!r}; stderr:\n{self.stderr()}")
            if line.startswith(prefix):
                return line

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def close(self) -> None:
        """Kills the child if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)  # it ends at the dead child's end of stdout, before the pipe is closed
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        self._stderr.close()


# What a child announces once its command runs in its sandbox ("RUNNING
# <rungv pid>"), and once Ctrl-C reached its harness ("INTERRUPTED ...").
RUNNING = "RUNNING "
INTERRUPTED = "INTERRUPTED"

# Runs in a Ctrl-C child as a thread: announces RUNNING once the sandbox sb
# lists a process whose command line is exactly COMMAND.
ANNOUNCE_RUNNING = """
def _announce(sb, command):
    import threading
    from waiting import wait_until
    def run():
        wait_until(lambda: command in [l.strip() for l in sb.exec("ps -o args").stdout.splitlines()],
                   120, f"{command!r} running in the sandbox")
        print("RUNNING", sb.pid, flush=True)
    threading.Thread(target=run, daemon=True).start()
"""


def ctrl_c(code: str, interrupted: Callable[[int, str], None]) -> None:
    """Runs code in a child Python process; once it announces RUNNING, sends
    it SIGINT (Ctrl-C); once it announces INTERRUPTED (it caught the
    KeyboardInterrupt and waits for its stdin to close), calls
    interrupted(rungv pid, the INTERRUPTED line) to check the sandbox's state
    while the harness still runs; then lets the child re-raise and asserts
    that it dies of the interrupt and that no process its sandbox started
    (rungv and its children) is left."""
    child = PythonChild(code)
    try:
        pid = int(child.line(RUNNING, 180)[len(RUNNING) :])
        assert sandboxes_of(child.proc.pid) == [pid]
        started = [pid, *descendants(pid)]
        child.proc.send_signal(signal.SIGINT)
        interrupted(pid, child.line(INTERRUPTED, 30))
        assert child.proc.stdin is not None
        child.proc.stdin.close()
        try:
            rc = child.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the child did not exit within 60 s of its interrupt; stderr:\n{child.stderr()}") from None
        # Python ends a process that a KeyboardInterrupt ended by SIGINT.
        assert rc == -signal.SIGINT and "KeyboardInterrupt" in child.stderr(), (rc, child.stderr())
        wait_until(lambda: not any(live(p) for p in started), 30, "every process of the child's sandbox gone",
                   lambda: [p for p in started if live(p)])
    finally:
        child.close()


# `make reliability` sets GVX_RELIABILITY_FULL=1 for the battery's full counts
# and GVX_RELIABILITY_REPORT to the file that collects every part's figures.
def reliability_count(cheap: int, full: int) -> int:
    """cheap in `make test`, full in `make reliability`."""
    return full if os.environ.get("GVX_RELIABILITY_FULL") == "1" else cheap


def report_table(title: str, header: list[str], *rows: list[str]) -> None:
    """Prints a markdown table of figures and appends it to $GVX_RELIABILITY_REPORT."""
    lines = [title, "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    report = os.environ.get("GVX_RELIABILITY_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(text + "\n")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[raycluster.Cluster]:
    """One three-node Ray cluster, loopback only, for every test that asks for it."""
    import shutil
    import tempfile
    import time

    why = raycluster.skip_reason()
    if why:
        pytest.skip(why)
    # A short path: Ray's Unix sockets live under it.
    tmp = Path(tempfile.mkdtemp(prefix="gvxray-", dir="/tmp"))
    c = raycluster.Cluster(tmp)
    try:
        start = time.monotonic()
        c.start()
        print(f"cluster of {len(raycluster.NODES)} nodes up in {time.monotonic() - start:.1f} s")
        yield c
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# The directory of the gvx package of this checkout.
PYTHON_DIR = Path(__file__).resolve().parents[1]


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs code in a Python of its own that imports this checkout's gvx."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)


def readme_example(heading: str) -> str:
    """The first ```python block of the README after the line ``heading``."""
    readme = (PYTHON_DIR.parent / "README.md").read_text()
    section = readme[readme.index(heading + "\n") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    return code[: code.index("```")]
