"""What a new user does first with a pip-installed gvx, in the clean room.

Run by inside.sh with the virtualenv's python, from a directory outside any
checkout and with no GVX_* variables, so every part comes from the wheel: a
Sandbox exec on the embedded default image, a volume (made and checked with
no e2fsprogs on the machine) and a GvxEnv episode on a clone of it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gvx


def main() -> None:
    leaked = sorted(k for k in os.environ if k.startswith("GVX_"))
    assert not leaked, f"the clean room must not set {leaked}: the wheel has to find its own parts"
    package = Path(gvx.__file__).resolve().parent
    assert "site-packages" in package.parts, f"gvx was imported from {package}, not from the installed wheel"
    print(f"gvx {getattr(gvx, '__version__', '(no __version__)')} from {package}")
    print(f"rungv: {gvx.rungv_path()}; default image: {gvx.default_image()}")

    with gvx.Sandbox() as sb:
        r = sb.exec("echo sandbox ok; id -u")
    assert r.exit_code == 0 and r.stdout == "sandbox ok\n0\n", r
    print("Sandbox.exec: ok")

    work = Path(tempfile.mkdtemp(prefix="gvx-cleanroom-"))
    golden = gvx.Volume.create(work / "golden.ext4", "64m")
    with gvx.Sandbox(mounts=[gvx.Mount(golden.path, "/data")]) as sb:
        sb.exec("echo kept > /data/answer", check=True)
    check = golden.check()
    assert check.clean, check
    print(f"Volume.create, a write from a sandbox and Volume.check ({check.checker}): ok")

    def reward(sb: gvx.Sandbox, action: str, result: gvx.ExecResult) -> float:
        return 1.0 if result.stdout == "kept\n" else 0.0

    env = gvx.GvxEnv(reward_fn=reward, max_steps=2, golden=golden, volume_path="/data", episode_dir=str(work))
    try:
        env.reset(seed=0)
        _, got, terminated, truncated, _ = env.step("cat /data/answer; echo changed > /data/answer")
        assert got == 1.0 and not terminated and not truncated, (got, terminated, truncated)
        _, got, terminated, truncated, _ = env.step("cat /data/answer")
        assert got == 0.0 and truncated, (got, terminated, truncated)
        env.reset(seed=1)  # a new episode starts from the golden again
        _, got, _, _, _ = env.step("cat /data/answer")
        assert got == 1.0, got
    finally:
        env.close()
    print("GvxEnv episode on a golden volume's clones: ok")


if __name__ == "__main__":
    main()
