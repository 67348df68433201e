"""A server is a plug-in: outside ``specmon/backends/`` no module names a server (no string
constant naming one, no import of a backend's modules), and ``specmon`` has no import cycle.

Checked on the source with ``ast``: string constants (docstrings left out) and imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specmon
from specmon.backends import BACKENDS

PACKAGE = Path(specmon.__file__).parent
# The servers are the registry's: a third backend is checked the moment it is registered.
SERVER_NAMES = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, BACKENDS)) + r")(?![A-Za-z0-9_])",
    re.IGNORECASE,
)
SERVER_PACKAGES = tuple(f"specmon.backends.{name}" for name in BACKENDS)


def _names_a_server_package(module: str) -> bool:
    """``specmon.backends.sglang`` (or a module in it), not a shared one like
    ``specmon.backends.flag_grammar``."""
    return any(module == p or module.startswith(p + ".") for p in SERVER_PACKAGES)


# Per-server by nature: the simulator personality (SGLang's log formats, HTTP API and CLI).
# The probe runtime (probe/, inject/ included) names no server: each server's table and source
# check live in its backend folder (test_the_probe_package_is_checked_whole below).
PER_SERVER_MODULES = {
    "sim",  # the simulator package: SGLang's personality
}
# Modules other helpers' branches change; remove each entry once that branch is merged.
PENDING_ELSEWHERE: dict[str, str] = {}

# Import cycles other branches remove; the lead deletes an entry when that branch merges.
PENDING_CYCLES: dict[frozenset[str], str] = {}


def _relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _allowed(relative: str) -> bool:
    if relative.startswith("backends/"):
        return True
    if relative in PENDING_ELSEWHERE:
        return True
    return any(relative == m or relative.startswith(m + "/") for m in PER_SERVER_MODULES)


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def server_mentions(source: str) -> list[str]:
    """Each string constant (not a docstring) or import that names a server."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and SERVER_NAMES.search(node.value):
                found.append(f"line {node.lineno}: string {node.value[:60]!r}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _names_a_server_package(alias.name):
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and _names_a_server_package(node.module)
        ):
            found.append(f"line {node.lineno}: from {node.module} import")
    return found


def test_no_module_outside_the_backends_names_a_server():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = _relative(path)
        if _allowed(relative):
            continue
        offenders += [f"{relative} {m}" for m in server_mentions(path.read_text())]
    assert offenders == []


def test_the_probe_package_is_checked_whole():
    """No module of the probe runtime, the files shipped into the server included, is exempt."""
    probe = sorted(_relative(p) for p in (PACKAGE / "probe").rglob("*.py"))
    assert "probe/inject/specmon_probe_hook.py" in probe
    assert [relative for relative in probe if _allowed(relative)] == []


def test_the_check_finds_what_it_looks_for():
    source = '"""Docs may say SGLang."""\nimport specmon.backends.sglang\nx = "sglang"\n'
    assert server_mentions(source) == [
        "line 2: import specmon.backends.sglang",
        "line 3: string 'sglang'",
    ]
    assert server_mentions('x = "SGLANG_HOST_IP"\ny = "vllm:num_requests"\n') == [
        "line 2: string 'vllm:num_requests'"
    ]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph() -> dict[str, set[str]]:
    """specmon module -> the specmon modules it imports, at any level and including imports
    under ``if TYPE_CHECKING:`` (a cycle of types is still a cycle of responsibilities). An
    edge goes to the module named: ``from a.b import c`` is an edge to ``a.b.c`` when that
    is a module, else to ``a.b``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    unexpected = [sorted(c) for c in import_cycles(graph) if c not in PENDING_CYCLES]
    assert unexpected == []


def test_the_cycle_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [frozenset({"a", "b", "c"})]
