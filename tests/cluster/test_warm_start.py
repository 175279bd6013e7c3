"""No kernel is first called inside training: a job's clock holds no kernel compilation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# Runs ``sniper train`` in a fresh process (what a process has called before cannot hide a
# kernel) and prints the numba kernels of sniper's modules that gained a signature, loaded from
# numba's cache or compiled, between the start of ``Trainer.run`` and its end.
SCRIPT = r"""
import sys
from numba.core.dispatcher import Dispatcher
import sniper.roles._trainer as trainer

def signatures():
    return {
        f"{module}.{name}": len(value.signatures)
        for module, loaded in list(sys.modules.items())
        if module.startswith("sniper")
        for name, value in vars(loaded).items()
        if isinstance(value, Dispatcher)
    }

before = {}
run = trainer.Trainer.run

async def noted(self):
    before.update(signatures())
    return await run(self)

trainer.Trainer.run = noted
from sniper.cli import main

try:
    main(["train", "--config", sys.argv[1], "--quiet"])
except SystemExit as exc:
    assert not exc.code, exc.code
assert before, "the trainer never ran"
grew = sorted(k for k, n in signatures().items() if n > before.get(k, 0))
print("first called in training:", grew)
"""

CONFIG = """
scale = 0.01
num_batches = 12
eval_every = 5
launcher = "inprocess"
output = "{output}"
"""


def test_every_kernel_a_job_calls_is_loaded_before_its_trainer_starts(tmp_path: Path) -> None:
    config = tmp_path / "job.toml"
    config.write_text(CONFIG.format(output=tmp_path / "report.json"))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "first called in training: []"
