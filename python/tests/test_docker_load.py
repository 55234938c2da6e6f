"""The load part of the reliability battery: many concurrent Docker episodes,
as an RL run drives them, for minutes on end; none may fail.

`make reliability` keeps 64 episodes in flight for 10 minutes; `make test`
runs 2 for about 20 s, so the test itself runs in CI. For development,
GVX_LOAD_IN_FLIGHT and GVX_LOAD_SECONDS override both.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

import pytest

import gvx
from conftest import descendants, files_under, open_fds, reliability_count, report_table, sandboxes_of
from test_docker import ARCHIVE, BASE, DIND_IMAGE, pytestmark  # noqa: F401 - pytestmark skips without the image

# What a container of an episode writes into the named volume "data"; the
# reward check reads it from dockerd's volume directory afterwards.
VOLUME_FILE = "/var/lib/docker/volumes/data/_data/f"


@dataclass(frozen=True)
class Step:
    """One action of an episode: a shell command, the stdout it must print,
    and how many docker commands it runs."""

    command: str
    stdout: str
    docker_commands: int


def episode_steps(n: int) -> list[Step]:
    """What episode n runs: real work for dockerd (a container of an image
    from the golden, a build, a volume written by one container and read by
    another), leaving no container behind."""
    return [
        Step(f"docker run --rm {BASE} echo episode-{n}", f"episode-{n}\n", 1),
        Step(
            f"mkdir -p /w && printf 'FROM {BASE}\\nRUN echo built-{n} > /built\\n' > /w/Dockerfile && "
            f"docker build -q -t ep{n} /w >/dev/null && docker run --rm ep{n} cat /built",
            f"built-{n}\n",
            2,
        ),
        Step(
            f"docker volume create data >/dev/null && "
            f"docker run --rm -v data:/data {BASE} sh -c 'echo payload-{n} > /data/f' && "
            f"docker run --rm -v data:/data {BASE} cat /data/f",
            f"payload-{n}\n",
            3,
        ),
        Step("docker ps -aq", "", 1),
    ]


class EpisodeFailed(Exception):
    """An episode's command failed or printed what it should not have."""


def dockerd_log(sb: gvx.Sandbox) -> str:
    """The end of dockerd's log in sb, or why it could not be read."""
    try:
        return sb.exec(f"tail -n 30 {gvx.docker.LOG}", timeout=60).stdout
    except gvx.GvxError as e:
        return f"(dockerd's log unreadable: {e})"


def reward(sb: gvx.Sandbox, n: int) -> float:
    """1 when the container's write reached the volume, as the episode's task asked."""
    return 1.0 if sb.read_file(VOLUME_FILE) == f"payload-{n}\n".encode() else 0.0


def run_episode(env: gvx.GvxEnv, n: int) -> int:
    """Runs episode n on env; returns the docker commands it ran.

    Raises EpisodeFailed (or the sandbox's error) with what went wrong.
    """
    env.reset()
    sb = env.sandbox
    ran = 0
    for step in episode_steps(n):
        obs, _, terminated, truncated, info = env.step(step.command)
        ran += step.docker_commands
        if obs["exit_code"] != 0 or obs["stdout"] != step.stdout or info["timed_out"]:
            raise EpisodeFailed(
                f"episode {n}, rungv pid {sb.pid}: {step.command!r}\n"
                f"exit {obs['exit_code']} (timed out: {info['timed_out']}), wanted stdout {step.stdout!r}\n"
                f"stdout: {obs['stdout']!r}\nstderr: {obs['stderr']!r}\n"
                f"dockerd's log ends:\n{dockerd_log(sb)}"
            )
        assert not terminated and not truncated, (n, step.command, info)
    got = reward(sb, n)
    if got != 1.0:
        raise EpisodeFailed(f"episode {n}, rungv pid {sb.pid}: reward {got}: {VOLUME_FILE} holds {sb.read_file(VOLUME_FILE)!r}")
    return ran


