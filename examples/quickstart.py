"""gvx in one minute: a sandbox, commands, files, an RL episode.

    python examples/quickstart.py

Runs on the embedded default image (busybox); pass an image reference
(oci:DIR:TAG, docker-archive:FILE.tar, a registry ref) as the first argument
to use another.
"""

from __future__ import annotations

import sys

import gvx

image = sys.argv[1] if len(sys.argv) > 1 else None

# A sandbox is one unprivileged rungv process running gVisor's Sentry.
with gvx.Sandbox(image, memory="512m", pids_limit=256) as sb:
    print(sb.exec("uname -sr; id").stdout)
    sb.write_file("/tmp/solution.py", "print(6 * 7)\n")
    result = sb.exec("cat /tmp/solution.py | wc -l", timeout=10)
    print(f"exit {result.exit_code} in {result.duration * 1000:.1f} ms: {result.stdout.strip()} line(s)")
    try:
        sb.exec("exit 3", check=True)
    except gvx.ExecError as e:
        print("check=True raised:", e)
    print("resource use:", sb.stats())

# The same as a gymnasium environment: each reset is a fresh sandbox.
env = gvx.GvxEnv(image, reward_fn=lambda sb, action, result: float(result.ok), max_steps=3)
obs, info = env.reset(seed=0)
for action in ["echo hello > /tmp/x", "cat /tmp/x", "false"]:
    obs, reward, terminated, truncated, info = env.step(action)
    print(f"{action!r:28} → exit {obs['exit_code']}, reward {reward}, stdout {obs['stdout']!r}")
env.close()
