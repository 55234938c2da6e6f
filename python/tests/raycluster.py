"""A real three-node Ray cluster on this machine, for the gvx.ray tests.

Ray binds to and dials the machine's interface address unless told not to,
and no test may send traffic beyond loopback. So the cluster runs in network
and PID namespaces made here (only ``lo`` up), every Ray process on
``--node-ip-address=127.0.0.1``. The PID namespace keeps ``ray stop`` to this
cluster's processes and ends them all when its first process exits, even if
pytest is killed.

A test's driver runs inside the namespaces too: a test file run as a script
(``python FILE NAME ADDRESS``, see :meth:`Cluster.run`), whose functions Ray
then ships to the nodes by value. The cluster is sized for 2 cores: three
nodes of one CPU. One cluster serves the whole test session (the
``ray_cluster`` fixture in conftest.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
PORT = 6379  # free: the namespace has its own ports
NODES = ("node_a", "node_b", "node_c")
PAIR = "pair"  # a resource only node_a and node_b advertise
# How long one driver may run; the driver's own alarm (driver_alarm) ends it first.
DRIVER_TIMEOUT = 240.0

# The namespaces' first process: brings lo up, says so, and reaps orphans
# (daemonised Ray processes end up its children) until its stdin closes.
NAMESPACE_INIT = """
import os, subprocess, sys, threading
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
print("ready", flush=True)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
while True:
    try:
        os.wait()
    except ChildProcessError:
        threading.Event().wait(0.5)
