"""reuse_freed_memory: applies on glibc, refuses values mallopt cannot take, and has Arrow
allocate from glibc unless the user chose Arrow's allocator."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from sniper.runtime import reuse_freed_memory

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"  # Arrow's documented setting


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


_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
POOL_AFTER_THE_CALL = (
    "from sniper.runtime import reuse_freed_memory\n"
    "reuse_freed_memory()\n"
    "import pyarrow\n"
    "print(pyarrow.default_memory_pool().backend_name)\n"
)
"""A child's code: pyarrow's default pool, imported after the call."""


def _child(code: str, **env: str) -> str:
    """What a fresh interpreter running ``code`` prints, with ``env`` over this environment
    (less Arrow's pool setting, unless ``env`` names it)."""
    environment = {k: v for k, v in os.environ.items() if k != ARROW_POOL_VARIABLE} | env
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment
    )
    return out.stdout.strip()


@pytest.mark.skipif(not _GLIBC, reason="the thresholds, and so Arrow's pool, are glibc's")
def test_arrow_allocates_from_glibc_afterwards_and_in_the_processes_it_starts() -> None:
    code = POOL_AFTER_THE_CALL + (
        "import subprocess, sys\n"
        "child = 'import pyarrow; print(pyarrow.default_memory_pool().backend_name)'\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True,"
        " check=True).stdout.strip())\n"
    )
    assert _child(code).split() == ["system", "system"]


@pytest.mark.skipif(not _GLIBC, reason="the thresholds, and so Arrow's pool, are glibc's")
def test_a_pyarrow_imported_first_has_the_pool_its_calls_default_to_moved_to_glibc() -> None:
    code = (
        "import pyarrow\n"
        "before = pyarrow.default_memory_pool().backend_name\n"
        "kept = pyarrow.array(range(1000))\n"
        "from sniper.runtime import reuse_freed_memory\n"
        "reuse_freed_memory()\n"
        "fresh = pyarrow.array(range(1000))\n"
        "print(before, pyarrow.default_memory_pool().backend_name, kept.sum(), fresh.sum())\n"
    )
    before, after, kept, fresh = _child(code).split()
    assert before != "system" and after == "system"
    assert kept == fresh == str(sum(range(1000)))


@pytest.mark.skipif(not _GLIBC, reason="the thresholds, and so Arrow's pool, are glibc's")
def test_the_cli_chooses_before_its_parser_loads_pyarrow(tmp_path: Path) -> None:
    """Arrow makes its own default pool as pyarrow loads: set later, the choice would reach
    pyarrow's Python calls but not Arrow's C++ allocations, and decoding still took mimalloc."""
    pyarrow = pytest.importorskip("pyarrow")
    try:
        pyarrow.mimalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no mimalloc to stay away from")
    code = (
        "import sys\n"
        "from sniper.cli import main\n"
        f"main(['train', '--data', 'parquet:{tmp_path / 'missing.parquet'}'])\n"
        "assert 'pyarrow' in sys.modules  # the train command's parser loaded it\n"
        "import pyarrow\n"
        "from sniper.data import ParquetReader, SyntheticCtr, load_workload, write_parquet\n"
        "data = SyntheticCtr(load_workload('seed_ctr'), num_batches=3, scale=0.02)\n"
        f"write_parquet(data, {str(tmp_path / 'data.parquet')!r})\n"
        "mimalloc = pyarrow.mimalloc_memory_pool()\n"
        "before = mimalloc.total_bytes_allocated()\n"
        f"for batch in ParquetReader({str(tmp_path / 'data.parquet')!r}).batches():\n"
        "    pass\n"
        "print(mimalloc.total_bytes_allocated() - before)\n"
    )
    assert _child(code).splitlines()[-1] == "0"


def test_an_arrow_pool_the_user_named_is_kept() -> None:
    pyarrow = pytest.importorskip("pyarrow")
    chosen = None
    for name in ("mimalloc", "jemalloc"):
        try:
            getattr(pyarrow, f"{name}_memory_pool")()
        except (AttributeError, NotImplementedError):
            continue
        chosen = name
        break
    if chosen is None:
        pytest.skip("this pyarrow has no allocator besides the system one")
    assert _child(POOL_AFTER_THE_CALL, **{ARROW_POOL_VARIABLE: chosen}) == chosen


@pytest.mark.skipif(not _GLIBC, reason="the thresholds, and so Arrow's pool, are glibc's")
def test_an_empty_arrow_pool_setting_names_none() -> None:
    assert _child(POOL_AFTER_THE_CALL, **{ARROW_POOL_VARIABLE: ""}) == "system"
