"""Prepare state once, start every episode from it in O(1).

    python examples/golden_snapshot.py [IMAGE] [EPISODES]

A seed sandbox fills a volume (here a small "dataset"; with the Docker-in-gvx
image it is typically /var/lib/docker after `docker load`), stops gracefully,
and the volume becomes the golden. Each episode mounts its own clone — a
reflink or a copy-on-write delta — so its writes never reach the golden or
another episode.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import gvx

image = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "-" else None
episodes = int(sys.argv[2]) if len(sys.argv) > 2 else 5

with tempfile.TemporaryDirectory(prefix="gvx-golden-") as work:
    golden = gvx.golden.build(
        image,
        setup=[
            "mkdir -p /var/lib/state/dataset",
            "for i in $(seq 1 200); do echo sample-$i > /var/lib/state/dataset/$i.txt; done",
        ],
        volume=Path(work) / "golden.ext4",
        path="/var/lib/state",
        size="256m",
    )
    print(f"golden {golden.path} ready")
    with gvx.GvxEnv(image, golden=golden, volume_path="/var/lib/state", max_steps=3) as env:
        for episode in range(episodes):
            _, info = env.reset()
            obs, *_rest = env.step("ls /var/lib/state/dataset | wc -l; rm -rf /var/lib/state/dataset")
            print(f"episode {episode}: reset in {info['reset_time'] * 1000:.1f} ms, sees {obs['stdout'].strip()} files, deletes them all")
            time.sleep(0.1)
    print("the golden is untouched:", golden.check().clean)