@dataclass
class Load:
    """What the episode threads share: the episode numbers, the figures, the failures."""

    deadline: float
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_episode: int = 0
    times: list[float] = field(default_factory=list)
    docker_commands: int = 0
    failures: list[str] = field(default_factory=list)

    def take(self) -> Optional[int]:
        """The next episode's number, or None once the run is over."""
        with self.lock:
            if self.stop.is_set() or time.monotonic() >= self.deadline:
                return None
            self.next_episode += 1
            return self.next_episode

    def done(self, seconds: float, docker_commands: int) -> None:
        with self.lock:
            self.times.append(seconds)
            self.docker_commands += docker_commands

    def failed(self, what: str) -> None:
        with self.lock:
            self.failures.append(what)
        self.stop.set()


def episode_thread(load: Load, golden: gvx.Volume, episode_dir: Path, step_timeout: float) -> None:
    """Runs one episode after another on one environment, as an RL worker does."""
    try:
        with gvx.GvxEnv(
            DIND_IMAGE,
            golden=golden,
            setup=gvx.docker.SETUP,
            warm=0,
            step_timeout=step_timeout,
            episode_dir=str(episode_dir),
            on_sandbox_failure="raise",
            **gvx.docker.SANDBOX_OPTIONS,
        ) as env:
            while (n := load.take()) is not None:
                start = time.monotonic()
                try:
                    ran = run_episode(env, n)
                except Exception as e:  # every failure is the test's finding
                    load.failed(f"{type(e).__name__}: {e}")
                    return
                load.done(time.monotonic() - start, ran)
    except Exception as e:
        load.failed(f"the environment failed: {type(e).__name__}: {e}")


