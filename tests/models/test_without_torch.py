"""The numpy MLP stays the dependency-free default: with torch unimportable, sniper imports,
lists the zoo's names (metadata only) and trains the MLP; opening a torch model then says how
to install the extra, in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BLOCKED = "import sys; sys.modules['torch'] = None  # `import torch` raises ImportError\n"
ZOO = ("dcn_v2", "deepfm", "dlrm", "mmoe", "torch_mlp", "wide_deep")


def python(cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED + code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


SNIPER_TRAIN = (
    "from sniper.cli import main\n"
    "status = main(['train', '--config', 'job.toml', '--output', 'r.json'])\n"
    "assert sys.modules['torch'] is None\n"
    "raise SystemExit(status)\n"
)


def test_the_numpy_mlp_trains_with_torch_blocked(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text(
        "num_batches = 12\nscale = 0.005\nbatch_size = 128\nprogress = false\n"
        '[model]\nfactory = "mlp"\nparams = { hidden = [8] }\n'
    )
    done = python(tmp_path, SNIPER_TRAIN)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())["steps"] > 0


def test_the_zoo_is_listed_without_torch_and_asks_for_it_when_opened(tmp_path: Path) -> None:
    listed = python(
        tmp_path, "from sniper.models import model_names\nprint(' '.join(model_names()))"
    )
    assert listed.returncode == 0, listed.stderr
    assert set(ZOO) <= set(listed.stdout.split())
    (tmp_path / "job.toml").write_text(
        'num_batches = 3\nscale = 0.005\nprogress = false\n[model]\nfactory = "dlrm"\n'
    )
    done = python(tmp_path, SNIPER_TRAIN)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sniper: error: the model plugin 'dlrm = sniper.torch.models:DLRM'")
    assert last.endswith("or choose another model")
    assert "install it with: pip install 'sniper[torch]'" in last
