"""What every harness adapter (gvx.integrations.*) owes a user who does not
have its framework: ``import gvx`` imports none of them, and importing one
without its framework is an ImportError that names the extra to install.
These run whether or not the frameworks are installed."""

from __future__ import annotations

import pytest

from conftest import run_python

# Each adapter: its module under gvx.integrations (and extra), and the
# framework package it imports.
ADAPTERS = [("minisweagent", "minisweagent"), ("skyrl", "skyrl_gym"), ("swerex", "swerex"), ("verl", "verl")]


def test_import_gvx_imports_no_adapter_nor_framework() -> None:
    names = [m for adapter, framework in ADAPTERS for m in (f"gvx.integrations.{adapter}", framework)]
    r = run_python(f"import sys, gvx, gvx.integrations; print([m for m in {names!r} if m in sys.modules])")
    assert r.returncode == 0 and r.stdout == "[]\n", (r.stdout, r.stderr)


@pytest.mark.parametrize("adapter, framework", ADAPTERS)
def test_without_its_framework_an_adapter_names_its_extra(adapter: str, framework: str) -> None:
    # sys.modules[name] = None makes any import of it fail, as if it were not installed.
    r = run_python(f"import sys; sys.modules[{framework!r}] = None; import gvx.integrations.{adapter}")
    assert r.returncode != 0 and f"ImportError: gvx.integrations.{adapter} needs" in r.stderr, r.stderr
    assert f"pip install 'gvx[{adapter}]'" in r.stderr, r.stderr
