"""One agent step through each harness adapter, beside the harness's own
Docker backend on the host's dockerd, in the same run.

    python benchmarks/harness_step.py [--docker-image IMAGE] [-n 30] [-m 10]

For mini-swe-agent, ``gvx.integrations.minisweagent.GvxEnvironment`` is
measured against ``minisweagent.environments.docker.DockerEnvironment`` (the
backend it stands in for) with ``run_args=["--rm", "--network", "none"]``,
both on the same busybox image (gvx's embedded default image; the Docker
backend gets the same image as ``docker load``-ed by ``make deps-docker`` or
``run.sh``) and both with the interpreter ``sh -lc`` (busybox has no bash).
SkyRL-Gym and verl have no Docker backend, so ``gvx.integrations.skyrl.GvxTextEnv``'s
and ``gvx.integrations.verl.GvxTool``'s figures stand alone. verl (with torch)
lives in a venv of its own (``make test-integrations`` makes it), so ``run.sh
harness`` runs this script twice, once in each venv; each run measures the
harnesses its venv has, beside the floor. ``gvx.Sandbox.exec`` of the same ``sh -lc`` command is
printed as the floor under both adapters.

Three things are timed, each through the harness's own call:

* one step, ``env.execute({"command": "echo hi"})`` (SkyRL:
  ``env.step("<bash>echo hi</bash>")``; verl: a tool call through
  ``ToolAgentLoop._call_tool``), over ``-n`` rounds;
* a heavier step, a shell loop with a pipe (two more processes);
* episode start → first command done: construct the environment and run
  the first ``echo hi`` (SkyRL: ``skyrl_gym.make`` → ``init`` → ``step``),
  over ``-m`` episodes. Stopping the environment is not timed; the Docker
  backend's container is removed with ``docker rm -f`` after each episode
  rather than by its ``cleanup`` (a ``docker stop`` in the background that
  waits 10 s for ``sleep``), so stopping containers does not load the
  rounds after it.

Every round runs each backend once, in an order that alternates round by
round (ABC, CBA, ...), so slow minutes on this shared machine fall on all
of them. Prints markdown; without a docker daemon (or the image in it) it
says why and prints gvx's figures alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import gvx

STEP = "echo hi"
HEAVY = "for i in $(seq 200); do echo $i; done | wc -l"
INTERPRETER = ["sh", "-lc"]


def docker_unavailable(image: Optional[str]) -> Optional[str]:
    """Why the Docker backend cannot run here, or None when it can."""
    if image is None:
        return "no --docker-image given"
    if shutil.which("docker") is None:
        return "no docker CLI on PATH"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        return f"`docker info` failed: {(info.stderr.strip().splitlines() or ['no output'])[-1]}"
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        return f"the image {image} is not in the daemon (`make deps-docker` or `docker load -i build/default-image.tar` loads it)"
    return None


def p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def expect(what: str, got: str, want: str) -> None:
    """Checks a step's output, so a broken backend is never timed as a fast one."""
    if got.strip() != want:
        raise SystemExit(f"harness_step: {what} gave {got!r}, expected {want!r}")


class Mini:
    """A mini-swe-agent environment class, stepped through ``execute``."""

    def __init__(self, name: str, make: Callable[[], Any], stop: Callable[[Any], None]) -> None:
        self.name, self.make, self.stop = name, make, stop

    def step(self, env: Any, command: str, want: str) -> float:
        out: dict[str, Any] = {}

        def call() -> None:
            out.update(env.execute({"command": command}))

        t = timed(call)
        expect(f"{self.name} execute({command!r})", out["output"], want)
        return t

    def episode(self) -> float:
        env: Any = None
        out: dict[str, Any] = {}

        def call() -> None:
            nonlocal env
            env = self.make()
            out.update(env.execute({"command": STEP}))

        try:
            t = timed(call)
        finally:
            if env is not None:
                self.stop(env)
        expect(f"{self.name} first execute", out["output"], "hi")
        return t


class Sky:
    """gvx's SkyRL-Gym environment, stepped through ``step``."""

    name = "SkyRL-Gym `GvxTextEnv` (gvx)"

    def __init__(self, rounds: int) -> None:
        import skyrl_gym

        import gvx.integrations.skyrl  # noqa: F401  # registers "gvx"

        self.skyrl_gym = skyrl_gym
        self.extras = {"test": "true", "max_turns": 10 * rounds + 10}

    def make(self) -> Any:
        env = self.skyrl_gym.make("gvx", env_config={}, extras=self.extras)
        env.init([{"role": "user", "content": "benchmark"}])
        return env

    def stop(self, env: Any) -> None:
        env.close()

    def step(self, env: Any, command: str, want: str) -> float:
        out: list[Any] = []
        t = timed(lambda: out.append(env.step(f"<bash>{command}</bash>")))
        expect(f"GvxTextEnv.step({command!r})", out[0]["observations"][0]["content"], f"{want}\n[exit code 0]")
        return t

    def episode(self) -> float:
        env: Any = None
        out: list[Any] = []

        def call() -> None:
            nonlocal env
            env = self.skyrl_gym.make("gvx", env_config={}, extras=self.extras)
            env.init([{"role": "user", "content": "benchmark"}])
            out.append(env.step(f"<bash>{STEP}</bash>"))

        try:
            t = timed(call)
        finally:
            if env is not None:
                env.close()
        expect("GvxTextEnv first step", out[0]["observations"][0]["content"], "hi\n[exit code 0]")
        return t


