"""The house's shape, read from the source: no import circle, and each outside library has one room.

Every import counts, inside functions and under ``TYPE_CHECKING`` included: a type-only arrow that
closes a circle still means two modules that cannot be read apart. ``python -m pytest tests/test_layers.py``
is the check anyone can run; it reads the files, it imports nothing of the project.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backtest", "models")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the project's packages (a package by its name)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name ``module`` imports (``from a import b`` gives ``a.b`` and ``a``), relative ones resolved."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


IMPORTS = {module: _imported_names(module, path) for module, path in MODULES.items()}


def _project_target(name: str) -> str | None:
    """The project module a dotted name lands in (its longest prefix that is a module), else None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    """module -> the project modules it imports. A package's ``__init__`` is its face: its own imports
    re-export what lies below it, so they are not followed (as importing ``pkg.mod`` never needs them)."""
    graph = {}
    for module, names in IMPORTS.items():
        if MODULES[module].name == "__init__.py":
            graph[module] = set()
            continue
        graph[module] = {t for name in names if (t := _project_target(name)) and t != module}
    return graph


def test_no_import_circle_among_the_projects_modules():
    try:
        order = list(graphlib.TopologicalSorter(_graph()).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle (A -> B: A imports B): {' -> '.join(reversed(exc.args[1]))}")
    assert len(order) == len(MODULES) > 60


def test_the_circle_check_finds_a_planted_circle():
    graph = _graph()
    graph["backtest.labels"] = graph["backtest.labels"] | {"backtest.engine"}  # engine imports labels
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())


def _importers(library: str) -> set[str]:
    return {
        module
        for module, names in IMPORTS.items()
        if any(name == library or name.startswith(f"{library}.") for name in names)
    }


#: outside library -> the one room (a module or a package prefix) allowed to import it
ROOMS = {
    "hydra": "backtest.cli",
    "omegaconf": "backtest.cli",
    "mlflow": "backtest.tracking",
    "matplotlib": "backtest.reports",
}


@pytest.mark.parametrize("library", sorted(ROOMS))
def test_each_outside_library_is_imported_in_its_own_room_only(library):
    room = ROOMS[library]
    outside = sorted(m for m in _importers(library) if m != room and not m.startswith(f"{room}."))
    assert outside == [], f"{library} belongs in {room}; also imported by {outside}"
    assert _importers(library), f"nothing imports {library}: the rule checks nothing"


#: lower rooms that must not import the higher ones (an arrow that climbs back up)
LOWER = (
    "backtest.data",
    "backtest.features",
    "backtest.labels",
    "backtest.splits",
    "backtest.leakage",
    "backtest.portfolio",
    "backtest.metrics",
    "backtest.statistics",
    "backtest.comparison",
    "models",
)
HIGHER = (
    "backtest.cli",
    "backtest.engine",
    "backtest.tracking",
    "backtest.reports",
    "backtest.study",
    "backtest.record",
    "backtest.baselines",
)


def _in(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(f"{room}.") for room in rooms)


def test_no_arrow_climbs_from_the_lower_rooms_to_the_higher_ones():
    climbing = sorted(
        (module, target)
        for module, targets in _graph().items()
        if _in(module, LOWER)
        for target in targets
        if _in(target, HIGHER)
    )
    assert climbing == []


def test_only_the_entry_point_imports_the_command_line():
    assert sorted(m for m in _importers("backtest.cli") if not m.startswith("backtest.cli")) == ["backtest.__main__"]