"""


def skip_reason() -> Optional[str]:
    """Why this machine cannot run the cluster, or None."""
    if os.geteuid() != 0:
        return "the Ray tests run their cluster in a network namespace with only lo, which needs root (unshare -n)"
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: pip install 'gvx[ray]' (make test installs it)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is missing: apt-get install util-linux iproute2"
    return None


class Cluster:
    """A Ray cluster in its own network and PID namespaces."""

    def __init__(self, tmp: Path, cpu_of: Optional[dict[str, int]] = None) -> None:
        """cpu_of pins a node (by name) to one host CPU: its raylet, and with
        it the node's workers and their sandboxes, run there alone, as on a
        machine of its own (for benchmarks)."""
        self.tmp = tmp
        self.cpu_of = cpu_of or {}
        self.address = f"127.0.0.1:{PORT}"
        self.env = dict(os.environ)
        self.env.update(
            PYTHONPATH=os.pathsep.join([str(HERE.parent), str(HERE)]),
            GVX_CACHE=str(tmp / "gvx-cache"),
            RAY_USAGE_STATS_ENABLED="0",
        )
        self.init = subprocess.Popen(
            ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable, "-c", NAMESPACE_INIT],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        assert self.init.stdout is not None
        ready, _, _ = select.select([self.init.stdout], [], [], 30)
        line = self.init.stdout.readline().decode() if ready else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the namespace did not come up within 30 s: {line!r}")
        self.ns_pid = self._child_of(self.init.pid)

    @staticmethod
    def _child_of(pid: int) -> int:
        # Called once the namespace's process said "ready": it exists, so
        # one read of unshare's children finds it.
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            children = []
        if not children:
            raise RuntimeError(f"unshare (pid {pid}) has no namespace process, though it said it was ready")
        return int(children[0])

    def command(self, *args: str) -> list[str]:
        """args run inside the namespaces."""
        return ["nsenter", "-t", str(self.ns_pid), "-n", "-p", "-m", f"--wd={os.getcwd()}", "--", *args]

    def ray(self, *args: str, timeout: float = 120, env: Optional[dict[str, str]] = None, cpu: Optional[int] = None) -> None:
        ray_cli = [str(Path(sys.executable).parent / "ray")]
        if cpu is not None:
            ray_cli = ["taskset", "-c", str(cpu), *ray_cli]
        r = subprocess.run(self.command(*ray_cli, *args), env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")

    _NODE_FLAGS = ("--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=80000000", "--disable-usage-stats")

    def start(self) -> None:
        self.ray("start", "--head", f"--port={PORT}", "--include-dashboard=false", f"--temp-dir={self.tmp / 'ray'}",
                 self._resources(NODES[0]), *self._NODE_FLAGS, env=self.node_env(NODES[0]), cpu=self.cpu_of.get(NODES[0]))
        for name in NODES[1:]:
            self.add_node(name)

    def add_node(self, name: str) -> None:
        """Starts a worker node whose custom resource is name (one of NODES)."""
        self.ray("start", f"--address={self.address}", self._resources(name), *self._NODE_FLAGS, env=self.node_env(name), cpu=self.cpu_of.get(name))

    @staticmethod
    def _resources(name: str) -> str:
        # Each node advertises its name; the first two also "pair", for
        # tests that need exactly two nodes.
        resources = {name: 1, **({PAIR: 2} if name in NODES[:2] else {})}
        return "--resources=" + json.dumps(resources)

    def node_env(self, name: str) -> dict[str, str]:
        """Each node has a gvx cache of its own, as separate machines do."""
        return {"GVX_CACHE": str(self.tmp / f"gvx-cache-{name}")}

    def run(
        self, script: Path, name: str, *args: str, env: Optional[dict[str, str]] = None, timeout: float = DRIVER_TIMEOUT
    ) -> str:
        """Runs ``python script name ADDRESS args...`` inside the namespaces as a
        driver of this cluster; returns its stdout, failing if it fails. The
        driver must end itself within timeout (driver_alarm)."""
        return self._python(script, [name, self.address, *args], env or {}, f"{script.name} {name}", timeout)

    def run_as_user(self, script: Path, *args: str) -> str:
        """Runs ``python script args...`` inside the namespaces as a user runs
        it on a cluster's machine: with ``RAY_ADDRESS`` set, nothing else."""
        return self._python(script, list(args), {"RAY_ADDRESS": self.address}, script.name, DRIVER_TIMEOUT)

    def _python(self, script: Path, args: list[str], env: dict[str, str], what: str, timeout: float) -> str:
        start = time.monotonic()
        r = subprocess.run(
            self.command(sys.executable, str(script), *args),
            env={**self.env, **env}, capture_output=True, text=True, timeout=timeout + 30,
        )
        print(f"{what}: {time.monotonic() - start:.1f} s\n{r.stdout}")
        assert r.returncode == 0, f"{what} failed ({r.returncode}):\n{r.stdout[-5000:]}\n{r.stderr[-8000:]}"
        return r.stdout

    def stop(self) -> None:
        try:
            self.ray("stop", "--force", timeout=60)
        finally:
            # Closing its stdin ends the namespaces' first process, and with it
            # every process left in them.
            assert self.init.stdin is not None
            self.init.stdin.close()
            try:
                self.init.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.init.kill()
                self.init.wait(timeout=30)


def connect(address: str) -> dict[str, str]:
    """Joins the cluster from a driver inside the namespaces; returns each
    node's id -> its custom resource name (one of NODES)."""
    import ray

    ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
    assert len(nodes) == len(NODES), nodes
    # Nothing of Ray may be reached beyond loopback.
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}, [n["NodeManagerAddress"] for n in nodes]
    names = {}
    for n in nodes:
        (name,) = [r for r in n["Resources"] if r in NODES]
        names[n["NodeID"]] = name
    return names


def driver_alarm(seconds: float = DRIVER_TIMEOUT) -> None:
    """A driver never outlives its test."""
    import signal

    signal.alarm(int(seconds))


def raylet_of(name: str) -> int:
    """The pid of the raylet of the node whose custom resource is name; run
    inside the cluster's PID namespace (a driver)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"raylet" and any(name.encode() in a for a in argv):
            found.append(int(entry))
    if len(found) != 1:
        raise RuntimeError(f"raylets of {name}: {found}; want one")
    return found[0]
