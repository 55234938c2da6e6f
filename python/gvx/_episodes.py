"""Private directories for episode clones that outlive no crash.

A :class:`gvx.GvxEnv` with a golden volume keeps each episode's clone in a
temporary directory and removes it on ``close()``. A process killed by
SIGKILL, or by SIGTERM's default action (a preempted job), runs no cleanup,
and its clones, hundreds of megabytes for a Docker episode, stayed in /tmp
forever. So each directory holds an ``.owner`` file that its process keeps
locked (``flock``) while it lives, and making a new directory first removes
those whose lock nobody holds any more.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from .sandbox import Mount, Sandbox
from .volumes import Volume

if TYPE_CHECKING:
    from typing_extensions import Self

PREFIX = "gvx-episodes-"
OWNER = ".owner"


def new_episode_dir(parent: Optional[Path] = None) -> tuple[Path, int]:
    """Makes a private episode directory in ``parent`` (the temporary
    directory by default) and returns it with the descriptor that holds its
    lock: close that only after removing the directory."""
    base = Path(parent or tempfile.gettempdir())
    sweep_abandoned(base)
    d = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    fd, name = tempfile.mkstemp(prefix=OWNER + "-", dir=d)
    # Locked before it gets the name a sweeper looks for, so no sweeper can
    # take a live directory for an abandoned one.
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(name, d / OWNER)
    return d, fd


def sweep_abandoned(parent: Path) -> None:
    """Removes the episode directories in ``parent`` whose owner died.
    Directories of live owners, of other users, and ones being made are left
    alone."""
    for d in parent.glob(PREFIX + "*"):
        try:
            fd = os.open(d / OWNER, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(d, ignore_errors=True)
        finally:
            os.close(fd)


def remove_episode_dir(episode_dir: Optional[Path], lock: Optional[int]) -> None:
    """Deletes an episode directory of new_episode_dir (its clones), then lets
    go of its lock; either may be None (nothing to do)."""
    if episode_dir is not None:
        for f in episode_dir.iterdir():
            f.unlink(missing_ok=True)
        episode_dir.rmdir()
    if lock is not None:
        os.close(lock)


class EpisodeSandbox:
    """A started sandbox and the golden clone it owns, as the harness
    adapters hold one per episode."""

    def __init__(self, sandbox: Sandbox, episode_dir: Optional[Path], lock: Optional[int]) -> None:
        self.sandbox = sandbox
        self._episode_dir = episode_dir
        self._lock = lock

    @classmethod
    def start(cls, image: Optional[str], golden: str, golden_path: str, mounts: Sequence[Mount] = (), **options: Any) -> Self:
        """Starts a sandbox for an episode (blocking): with ``golden``, it
        mounts its own O(1) clone of that volume at ``golden_path``, kept in
        a private episode directory that closing it deletes. ``options`` are
        gvx.Sandbox's."""
        episode_dir, lock, all_mounts = None, None, list(mounts)
        try:
            if golden:
                episode_dir, lock = new_episode_dir()
                clone = Volume(Path(golden)).clone(episode_dir / "golden-clone.ext4")
                all_mounts.append(Mount(clone.path, golden_path))
            sb = Sandbox(image, mounts=all_mounts, **options)
        except BaseException:
            remove_episode_dir(episode_dir, lock)
            raise
        return cls(sb, episode_dir, lock)

    def close(self) -> None:
        """Stops the sandbox, then deletes its golden clone; raises what
        Sandbox.close raises (the sandbox is gone all the same)."""
        try:
            self.sandbox.close()
        finally:
            remove_episode_dir(self._episode_dir, self._lock)
            self._episode_dir, self._lock = None, None
