"""N parallel episodes, the way an RL trainer runs them.

    python examples/rollout_pool.py [N] [STEPS] [--docker-image REF --archive busybox.tar]

Each environment is a fresh sandbox per episode; EnvPool steps them all at
once (one thread each — libgvx releases the GIL), and GvxEnv prepares the
next episode's sandbox while the current one runs.

With --docker-image (the Docker-in-gvx image; `make docker-image` prints its
reference) and --archive (a `docker save` tarball, e.g. build/default-image.tar),
every episode is a Docker task: a golden /var/lib/docker holding the archive's
image is built once, each episode gets its own clone and its own dockerd, and
the "policy" writes a Dockerfile and runs `docker build`; the reward runs the
built image. Without them the task is a toy on the embedded default image.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from typing import Any, Callable
from pathlib import Path

import gvx

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("n", nargs="?", type=int, default=8, help="environments (default 8)")
parser.add_argument("steps", nargs="?", type=int, default=5, help="steps per environment (default 5)")
parser.add_argument("--docker-image", help="the Docker-in-gvx image: episodes run docker build and docker run")
parser.add_argument("--archive", help="a `docker save` tarball loaded into the golden (with --docker-image)")
args = parser.parse_args()
if args.docker_image and not args.archive:
    parser.error("--docker-image needs --archive: a `docker save` tarball whose first image the Dockerfiles build FROM")


def toy_reward(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
    """The toy task: the number 42 in /tmp/answer."""
    return 1.0 if sb.exec("cat /tmp/answer 2>/dev/null").stdout.strip() == "42" else 0.0


def docker_reward(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
    """The Docker task: an image `answer` whose container prints 42."""
    run = sb.exec("docker run --rm answer 2>/dev/null", timeout=60)
    return 1.0 if run.stdout.strip() == "42" else 0.0


def toy_action() -> str:
    return f"echo {random.choice([41, 42, 43])} > /tmp/answer"


def docker_action(base: str) -> str:
    guess = random.choice([41, 42, 43])
    return (
        f"mkdir -p /work && printf 'FROM {base}\\nRUN echo {guess} > /answer\\nCMD [\"cat\", \"/answer\"]\\n' > /work/Dockerfile"
        " && docker build -q -t answer /work"
    )


def first_image(archive: str) -> str:
    """The first repo:tag in a `docker save` tarball's manifest.json."""
    import json
    import tarfile

    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise SystemExit(f"{archive}: no manifest.json; give a `docker save` tarball")
        tags = json.load(member)[0].get("RepoTags") or []
    if not tags:
        raise SystemExit(f"{archive}: its first image has no tag; `docker save` it by name")
    return str(tags[0])


with tempfile.TemporaryDirectory(prefix="gvx-rollout-") as work:
    options: dict[str, Any] = {}
    if args.docker_image:
        base = first_image(args.archive)
        t0 = time.perf_counter()
        golden = gvx.docker.golden(args.docker_image, archives=[args.archive], volume=Path(work) / "golden.ext4", size="2g")
        print(f"golden /var/lib/docker with {base} built in {time.perf_counter() - t0:.1f} s")
        options = dict(
            image=args.docker_image,
            golden=golden,
            setup=gvx.docker.SETUP,
            step_timeout=120.0,
            **gvx.docker.SANDBOX_OPTIONS,
        )
        reward: Callable[[gvx.Sandbox, str, gvx.ExecResult], float] = docker_reward
        action: Callable[[], str] = lambda: docker_action(base)  # noqa: E731
    else:
        reward, action = toy_reward, toy_action

    # GvxEnv asks reward_fn, then done_fn: the episode ends once solved,
    # without running the check twice.
    last_reward: dict[int, float] = {}

    def scored(sb: gvx.Sandbox, act: str, result: gvx.ExecResult) -> float:
        last_reward[id(sb)] = reward(sb, act, result)
        return last_reward[id(sb)]

    def done(sb: gvx.Sandbox, act: str, result: gvx.ExecResult) -> bool:
        return last_reward.pop(id(sb), 0.0) > 0

    with gvx.EnvPool(args.n, reward_fn=scored, done_fn=done, max_steps=args.steps, **options) as pool:
        start = time.perf_counter()
        pool.reset(seed=0)
        total_steps, solved = 0, 0
        for _ in range(args.steps):
            obs, rewards, terminated, truncated, infos = pool.step([action() for _ in range(args.n)])
            total_steps += args.n
            for i, (t, tr) in enumerate(zip(terminated, truncated)):
                if t or tr:
                    solved += int(t)
                    pool.reset_one(i)
        elapsed = time.perf_counter() - start
    task = "docker build + docker run" if args.docker_image else "toy"
    print(f"{args.n} envs, {total_steps} steps ({task}) in {elapsed:.2f} s ({total_steps / elapsed:.1f} steps/s), {solved} episodes solved")
