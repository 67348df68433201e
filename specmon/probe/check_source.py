"""What every server's source check shares (``python -m specmon.probe --check-source DIR``):
reading an unpacked package with ``ast`` (never importing it, so no torch or GPU is needed),
its version, whether the probe can call through a method, and the verdict. Each server's check
lives in its backend folder (``specmon/backends/<name>/check_source.py``), beside the table the
injected probe uses, so the check and the runtime cannot disagree about names.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from specmon.model.errors import UsageError


class FamilyVerdict(Protocol):
    """One family of a report: whether its module is in the version, and fully covered."""

    @property
    def present(self) -> bool: ...

    @property
    def complete(self) -> bool: ...


def find_package_dir(path: Path, package: str, marker: str, label: str) -> Path:
    """The ``package`` folder (the one holding ``marker/``) given it or its parent; ``label``
    is the server's name as the message says it."""
    for candidate in (path, path / package):
        if (candidate / marker).is_dir():
            return candidate
    raise UsageError(
        f"{path} is not an unpacked {label} package (no {marker}/ folder in it or in {package}/)"
    )


def module_file(package_dir: Path, module: str) -> Path:
    """The file of a dotted module name of the package (its leading package name dropped)."""
    parts = module.split(".")[1:]
    return package_dir.joinpath(*parts[:-1], parts[-1] + ".py")


def parse_module(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def read_version(package_dir: Path) -> str | None:
    for name in ("_version.py", "version.py", "__init__.py"):
        tree = parse_module(package_dir / name)
        if tree is None:
            continue
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
                and isinstance(node.value, ast.Constant)
            ):
                return str(node.value.value)
    return None


def call_through_problem(method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The probe calls a target through with the same arguments: an async method, or a static
    or class method or a property, cannot be wrapped that way."""
    if isinstance(method, ast.AsyncFunctionDef):
        return "is async"
    for decorator in method.decorator_list:
        name = decorator.id if isinstance(decorator, ast.Name) else getattr(decorator, "attr", "")
        if name in ("staticmethod", "classmethod", "property"):
            return f"is a {name}"
    return None


def fully_works(families: Sequence[FamilyVerdict]) -> bool:
    """Every family this version has is fully covered, and it has at least one."""
    present = [f for f in families if f.present]
    return bool(present) and all(f.complete for f in present)


def verdict_line(families: Sequence[FamilyVerdict], none_found: str) -> str:
    """The report's last line; ``none_found`` names what is missing when no family is there."""
    if fully_works(families):
        return "result: the probe would fully work on this version"
    if not any(f.present for f in families):
        return f"result: no {none_found} found: the probe cannot work on this version"
    return "result: the probe would NOT fully work on this version (it would warn and stay off)"