class Verl:
    """gvx's verl tool, called through verl's own ``ToolAgentLoop._call_tool``
    (create → execute → release around every call, the trajectory's calls
    sharing its sandbox), in an event loop this benchmark drives."""

    name = "verl `GvxTool` via `ToolAgentLoop._call_tool` (gvx)"

    def __init__(self) -> None:
        from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
        from verl.experimental.agent_loop.tool_parser import FunctionCall

        from gvx.integrations.verl import GvxTool

        self.AgentData, self.FunctionCall = AgentData, FunctionCall
        with contextlib.redirect_stdout(io.StringIO()):  # verl's BaseTool prints the tool's schema
            self.tool = GvxTool({"type": "native", "timeout": 60})
        # Only what _call_tool reads: no model, no inference server.
        self.agent_loop = ToolAgentLoop.__new__(ToolAgentLoop)
        self.agent_loop.tools = {self.tool.name: self.tool}
        self.agent_loop.max_tool_response_length = 4096
        self.agent_loop.tool_response_truncate_side = "middle"
        self.loop = asyncio.new_event_loop()

    def make(self) -> Any:
        """A trajectory: its sandbox starts at its first call."""
        return self.AgentData(messages=[], image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
                              metrics={}, request_id=uuid.uuid4().hex, tools_kwargs={self.tool.name: {"create_kwargs": {}}})

    def stop(self, data: Any) -> None:
        self.tool.end_trajectory(data.request_id)

    def call(self, data: Any, command: str) -> str:
        fc = self.FunctionCall(name=self.tool.name, arguments=json.dumps({"command": command}))
        response, _, _ = self.loop.run_until_complete(self.agent_loop._call_tool(fc, data.tools_kwargs, data))
        return str(response.text)

    def step(self, data: Any, command: str, want: str) -> float:
        out: list[str] = []
        t = timed(lambda: out.append(self.call(data, command)))
        expect(f"GvxTool execute({command!r})", out[0], f"{want}\n[exit code 0]")
        return t

    def episode(self) -> float:
        data = self.make()
        out: list[str] = []
        try:
            t = timed(lambda: out.append(self.call(data, STEP)))
        finally:
            self.stop(data)
        expect("GvxTool first execute", out[0], "hi\n[exit code 0]")
        return t


class SweRex:
    """gvx's SWE-ReX deployment, stepped through its runtime's
    ``run_in_session`` in the session's shell, in an event loop this
    benchmark drives."""

    name = "SWE-ReX `GvxDeployment` `run_in_session` (gvx)"

    def __init__(self) -> None:
        from swerex.runtime.abstract import BashAction, CreateBashSessionRequest

        from gvx.integrations.swerex import GvxDeployment

        self.BashAction, self.CreateBashSessionRequest, self.GvxDeployment = BashAction, CreateBashSessionRequest, GvxDeployment
        self.loop = asyncio.new_event_loop()

    async def _start(self) -> Any:
        d = self.GvxDeployment(shell=["/bin/sh"])
        await d.start()
        await d.runtime.create_session(self.CreateBashSessionRequest())
        return d

    def make(self) -> Any:
        return self.loop.run_until_complete(self._start())

    def stop(self, d: Any) -> None:
        self.loop.run_until_complete(d.stop())

    def call(self, d: Any, command: str) -> str:
        obs = self.loop.run_until_complete(d.runtime.run_in_session(self.BashAction(command=command, timeout=60)))
        return str(obs.output)

    def step(self, d: Any, command: str, want: str) -> float:
        out: list[str] = []
        t = timed(lambda: out.append(self.call(d, command)))
        expect(f"run_in_session({command!r})", out[0], want)
        return t

    def episode(self) -> float:
        d: Any = None
        out: list[str] = []

        def call() -> None:
            nonlocal d
            d = self.make()
            out.append(self.call(d, STEP))

        try:
            t = timed(call)
        finally:
            if d is not None:
                self.stop(d)
        expect("first run_in_session", out[0], "hi")
        return t


