"""The examples run as a user would run them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, *args], cwd=EXAMPLES.parent, env=dict(os.environ), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_quickstart() -> None:
    out = run_example(str(EXAMPLES / "quickstart.py"))
    assert "gvisor" in out and "check=True raised" in out and "reward 1.0" in out


def test_rollout_pool() -> None:
    out = run_example(str(EXAMPLES / "rollout_pool.py"), "4", "3")
    assert "4 envs, 12 steps" in out


def test_python_m_gvx() -> None:
    out = run_example("-m", "gvx", "echo from-main")
    assert "from-main" in out and "reward 1.0" in out


def test_notebook_executes() -> None:
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (make test installs it)")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (make test installs it)")
    nb = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    html = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.outputs if "text/html" in o.get("data", {})]
    assert any("hello from a notebook" in h for h in html), "the ExecResult rendered as HTML"
    assert any("gvx.Sandbox" in h for h in html)
    texts = [o["data"]["text/plain"] for c in nb.cells if c.cell_type == "code" for o in c.outputs if "text/plain" in o.get("data", {})]
    assert "('step one\\n', 1.0, False)" in texts, texts


def test_golden_snapshot() -> None:
    out = run_example(str(EXAMPLES / "golden_snapshot.py"), "-", "3")
    assert out.count("sees 200 files") == 3 and "the golden is untouched: True" in out


def test_make_demo(tmp_path: Path) -> None:
    """The README's first command: `make demo` runs examples/demo.sh once the build is done."""
    root = EXAMPLES.parent
    missing = [p for p in ("build/rungv", "build/libgvx.so") if not (root / p).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not built (make test builds them)")
    env = dict(os.environ, GVX_CACHE=str(tmp_path / "cache"), PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(EXAMPLES / "demo.sh")], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    for want in ("hello from sandbox", "rm -rf /bin/ls worked inside", "next sandbox: /bin/ls is back", "→ exit 3", "reward 1.0"):
        assert want in out, f"{want!r} missing from the demo's output:\n{out}"
