"""gvx.parse_size reads sizes as rungv's flags do: both are held to core/testdata/sizes.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gvx

_CASES = json.loads((Path(__file__).resolve().parents[2] / "core" / "testdata" / "sizes.json").read_text())


@pytest.mark.parametrize("text,want", _CASES["valid"])
def test_a_valid_size_reads_as_rungv_reads_it(text: str, want: int) -> None:
    assert gvx.parse_size(text) == want


@pytest.mark.parametrize("text,says", _CASES["invalid"])
def test_an_invalid_size_is_refused_as_rungv_refuses_it(text: str, says: str) -> None:
    with pytest.raises(gvx.InvalidArgumentError, match=says):
        gvx.parse_size(text)


def test_an_int_is_bytes_up_to_what_the_abi_carries() -> None:
    assert gvx.parse_size(4096) == 4096
    with pytest.raises(gvx.InvalidArgumentError, match="8 EiB or more"):
        gvx.parse_size(1 << 63)
    with pytest.raises(gvx.InvalidArgumentError, match="must not be negative"):
        gvx.parse_size(-1)
