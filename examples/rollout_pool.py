"""N parallel episodes, the way an RL trainer runs them.

    python examples/rollout_pool.py [N] [STEPS]

Each environment is a fresh sandbox per episode; EnvPool steps them all at
once (one thread each — libgvx releases the GIL), and GvxEnv prepares the
next episode's sandbox while the current one runs.
"""

from __future__ import annotations

import random
import sys
import time

import gvx

n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5

# A toy task: write the number 42 into /tmp/answer. The "policy" guesses.
def reward(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
    return 1.0 if sb.exec("cat /tmp/answer 2>/dev/null").stdout.strip() == "42" else 0.0


def done(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> bool:
    return reward(sb, action, result) > 0


with gvx.EnvPool(n, reward_fn=reward, done_fn=done, max_steps=steps) as pool:
    start = time.perf_counter()
    pool.reset(seed=0)
    total_steps, solved = 0, 0
    for _ in range(steps):
        actions = [f"echo {random.choice([41, 42, 43])} > /tmp/answer" for _ in range(n)]
        obs, rewards, terminated, truncated, infos = pool.step(actions)
        total_steps += n
        for i, (t, tr) in enumerate(zip(terminated, truncated)):
            if t or tr:
                solved += int(t)
                pool.reset_one(i)
    elapsed = time.perf_counter() - start
    print(f"{n} envs, {total_steps} steps in {elapsed:.2f} s ({total_steps / elapsed:.0f} steps/s), {solved} episodes solved")
