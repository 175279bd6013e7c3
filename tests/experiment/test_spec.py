"""The experiment file format: sweep expansion, dotted keys, and errors that name the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sniper.experiment import load_experiment, unwrapped_ps_for_variable
from sniper.experiment._spec import validate_points
from sniper.hashing import ps_for_variable
from tests.cluster._sniper import sniper


def _write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_grid_is_every_combination_in_the_files_order(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
repeat = 3
[config]
num_ps = 2
[sweep.grid]
scheduler = ["inline", "work_stealing"]
num_hubs = [1, 2]
""",
    )
    experiment = load_experiment(path)
    points = experiment.points()
    assert [p.label for p in points] == [
        "scheduler=inline, num_hubs=1",
        "scheduler=inline, num_hubs=2",
        "scheduler=work_stealing, num_hubs=1",
        "scheduler=work_stealing, num_hubs=2",
    ]
    assert points[3].config == {"num_ps": 2, "scheduler": "work_stealing", "num_hubs": 2}
    assert experiment.swept_keys == ("scheduler", "num_hubs")
    assert experiment.repeats() == 3


def test_variants_and_dotted_keys_reach_nested_tables(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
[config.variables.default]
dim = 8
[[sweep.variants]]
label = "small"
variables.default.capacity = 256
[[sweep.variants]]
label = "tiny"
"variables.default.capacity" = 64
""",
    )
    experiment = load_experiment(path)
    points = experiment.points()
    assert [p.label for p in points] == ["small", "tiny"]
    assert points[0].config == {"variables": {"default": {"dim": 8, "capacity": 256}}}
    assert points[1].config == {"variables": {"default": {"dim": 8, "capacity": 64}}}
    assert experiment.swept_keys == ("variables.default.capacity",)
    assert experiment.config == {"variables": {"default": {"dim": 8}}}  # not mutated


def test_a_grid_key_may_be_dotted_too(tmp_path: Path) -> None:
    path = _write(tmp_path, '[sweep.grid]\n"variables.default.capacity" = [0, 64]\n')
    points = load_experiment(path).points()
    assert [p.config for p in points] == [
        {"variables": {"default": {"capacity": 0}}},
        {"variables": {"default": {"capacity": 64}}},
    ]
    assert [p.label for p in points] == ["capacity=0", "capacity=64"]


def test_quick_overrides_apply_only_under_quick(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
repeat = 2
[config]
scale = 0.02
[sweep.grid]
scale = [0.5]
num_batches = [100]
[quick]
scale = 0.002
num_batches = 12
repeat = 1
""",
    )
    experiment = load_experiment(path)
    # The sweep is applied last: it wins over the quick overrides of the same key.
    assert experiment.points()[0].config == {"scale": 0.5, "num_batches": 100}
    assert experiment.points(quick=True)[0].config == {"scale": 0.5, "num_batches": 100}
    assert (experiment.repeats(), experiment.repeats(quick=True)) == (2, 1)
    plain = load_experiment(_write(tmp_path, "[config]\nscale = 0.02\n[quick]\nscale = 0.002\n"))
    assert plain.points(quick=True)[0].config == {"scale": 0.002}
    assert plain.points()[0].config == {"scale": 0.02}


def test_an_unknown_top_level_key_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "repeats = 2\n")
    with pytest.raises(
        ValueError, match=rf"^experiment {re.escape(str(path))}: unknown key 'repeats'; known"
    ):
        load_experiment(path)


def test_an_unknown_kind_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, 'kind = "benchmark"\n')
    with pytest.raises(
        ValueError,
        match=rf"^experiment {re.escape(str(path))}: kind must be one of 'train', "
        "'hash_mismatch', got 'benchmark'$",
    ):
        load_experiment(path)


def test_an_unknown_train_key_is_found_before_anything_runs(tmp_path: Path) -> None:
    path = _write(tmp_path, '[[sweep.variants]]\nlabel = "bad"\nschedular = "inline"\n')
    with pytest.raises(
        ValueError,
        match=rf"^experiment {re.escape(str(path))}: point 'bad': config: unknown key 'schedular'",
    ):
        validate_points(load_experiment(path), quick=False)


def test_a_bad_experiment_file_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "[sweep.grid]\nnum_ps = [2, -1]\n")
    result = sniper(tmp_path, "experiment", "run", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"sniper: error: experiment {path}: point 'num_ps=-1': num_ps must be at least 0, got -1"
    ]
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[sweep.grid]\nlock = []\n", "sweep.grid.lock must be a non-empty list, got []"),
        ("[sweep.grid]\nlock = 'one'\n", "sweep.grid.lock must be a non-empty list, got 'one'"),
        ("[sweep]\nmatrix = 1\n", "unknown key 'sweep.matrix'; a sweep is 'grid' or 'variants'"),
        ("[config]\noutput = 'x.json'\n", "config.output is set by the runner; leave it out"),
        ("[plot]\nx = 'lock'\n", "plot: 'lock' is not a swept key (none)"),
        ("[plot]\nwidth = 3\n", "[plot]: unknown key 'width'"),
        ("repeat = 0\n", "repeat must be a positive integer, got 0"),
        ("[seed]\nmetric = 'x'\n", "seed.finding is required: the seed log's finding, in words"),
    ],
)
def test_format_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=rf"^experiment {re.escape(str(path))}: ") as error:
        load_experiment(path)
    assert message in str(error.value)


def test_the_hash_mismatch_config_is_checked_too(tmp_path: Path) -> None:
    path = _write(tmp_path, 'kind = "hash_mismatch"\n[sweep.grid]\nnum_ps = [3]\nworkers = [1]\n')
    with pytest.raises(ValueError, match="config: unknown key 'workers'; known keys: dim, name_"):
        validate_points(load_experiment(path), quick=True)


def test_the_unwrapped_hash_differs_only_past_2_64_and_never_for_powers_of_two() -> None:
    short = [f"embedding_{i}" for i in range(76)]
    long = [f"dsp_ctr_lzs_test_v6/embedding_{i}" for i in range(76)]
    for num_ps in (2, 3, 4, 5, 7, 8, 16):
        assert all(
            unwrapped_ps_for_variable(n, num_ps) == ps_for_variable(n, num_ps) for n in short
        )
    for num_ps in (2, 4, 8, 16):
        assert all(unwrapped_ps_for_variable(n, num_ps) == ps_for_variable(n, num_ps) for n in long)
    assert any(unwrapped_ps_for_variable(n, 3) != ps_for_variable(n, 3) for n in long)


def test_a_quick_sweep_replaces_the_sweep_and_the_full_one_is_still_validated(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        """
[sweep.grid]
scheduler = ["inline", "nope"]
[quick.sweep.grid]
scheduler = ["inline"]
num_hubs = [2]
""",
    )
    experiment = load_experiment(path)
    assert [p.config for p in experiment.points(quick=True)] == [
        {"scheduler": "inline", "num_hubs": 2}
    ]
    assert len(experiment.points()) == 2
    assert experiment.swept_keys == ("scheduler", "num_hubs")
    with pytest.raises(ValueError, match="point 'scheduler=nope': scheduler must be one of"):
        validate_points(experiment, quick=True)
