"""Experiments that reproduce the seed logs' findings: ``sniper experiment run FILE``.

An experiment file (``experiments/*.toml``, format in ``experiments/README.md``) is a base
``sniper train`` config, a sweep over some of its keys, a repeat count, ``--quick``
overrides, and the seed log's finding with its figure. :func:`load_experiment` parses and
checks it; :func:`run_experiment` validates every point first, then runs each one as a real
local cluster (``sniper train`` in a subprocess, its processes' CPU time sampled from
``/proc``), and writes ``results.csv``, ``summary.md`` and, with ``sniper[plot]``, PNG plots.
"""

from sniper.experiment._hash import unwrapped_ps_for_variable as unwrapped_ps_for_variable
from sniper.experiment._proc import CpuUsage as CpuUsage
from sniper.experiment._run import Run as Run
from sniper.experiment._run import report_metrics as report_metrics
from sniper.experiment._run import run_experiment as run_experiment
from sniper.experiment._spec import Experiment as Experiment
from sniper.experiment._spec import Point as Point
from sniper.experiment._spec import SeedFinding as SeedFinding
from sniper.experiment._spec import load_experiment as load_experiment
from sniper.experiment._spec import print_experiments as print_experiments

__all__ = [
    "CpuUsage",
    "Experiment",
    "Point",
    "Run",
    "SeedFinding",
    "load_experiment",
    "print_experiments",
    "report_metrics",
    "run_experiment",
    "unwrapped_ps_for_variable",
]
