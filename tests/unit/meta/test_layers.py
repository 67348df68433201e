"""The packages by layer (docs/where-things-live.md): each top-level unit of ``specmon``
imports only units below it, so there is no cycle and no arrow back up; ``remote/`` ships
alone (standard library only); the console never reaches into the host session.

Read from the source with ``ast``: every import, at module level or inside a function,
``TYPE_CHECKING`` included (a type is a dependency too)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import specmon

PACKAGE = Path(specmon.__file__).parent

# Bottom first. A unit may import itself and any unit listed before it, nothing else.
LAYERS: tuple[str, ...] = (
    "remote",  # shipped to the host as source text: imports nothing of specmon
    "nccl_bench",  # run on the host by `python -m specmon.nccl_bench`: standard library only
    "model",  # events, errors, secrets, safe text: the words everything else uses
    "probe",  # the in-server timing probe and its records
    "logs",  # reading logs in bulk
    "sim",  # the simulator's engine; each server's personality is in its backend folder
    "backends",  # one folder per server (its simulator personality too), plus what they share
    "launch",  # the launch spec and the configuration
    "state",  # the store, the controller port, run status, the fleet
    "session",  # the host session: transports, the helper client, the log follower
    "experiments",  # benchmarks, sweeps, the ledger, reports, the advisor
    "exporter",  # Prometheus
    "tui",  # the console
    "commands",  # one module per subcommand
    "cli",  # the entry point
    "__main__",
)
MAX_LOOSE_MODULES = 4  # __init__, __main__, cli, nccl_bench
# What a remote file may import beyond the standard library: the NVML binding present on GPU
# hosts (the agent falls back to nvidia-smi where it is missing).
ON_THE_HOST = {"pynvml"}


def _unit(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[tuple[str, int]]:
    """(unit, line) for every ``specmon`` import in the file."""
    found: set[tuple[str, int]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "specmon":
                names = [f"specmon.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "specmon" and len(parts) > 1:
                found.add((parts[1], node.lineno))
    return found


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_unit_has_a_layer():
    units = {_unit(p) for p in _sources()} - {"__init__"}
    assert units - set(LAYERS) == set(), "a new top-level unit needs its place in LAYERS"


def test_no_unit_imports_one_above_it():
    rank = {unit: i for i, unit in enumerate(LAYERS)}
    upward = []
    for path in _sources():
        unit = _unit(path)
        if unit == "__init__":
            continue
        for target, line in _imported_units(path):
            if target in rank and rank[target] > rank[unit]:
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    assert upward == []


def test_remote_imports_nothing_of_specmon_and_only_the_standard_library():
    """Each file under remote/ travels to the host alone, as its source text."""
    offenders = []
    for path in sorted((PACKAGE / "remote").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names | ON_THE_HOST | {"__future__"}:
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert offenders == []


def test_the_console_never_imports_the_host_session():
    """The console talks to a host through the controller port (state/controller.py) only."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in _sources()
        if _unit(path) == "tui"
        for target, line in _imported_units(path)
        if target == "session"
    ]
    assert offenders == []


def test_at_most_four_modules_lie_loose():
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_the_layer_check_sees_an_arrow_back_up(tmp_path):
    """The check itself: a model module importing the console is found."""
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from specmon.tui.app import SpecmonApp\n")
    assert _imported_units(module) == {("tui", 2)}


def test_no_backend_module_outside_a_sim_folder_imports_a_personality():
    """A simulator personality (``backends/<name>/sim/``) pulls in the ASGI server; the rest of
    a backend, which every command loads, names it only as a string (``Backend.sim_module``)."""
    offenders = []
    for path in sorted((PACKAGE / "backends").rglob("*.py")):
        if "sim" in path.relative_to(PACKAGE / "backends").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            if any(len(n.split(".")) > 3 and n.split(".")[3] == "sim" for n in names):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert offenders == []
