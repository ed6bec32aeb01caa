"""The house rules that keep the code readable: small rooms, short functions, and rooms that import only the rooms
above them (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trimtab"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_over_500_lines() -> None:
    """A module that grows past 500 lines is two things."""
    big = [f"{p.relative_to(SRC)} ({n} lines)" for p in _modules()
           if (n := p.read_text().count("\n")) > MAX_MODULE_LINES]
    assert big == []


def test_no_function_is_over_60_lines() -> None:
    """A function, method or nested function of more than 60 lines (from `def` to its last line) is two things."""
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}() ({lines} lines)")
    assert long == []


CORE = ("model", "units", "formats", "cluster", "usage", "policy", "profile", "queue", "cycle", "plugins",
        "scheduler", "metrics")
WORLDS = ("sim", "serve", "kube", "report", "cli")


def _imported_rooms(path: Path) -> set[str]:
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "trimtab" and len(parts) > 1:
                rooms.add(parts[1])
    return rooms


def test_the_core_imports_no_world() -> None:
    """Nothing in the scheduling core imports the simulator, the server, the report or the command line."""
    offenders = []
    for path in _modules():
        room = path.relative_to(SRC).parts[0].removesuffix(".py")
        if room in CORE:
            worlds = _imported_rooms(path) & set(WORLDS)
            if worlds:
                offenders.append(f"{path.relative_to(SRC)} imports {sorted(worlds)}")
    assert offenders == []
