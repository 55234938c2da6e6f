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
from typing import Optional

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