def meminfo() -> dict[str, int]:
    """/proc/meminfo in KiB."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":")
            out[key] = int(value.split()[0])
    return out


def rungvs_below(pid: int) -> list[int]:
    """Every rungv process below pid: the sandboxes and their systrap stubs."""
    out = []
    for p in descendants(pid):
        try:
            if os.path.basename(os.readlink(f"/proc/{p}/exe")).startswith("rungv"):
                out.append(p)
        except OSError:
            continue
    return out


def status_kib(pid: int, key: str) -> int:
    """A field of /proc/pid/status in KiB (0 once pid is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def sandbox_memory_kib(pids: list[int]) -> tuple[int, int]:
    """What the sandboxes pids hold of the host's memory: their own (anonymous
    pages, and the pages allocated in their memory files, mapped or not, each
    file counted once), and the sum of their RSS, which counts the pages they
    share (the rungv binary, the image's file pages) once per process."""
    own = rss = 0
    memfds: set[tuple[int, int]] = set()
    for p in pids:
        own += status_kib(p, "RssAnon")
        rss += status_kib(p, "VmRSS")
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{p}/fd/{fd}"
            try:
                if not os.readlink(path).startswith("/memfd:"):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in memfds:
                memfds.add((st.st_dev, st.st_ino))
                own += st.st_blocks // 2
    return own, rss


@dataclass
class HostWatch:
    """Samples the host while the load runs: MemAvailable's low water and the
    sandboxes' memory at its peak."""

    interval: float = 5.0
    stop: threading.Event = field(default_factory=threading.Event)
    mem_available_low_kib: int = 1 << 62
    own_peak_kib: int = 0
    rss_peak_kib: int = 0
    sandboxes_peak: int = 0

    def run(self) -> None:
        me = os.getpid()
        while True:
            self.mem_available_low_kib = min(self.mem_available_low_kib, meminfo()["MemAvailable"])
            pids = rungvs_below(me)
            own, rss = sandbox_memory_kib(pids)
            self.own_peak_kib = max(self.own_peak_kib, own)
            self.rss_peak_kib = max(self.rss_peak_kib, rss)
            self.sandboxes_peak = max(self.sandboxes_peak, len(sandboxes_of(me)))
            if self.stop.wait(self.interval):
                return


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the sandboxes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[gvx.Volume]:
    work = tmp_path_factory.mktemp("docker-load-golden")
    yield gvx.docker.golden(DIND_IMAGE, archives=[ARCHIVE], volume=work / "golden.ext4", size="2g", progress=False)


def _override(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


@pytest.mark.battery
# In full, 64 episodes on 2 cores each take about 40 minutes.
@pytest.mark.timeout(reliability_count(900, 3 * 3600))
def test_concurrent_docker_episodes_none_fail(golden: gvx.Volume, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Episodes kept in flight (each thread starting a new one when its last
    ends) for the whole duration: every docker command succeeds with the
    output it should, every reward is 1, and afterwards no rungv, episode
    clone or cache file is left and the test's descriptors are as before."""
    in_flight = _override("GVX_LOAD_IN_FLIGHT", reliability_count(2, 64))
    seconds = _override("GVX_LOAD_SECONDS", reliability_count(20, 600))
    # Episodes may be slow under load, never stuck: on 2 cores shared with
    # other work, one docker run among 24 in flight took over 120 s.
    step_timeout = float(reliability_count(600, 1800))
    episode_dir = tmp_path / "episodes"
    episode_dir.mkdir()
    cache = Path(os.environ["GVX_CACHE"])
    me = os.getpid()
    fds_before, cache_before = open_fds(), files_under(cache)
    total_kib = meminfo()["MemTotal"]
    cpu_before, start = cpu_seconds(), time.monotonic()

    load = Load(deadline=start + seconds)
    watch = HostWatch()
    watcher = threading.Thread(target=watch.run, name="load-watch")
    watcher.start()
    workers = [
        threading.Thread(target=episode_thread, args=(load, golden, episode_dir, step_timeout), name=f"load-{i}")
        for i in range(in_flight)
    ]
    for w in workers:
        w.start()
    # Every thread ends by itself: its episode's commands are bounded by
    # step_timeout, and it starts none after the deadline.
    for w in workers:
        w.join()
    elapsed = time.monotonic() - start
    cpu = cpu_seconds() - cpu_before
    watch.stop.set()
    watcher.join()
    rungv_stderr = capfd.readouterr().err

    # Nothing of the run outlives it.
    leftover_rungv = rungvs_below(me)
    leftover_clones = sorted(p.name for p in episode_dir.iterdir())
    new_cache = sorted(files_under(cache) - cache_before)
    fds_after = open_fds()

    # The figures go to the report whatever the outcome.
    times = sorted(load.times) or [float("nan")]
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    gib = 1 << 20
    cores = len(os.sched_getaffinity(0))
    report_table(
        f"Concurrent Docker episodes (GvxEnv on a golden volume: dockerd start, docker run, docker build, "
        f"a volume written and read, docker ps; {cores} cores, {total_kib / gib:.0f} GiB shared with other work)",
        [
            "in flight", "duration", "episodes completed", "failed", "episode time p50 / p99 / max",
            "docker commands", "host CPU (test + sandboxes)",
            "peak memory: sandboxes' own (RSS sum)", "MemAvailable low water", "leftovers (rungv, clones, cache files, fds)",
        ],
        [
            str(in_flight),
            f"{elapsed:.0f} s (new episodes for {seconds} s)",
            str(len(load.times)),
            str(len(load.failures)),
            f"{statistics.median(times):.0f} / {p99:.0f} / {times[-1]:.0f} s",
            str(load.docker_commands),
            f"{cpu:.0f} core-s ({cpu / elapsed / cores * 100:.0f}% of {cores} cores)",
            f"{watch.own_peak_kib / gib:.1f} GiB, {watch.own_peak_kib / 1024 / max(1, watch.sandboxes_peak):.0f} MiB a sandbox "
            f"({watch.sandboxes_peak} at most) ({watch.rss_peak_kib / gib:.1f} GiB)",
            f"{watch.mem_available_low_kib / gib:.1f} of {total_kib / gib:.1f} GiB",
            f"{len(leftover_rungv)}, {len(leftover_clones)}, {len(new_cache)}, {len(fds_before)} → {len(fds_after)}",
        ],
    )
    assert not load.failures, (
        f"{len(load.failures)} of {load.next_episode} episodes failed; their last lines:\n"
        + "\n".join(f"- {f.strip().splitlines()[-1][:300]}" for f in load.failures)
        + f"\nthe first in full:\n{load.failures[0]}\nrungv's stderr (all sandboxes) ends:\n{rungv_stderr[-4000:]}"
    )
    assert len(load.times) == load.next_episode >= in_flight, "every thread completes at least one episode"

    assert not leftover_rungv, f"rungv processes {leftover_rungv} outlive their episodes"
    assert not leftover_clones, f"episode clones left behind: {leftover_clones}"
    assert not new_cache, f"files left in the cache: {new_cache}"
    assert len(fds_after) == len(fds_before), f"descriptors leak: {sorted(fds_after ^ fds_before)}"
