"""reuse_freed_memory: applies on glibc, refuses values mallopt cannot take."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from sniper.runtime import reuse_freed_memory


def test_applies_on_glibc_linux() -> None:
    # Run in a child so this test process keeps glibc's defaults.
    code = "from sniper.runtime import reuse_freed_memory; print(reuse_freed_memory())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    glibc = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert out.stdout.strip() == str(glibc)


@pytest.mark.parametrize("value", [0, -1, 2**31])
def test_out_of_range_thresholds_are_refused(value: int) -> None:
    with pytest.raises(ValueError, match="mmap_threshold must be in"):
        reuse_freed_memory(mmap_threshold=value)
    with pytest.raises(ValueError, match="trim_threshold must be in"):
        reuse_freed_memory(trim_threshold=value)


def test_an_mmap_threshold_glibc_would_refuse_is_refused_first() -> None:
    with pytest.raises(ValueError, match="mmap_threshold must be in"):
        reuse_freed_memory(mmap_threshold=33 * 2**20)
