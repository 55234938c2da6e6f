"""gvx episodes across a Ray cluster, with the API of one node.

:class:`EnvPool` spreads ``n`` environments over the cluster's nodes. Each
node runs one long-lived actor that hosts that node's environments as
in-process :class:`gvx.GvxEnv`\\ s, so a batched :meth:`EnvPool.step` is one
actor call per node, not one per environment. :class:`Sandbox` is one
:class:`gvx.Sandbox` on a node, for frameworks that keep a handle per episode.
Ray places, ships and reports; gvx only runs sandboxes on each node.

>>> import ray, gvx.ray
>>> ray.init()  # or ray.init(address=...) on a cluster
>>> with gvx.ray.EnvPool(24, warm=1) as pool:
...     observations, infos = pool.reset()
...     observations, rewards, terminated, truncated, infos = pool.step(["ls /"] * 24)

Needs the ``ray`` extra: ``pip install 'gvx[ray]'``. ``import gvx`` never
imports Ray.
"""

from __future__ import annotations

try:
    import ray
    import ray.exceptions
except ImportError as _e:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"gvx.ray needs Ray, which is not installed ({_e}): pip install 'gvx[ray]'"
    ) from _e

from ._pool import EnvPool, Placement
from ._provision import GoldenRecipe, Provisioned, SnapshotRecipe, docker_golden, docker_snapshot, golden
from ._sandbox import Sandbox

__all__ = [
    "EnvPool", "GoldenRecipe", "Placement", "Provisioned", "Sandbox", "SnapshotRecipe", "docker_golden", "docker_snapshot", "golden",
]