class Floor:
    """gvx.Sandbox.exec of the same command, no harness: what the adapters add to."""

    name = "floor: `gvx.Sandbox.exec(['sh', '-lc', …])`"

    def make(self) -> gvx.Sandbox:
        return gvx.Sandbox()

    def stop(self, sb: gvx.Sandbox) -> None:
        sb.close()

    def step(self, sb: gvx.Sandbox, command: str, want: str) -> float:
        out: list[gvx.ExecResult] = []
        t = timed(lambda: out.append(sb.exec([*INTERPRETER, command])))
        expect(f"Sandbox.exec({command!r})", out[0].stdout, want)
        return t

    def episode(self) -> float:
        sb: Optional[gvx.Sandbox] = None
        out: list[gvx.ExecResult] = []

        def call() -> None:
            nonlocal sb
            sb = gvx.Sandbox()
            out.append(sb.exec([*INTERPRETER, STEP]))

        try:
            t = timed(call)
        finally:
            if sb is not None:
                sb.close()
        expect("Sandbox first exec", out[0].stdout, "hi")
        return t


def docker_rm(env: Any) -> None:
    """Removes the Docker backend's container now, and leaves its cleanup nothing to do."""
    if env.container_id:
        subprocess.run(["docker", "rm", "-f", env.container_id], capture_output=True, check=True)
        env.container_id = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docker-image", default=None, help="the image in the host's dockerd (the busybox gvx.test/default:latest)")
    ap.add_argument("-n", type=int, default=30, help="rounds of each step")
    ap.add_argument("-m", type=int, default=10, help="episode starts")
    a = ap.parse_args()

    # Each harness that this venv has (verl has a venv of its own: run.sh runs this script in both).
    have = {m: importlib.util.find_spec(m) is not None for m in ("minisweagent", "skyrl_gym", "verl", "swerex")}
    backends: list[Any] = []
    why: Optional[str] = "mini-swe-agent is not installed in this venv"
    if have["minisweagent"]:
        from minisweagent.environments.docker import DockerEnvironment

        from gvx.integrations.minisweagent import GvxEnvironment

        # Both backends log every container and sandbox they start; the table is the output.
        logging.getLogger("minisweagent").setLevel(logging.WARNING)
        backends.append(
            Mini("mini-swe-agent `GvxEnvironment` (gvx)", lambda: GvxEnvironment(interpreter=INTERPRETER), lambda e: e.cleanup())
        )
        why = docker_unavailable(a.docker_image)
        if why is None:
            image = a.docker_image

            def make_docker() -> Any:
                return DockerEnvironment(image=image, interpreter=INTERPRETER, run_args=["--rm", "--network", "none"])

            backends.append(Mini("mini-swe-agent `DockerEnvironment` (host dockerd, `--network none`)", make_docker, docker_rm))
    if have["skyrl_gym"]:
        backends.append(Sky(a.n))
    if have["verl"]:
        backends.append(Verl())
    if have["swerex"]:
        backends.append(SweRex())
    backends.append(Floor())

    load0 = os.getloadavg()
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs; load average {load0[0]:.2f} "
          f"{load0[1]:.2f} {load0[2]:.2f} at the start; {a.n} rounds of each step, {a.m} episode starts\n")
    if why is not None:
        print(f"(the Docker backend is not measured: {why}; gvx's figures alone)\n")

    steps: dict[str, list[float]] = {b.name: [] for b in backends}
    heavy: dict[str, list[float]] = {b.name: [] for b in backends}
    starts: dict[str, list[float]] = {b.name: [] for b in backends}

    envs = [b.make() for b in backends]
    try:
        for b, env in zip(backends, envs):  # a first step each, untimed
            b.step(env, STEP, "hi")
        for r in range(a.n):
            order = list(zip(backends, envs))
            for b, env in order if r % 2 == 0 else reversed(order):
                steps[b.name].append(b.step(env, STEP, "hi"))
                heavy[b.name].append(b.step(env, HEAVY, "200"))
    finally:
        for b, env in zip(backends, envs):
            b.stop(env)
    for r in range(a.m):
        for b in backends if r % 2 == 0 else reversed(backends):
            starts[b.name].append(b.episode())
    load1 = os.getloadavg()

    print("| backend | one step `echo hi`, p50 / p90 | heavier step (`seq 200` loop, pipe to `wc`), p50 / p90 | episode start → first command done, p50 / max |")
    print("|---|---|---|---|")
    for b in backends:
        s, h, e = steps[b.name], heavy[b.name], starts[b.name]
        print(f"| {b.name} | {ms(p(s, 0.5))} / {ms(p(s, 0.9))} | {ms(p(h, 0.5))} / {ms(p(h, 0.9))} | "
              f"{ms(statistics.median(e))} / {ms(max(e))} |")
    if why is None:
        g, d = backends[0].name, backends[1].name
        print(f"\nmini-swe-agent, gvx ÷ Docker backend (p50): step {p(steps[g], 0.5) / p(steps[d], 0.5):.2f}, "
              f"heavier step {p(heavy[g], 0.5) / p(heavy[d], 0.5):.2f}, "
              f"episode start {statistics.median(starts[g]) / statistics.median(starts[d]):.2f}")
    print("\nSkyRL-Gym and verl have no Docker backend: their rows have no anchor of their own. SWE-ReX's "
          "Docker deployment installs swerex-remote into the container from PyPI as it starts, which a host "
          "container with --network none cannot: not measured.")
    print(f"load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")


if __name__ == "__main__":
    main()
