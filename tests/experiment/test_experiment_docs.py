"""The README's count of experiments and ``experiments/README.md``'s table match the
experiment files that exist (the README said "ten" of 11, the table had 8)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
NUMBERS += ["ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"]


def experiment_files() -> list[str]:
    return sorted(path.name for path in (ROOT / "experiments").glob("*.toml"))


def test_the_readme_counts_the_experiments() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    counted = re.search(r"The (\w+) experiments are", text)
    assert counted is not None
    assert counted.group(1) == NUMBERS[len(experiment_files())]


def test_the_experiments_table_has_a_row_per_file() -> None:
    text = (ROOT / "experiments" / "README.md").read_text()
    rows = re.findall(r"^\| `(\w+\.toml)` \|", text, flags=re.MULTILINE)
    assert sorted(rows) == experiment_files()
