"""examples/k8s keeps the settings gvx's unprivileged tests run under.

The RayCluster is not applied to a Kubernetes cluster here (there is none);
what holds it to the truth is that every pod in it runs as the user, with the
capabilities, seccomp profile and devices that TestInsideUnprivilegedDocker
(core/gvx) runs gvx's core cases under, and that its versions and paths match
the ones this repository builds.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (make deps-python installs it)")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "examples" / "k8s"


def cluster() -> dict[str, Any]:
    doc = yaml.safe_load((K8S / "raycluster.yaml").read_text())
    assert isinstance(doc, dict) and doc["kind"] == "RayCluster" and doc["apiVersion"] == "ray.io/v1", doc
    return doc


def pod_specs(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    spec = doc["spec"]
    yield "head", spec["headGroupSpec"]["template"]["spec"]
    for group in spec["workerGroupSpecs"]:
        yield group["groupName"], group["template"]["spec"]


def pinned_ray() -> str:
    found = re.search(r"\bray==([0-9.]+)", (ROOT / "Makefile").read_text())
    assert found, "the Makefile pins no ray version"
    return found.group(1)


def test_every_pod_runs_as_the_unprivileged_tests_do() -> None:
    # The user and seccomp profile TestInsideUnprivilegedDocker runs under.
    go_test = (ROOT / "core" / "gvx" / "sandbox_test.go").read_text()
    assert '"--user", "65534:65534"' in go_test and "--privileged" not in go_test and "--cap-add" not in go_test
    for name, pod in pod_specs(cluster()):
        security = pod["securityContext"]
        assert (security["runAsUser"], security["runAsGroup"], security["runAsNonRoot"]) == (65534, 65534, True), name
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), name
        for volume in pod.get("volumes", []):
            assert set(volume) <= {"name", "emptyDir"}, (name, volume)  # no hostPath, no device
        mounts = set()
        for container in pod["containers"]:
            c = container["securityContext"]
            assert c.get("privileged") is False and c.get("allowPrivilegeEscalation") is False, (name, c)
            assert c["capabilities"] == {"drop": ["ALL"]}, (name, c)  # nothing added back
            assert "/dev/kvm" not in json.dumps(container), name
            for kind in ("requests", "limits"):
                extra = set(container["resources"][kind]) - {"cpu", "memory", "ephemeral-storage"}
                assert not extra, (name, extra)  # no device plugin's resource
            env = {e["name"]: e["value"] for e in container["env"]}
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            for var in ("GVX_CACHE", "HOME"):
                assert any(env[var].startswith(m + "/") for m in mounts), (name, var, env[var], mounts)
        assert "/tmp" in mounts, name


def test_versions_and_paths_match_the_repository() -> None:
    ray = pinned_ray()
    doc = cluster()
    assert doc["spec"]["rayVersion"] == ray
    dockerfile = (K8S / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{ray}-py311" in dockerfile
    for _, pod in pod_specs(doc):
        for container in pod["containers"]:
            assert container["image"].endswith(f":{ray}"), container["image"]
    # The wheel the Dockerfile copies is where `make test-wheel` leaves it.
    assert "COPY build/wheel/gvx-*.whl" in dockerfile
    assert "WHEEL_OUT := $(BUILD)/wheel\n" in (ROOT / "Makefile").read_text()
    assert (ROOT / "examples" / "ray_rollouts.py").is_file()


def test_the_slot_resource_is_what_the_readme_asks_for() -> None:
    (workers,) = cluster()["spec"]["workerGroupSpecs"]
    resources = json.loads(json.loads(workers["rayStartParams"]["resources"]))
    assert resources == {"gvx_slots": 32}, resources
    assert cluster()["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    readme = (K8S / "README.md").read_text()
    assert "--resource gvx_slots=1" in readme and '"gvx_slots": 1' in readme
