"""The README's scheduler plugin subclasses only public classes and keeps the Scheduler
contract: ``sniper.testing.check_scheduler`` runs on it, on asyncio and on trio."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from sniper.testing import check_scheduler

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.anyio


def plugin_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if "class OneThread(Scheduler)" in b]
    return str(block)


def test_the_plugin_imports_only_public_names() -> None:
    tree = ast.parse(plugin_block())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sniper"):
            assert not any(part.startswith("_") for part in node.module.split(".")), node.module
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "handle"
        ):
            assert not node.attr.startswith("_"), node.attr


async def test_the_readme_plugin_keeps_the_scheduler_contract() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(plugin_block(), str(README), "exec"), namespace)
    one_thread = namespace["OneThread"]
    await check_scheduler(lambda **options: one_thread(1, **options), ordered=True, examples=20)
