"""What a job checkpoint fixes, checked before a resume starts any process.

Each checkpoint records the config it was trained with (:func:`job_config`): the keys of
:data:`~sniper.cluster._config.RESUME_FIXED` (the batches, the hubs that split them, the tables
with their optimizers and initializers, the dense model: its layers, factory, params and
optimizer), the data's variables and
dense features (the feature spec), and the keys of
:data:`~sniper.cluster._config.RESUME_CHANGEABLE`. A resume compares its own
(:func:`check_resume`): a change of a fixed key is refused, since the checkpoint's tables,
positions or model no longer fit it (before, another ``batch_size`` trained other batches
silently, another ``dim`` failed in the ps with ALREADY_EXISTS); a change of a changeable key
is refused unless ``allow_change`` names it. Keys the checkpoint does not record
(``max_steps``, ``checkpoint_every``...) change freely, and so does a table's ``capacity``
that grows: its rows go into the larger table by sign (:func:`~sniper.cluster._job.grow_tables`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

from sniper.cluster._checkpoint import JobCheckpoint
from sniper.cluster._config import RESUME_CHANGEABLE, TrainConfig
from sniper.cluster._plan import TrainPlan

__all__ = [
    "check_resume",
    "job_config",
    "nothing_left",
    "on_other_data",
    "with_checkpoint_features",
]

log = logging.getLogger("sniper.train")

_DATA = ("data", "workload", "scale", "num_batches", "epochs")
"""The keys that say which batches there are: with the same ones, a finished job has none left."""
_SOURCE = ("data", "workload", "scale")
"""The keys that say what the batches hold: other values are other data, whose batch numbers
say nothing of where the checkpoint's stopped (more batches or epochs of the same data keep
them)."""

_UNRECORDED: dict[str, Any] = {
    "labels": ["label"],
    "regression": [],
    "features": {},
    "num_trainers": 1,
}
"""The value of each recorded key in a checkpoint written before it was recorded."""


def job_config(config: TrainConfig, plan: TrainPlan) -> dict[str, Any]:
    """What a checkpoint of this job records of its config (JSON values)."""
    recorded = {
        "batch_size": config.batch_size,
        "num_hubs": config.num_hubs,
        "num_trainers": config.num_trainers,
        "seed": config.seed,
        "model.factory": plan.model_config.factory,
        "model.optimizer": plan.model_config.optimizer,
        **{f"model.params.{key}": value for key, value in plan.model_config.params.items()},
        "dense_features": plan.data.dense_features,
        "labels": list(plan.data.labels),
        "regression": list(plan.data.regression),
        "variables": {name: dataclasses.asdict(table) for name, table in plan.tables.items()},
        "features": plan.features,
    }
    recorded |= {key: getattr(config, key) for key in RESUME_CHANGEABLE}
    recorded["lr"] = plan.model_lr  # the model's, whichever key (or default) set it
    loaded: dict[str, Any] = json.loads(json.dumps(recorded))  # as job.json will hold it
    return loaded


def with_checkpoint_features(resume: JobCheckpoint, plan: TrainPlan) -> TrainPlan:
    """``plan`` reading through the checkpoint's ``[features]`` where it is the same table but
    for the statistics measured on the data: a resumed job standardizes as it trained, even
    on other or more data. A table that differs otherwise stays, for :func:`check_resume` to
    refuse."""
    recorded = resume.config.get("features") or {}
    if recorded and _without_stats(recorded) == _without_stats(plan.features):
        return dataclasses.replace(plan, features=recorded)
    return plan


def _without_stats(table: Mapping[str, Any]) -> dict[str, Any]:
    columns = {
        name: {k: v for k, v in column.items() if k != "stats"}
        for name, column in table.get("columns", {}).items()
    }
    return {**table, "columns": {name: c for name, c in columns.items() if c}}


def check_resume(resume: JobCheckpoint, config: TrainConfig, plan: TrainPlan) -> None:
    """Refuse, in one line, a resume whose config changes what ``resume`` fixed (see the
    module doc); log each change ``allow_change`` lets through."""
    changes = _changes(_recorded(resume, plan), job_config(config, plan))
    fixed = [text for key, text in changes if key not in RESUME_CHANGEABLE]
    refused = [(k, text) for k, text in changes if k in RESUME_CHANGEABLE]
    allowed = [text for key, text in refused if key in config.allow_change]
    refused = [(k, text) for k, text in refused if k not in config.allow_change]
    for text in allowed:
        log.warning("resume: %s (allow_change)", text)
    if not fixed and not refused:
        return
    reasons = []
    if fixed:
        reasons.append(f"{', '.join(fixed)} (the checkpoint fixed these: keep its values)")
    if refused:
        keys = ",".join(key for key, _ in refused)
        texts = ", ".join(text for _, text in refused)
        reasons.append(f"{texts} (to go on with the new values: --allow-change {keys})")
    raise ValueError(
        f"resume: this config changes what the checkpoint {resume.directory} was trained "
        f"with: {'; '.join(reasons)}"
    )


def _recorded(resume: JobCheckpoint, plan: TrainPlan) -> dict[str, Any]:
    """The config ``resume`` recorded, its ``lr`` the one its model trained with. A checkpoint
    of an older sniper recorded the top-level ``lr`` (the numpy MLP's) whatever the model: the
    ``[model] lr`` recorded with the model (``model_spec``) is the one it trained with where
    one was given, and where neither run gave one both train at the same model's default."""
    recorded = dict(resume.config)
    spec = resume.trainer.get("model_spec")
    if "lr" not in recorded or not isinstance(spec, Mapping):
        return recorded
    if spec.get("lr"):
        recorded["lr"] = spec["lr"]
    elif not plan.model_config.lr:
        recorded["lr"] = plan.model_lr
    return recorded


def on_other_data(resume: JobCheckpoint, config: TrainConfig) -> JobCheckpoint:
    """``resume`` with its hubs' positions dropped when ``config`` names other data (an
    ``allow_change`` of ``data``, ``workload`` or ``scale``): the new data is read from its
    start. The positions are batch numbers of the old data; kept, they read past as many
    batches of the new, which are other examples (a file that sorts before the old ones was
    never read, and what it pushed past was trained twice)."""
    changed = [key for key in _SOURCE if resume.config.get(key) != getattr(config, key)]
    if not changed or not resume.positions:
        return resume
    log.warning(
        "resume: other data (%s): its hubs read it from its start; the checkpoint's model and "
        "tables go on from step %d",
        ", ".join(f"{key} {_show(getattr(config, key))}" for key in changed),
        resume.step,
    )
    return dataclasses.replace(resume, positions={})


def nothing_left(resume: JobCheckpoint, config: TrainConfig, plan: TrainPlan) -> bool:
    """Whether resuming ``resume`` with ``config`` has nothing to train: its run read all of
    the same data, or it is at ``max_steps`` already."""
    if config.max_steps and resume.step >= config.max_steps:
        return True
    current = job_config(config, plan)
    same_data = all(resume.config.get(key) == current[key] for key in _DATA)
    return bool(resume.trainer.get("data_ended")) and same_data


def _changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, ``key old -> new``) of each key that differs; the variables' keys together. A
    key an older checkpoint did not record has the value it always had (:data:`_UNRECORDED`)."""
    changes = []
    for key in new:
        before = old.get(key, _UNRECORDED.get(key))
        if key == "variables":
            changes += [("variables", text) for text in _variable_changes(before or {}, new[key])]
        elif key == "features":
            if (before or {}) != new[key]:
                changes.append((key, _feature_change(before or {}, new[key])))
        elif before != new[key]:
            changes.append((key, f"{key} {_show(before)} -> {_show(new[key])}"))
    return changes


def _variable_changes(
    old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """``variables.NAME.KEY old -> new`` of every variable both have (``variables.*.KEY`` when
    every one changed alike), and the variables only one of them has."""
    texts = []
    lost, gained = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    if lost or gained:
        texts.append(f"the data's variables: lost {_names(lost)}, gained {_names(gained)}")
    common = [name for name in new if name in old]
    alike: dict[tuple[str, str, str], list[str]] = {}
    for name in common:
        for key in new[name]:
            if key == "capacity" and _grows(old[name].get(key), new[name][key]):
                continue  # the rows go into a larger table by sign: nothing trained changes
            if old[name].get(key) != new[name][key]:
                change = (key, _show(old[name].get(key)), _show(new[name][key]))
                alike.setdefault(change, []).append(name)
    for (key, before, after), names in alike.items():
        which = names[0] if len(names) == 1 else "*" if len(names) == len(common) else None
        which = which or f"{{{_names(names)}}}"
        texts.append(f"variables.{which}.{key} {before} -> {after}")
    return texts


def _grows(before: object, after: object) -> bool:
    return isinstance(before, int) and isinstance(after, int) and after >= before


def _feature_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """The ``[features]`` keys that differ, named (the tables can be long)."""
    keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return f"the [features] table ({', '.join(f'features.{k}' for k in keys)})"


def _names(names: list[str]) -> str:
    if not names:
        return "none"
    shown = ",".join(names[:3])
    return shown if len(names) <= 3 else f"{shown} and {len(names) - 3} more"


def _show(value: object) -> str:
    return json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
