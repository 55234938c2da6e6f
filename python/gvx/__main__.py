"""``gvx`` (the console script) and ``python -m gvx``: one demo episode on the embedded default image."""

from __future__ import annotations

import argparse
import sys
import time

import gvx


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gvx",
        description="Run one demo episode: a fresh sandbox, a few shell steps, the sandbox gone. "
        "The full CLI is rungv (rungv --help), which pip installs beside gvx.",
    )
    parser.add_argument("--version", action="version", version=f"gvx {gvx.__version__}")
    parser.add_argument("--image", default=None, help="image reference (default: the embedded busybox image)")
    parser.add_argument("commands", nargs="*", help="shell commands to run as steps (default: a short demo)")
    args = parser.parse_args(argv)
    steps = args.commands or ["uname -a", "id", "ls /", "echo 'hello from gvx' > /tmp/x && cat /tmp/x"]
    print(f"gvx {gvx.library_version()}")
    with gvx.GvxEnv(args.image, reward_fn=lambda sb, action, result: float(result.ok), warm=False) as env:
        start = time.perf_counter()
        _, info = env.reset()
        print(f"episode ready in {info['reset_time'] * 1000:.0f} ms (rungv pid {info['sandbox_pid']})")
        total = 0.0
        for cmd in steps:
            obs, reward, terminated, truncated, info = env.step(cmd)
            total += float(reward)
            print(f"$ {cmd}\n{obs['stdout']}{obs['stderr']}[exit {obs['exit_code']}, {info['duration'] * 1000:.1f} ms]")
            if terminated or truncated:
                break
        print(f"episode done in {time.perf_counter() - start:.2f} s, reward {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
