"""The public surface of ``sniper.scheduler`` is exactly ``__all__`` (trio's test_exports)."""

from __future__ import annotations

import dataclasses
import inspect
import types

import sniper.scheduler


def test_all_names_exist_and_nothing_else_is_public() -> None:
    public = {
        name
        for name, value in vars(sniper.scheduler).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(sniper.scheduler.__all__)


def test_exported_classes_have_docstrings() -> None:
    for name in sniper.scheduler.__all__:
        value = getattr(sniper.scheduler, name)
        if isinstance(value, type):
            assert value.__doc__, f"{name} has no docstring"


def test_every_abstract_method_has_a_docstring() -> None:
    scheduler = sniper.scheduler.Scheduler
    for name in scheduler.__abstractmethods__:
        member = getattr(scheduler, name)
        member = member.fget if isinstance(member, property) else member
        assert member.__doc__, f"Scheduler.{name} has no docstring"


def test_every_statistics_field_has_a_docstring() -> None:
    # A field's docstring is the string literal on the line after it.
    source = inspect.getsource(sniper.scheduler.SchedulerStatistics)
    for field in dataclasses.fields(sniper.scheduler.SchedulerStatistics):
        after = source.split(f"    {field.name}: ", 1)[1].splitlines()[1].strip()
        assert after.startswith('"""'), f"SchedulerStatistics.{field.name} has no docstring"
