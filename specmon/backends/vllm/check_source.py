"""Would the probe work on this vLLM? Reads an unpacked ``vllm`` package with ``ast`` (never
imports it: no torch or GPU needed) and checks every target of the table the injected probe uses
(``probe_hook.VLLM_FAMILIES``, shipped as ``specmon_probe_vllm``), following a class's bases
through ``from X import Y`` into other modules of the package (0.2x's ``EagleProposer`` inherits
``propose``). What every server's check shares is ``specmon.probe.check_source``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from specmon.backends.vllm.probe_hook import VLLM_FAMILIES, VllmFamily, VllmTarget
from specmon.probe.check_source import (
    call_through_problem,
    find_package_dir,
    fully_works,
    module_file,
    parse_module,
    read_version,
    verdict_line,
)

MAX_BASE_DEPTH = 8  # inheritance chains followed; vLLM's are two or three deep


@dataclass(frozen=True, slots=True)
class VllmTargetCheck:
    target: VllmTarget
    ok: bool
    detail: str  # "self, scheduler_output, ... (in llm_base_proposer.py)", or what is wrong


@dataclass(frozen=True, slots=True)
class VllmFamilyCheck:
    family: VllmFamily
    present: bool  # the runner module (the cycle's) exists in this version
    targets: tuple[VllmTargetCheck, ...]

    @property
    def complete(self) -> bool:
        return self.present and all(c.ok or not c.target.required for c in self.targets)


@dataclass(frozen=True, slots=True)
class VllmSourceReport:
    package_dir: Path
    version: str | None
    families: tuple[VllmFamilyCheck, ...]

    @property
    def fully_works(self) -> bool:
        """Every model runner this version has is fully covered, and it has at least one."""
        return fully_works(self.families)


def is_vllm_tree(path: Path) -> bool:
    """Whether ``path`` is an unpacked ``vllm`` package (the folder holding ``v1/``) or its
    parent."""
    return any((candidate / "v1").is_dir() for candidate in (path, path / "vllm"))


def check_vllm_source(path: Path) -> VllmSourceReport:
    package_dir = find_package_dir(path, "vllm", "v1", "vLLM")
    reader = _PackageReader(package_dir)
    families = tuple(_check_family(reader, family) for family in VLLM_FAMILIES)
    return VllmSourceReport(package_dir, read_version(package_dir), families)


def module_path(module: str) -> str:
    return module.replace(".", "/") + ".py"


class _PackageReader:
    """Parses modules of the package once each; resolves classes across modules."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir
        self._trees: dict[str, ast.Module | None] = {}

    def file(self, module: str) -> Path:
        return module_file(self.package_dir, module)

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            self._trees[module] = parse_module(self.file(module))
        return self._trees[module]

    def find_method(
        self, module: str, class_name: str, method: str, depth: int = 0
    ) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, str] | None:
        """The method's definition on the class or, failing that, on its bases (followed through
        the module's ``from vllm... import`` lines), with the module that defines it."""
        tree = self.tree(module)
        if tree is None or depth > MAX_BASE_DEPTH:
            return None
        cls = next(
            (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None
        )
        if cls is None:
            return None
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == method:
                return node, module
        imported = _imported_names(tree)
        for base in cls.bases:
            if not isinstance(base, ast.Name):
                continue
            base_module = imported.get(base.id, module)
            found = self.find_method(base_module, base.id, method, depth + 1)
            if found is not None:
                return found
        return None

    def has_class(self, module: str, class_name: str) -> bool:
        tree = self.tree(module)
        return tree is not None and any(
            isinstance(n, ast.ClassDef) and n.name == class_name for n in tree.body
        )


def _imported_names(tree: ast.Module) -> dict[str, str]:
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vllm."):
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


def _check_family(reader: _PackageReader, family: VllmFamily) -> VllmFamilyCheck:
    runner = next(t for t in family.targets if t.role == "cycle")
    if not reader.file(runner.module).is_file():
        return VllmFamilyCheck(family, False, ())
    return VllmFamilyCheck(family, True, tuple(_check_target(reader, t) for t in family.targets))


def _check_target(reader: _PackageReader, target: VllmTarget) -> VllmTargetCheck:
    if not reader.file(target.module).is_file():
        return VllmTargetCheck(target, False, f"{module_path(target.module)} absent")
    if reader.tree(target.module) is None:
        return VllmTargetCheck(target, False, f"cannot parse {module_path(target.module)}")
    if not reader.has_class(target.module, target.class_name):
        return VllmTargetCheck(target, False, "class not found")
    found = reader.find_method(target.module, target.class_name, target.method_name)
    if found is None:
        return VllmTargetCheck(target, False, f"no method {target.method_name}")
    method, defined_in = found
    problem = _signature_problem(method, needs_argument=target.role == "cycle")
    if problem is not None:
        return VllmTargetCheck(target, False, problem)
    parameters = ", ".join(a.arg for a in (*method.args.posonlyargs, *method.args.args))
    if method.args.vararg is not None:
        parameters += f", *{method.args.vararg.arg}"
    if defined_in != target.module:
        parameters += f"; inherited from {module_path(defined_in)}"
    return VllmTargetCheck(target, True, parameters)


def _signature_problem(
    method: ast.FunctionDef | ast.AsyncFunctionDef, needs_argument: bool
) -> str | None:
    """The probe calls through with the same arguments; the cycle reads the scheduler output
    from the first argument after self. A plain synchronous method is compatible."""
    problem = call_through_problem(method)
    if problem is not None:
        return problem
    positional = [*method.args.posonlyargs, *method.args.args]
    if not positional and method.args.vararg is None:
        return "takes no self"
    if needs_argument and len(positional) < 2 and method.args.vararg is None:
        return "takes no scheduler output argument"
    return None


def format_vllm_report(report: VllmSourceReport) -> str:
    """The text ``python -m specmon.probe --check-source`` prints for a vLLM tree."""
    version = report.version or "version unknown"
    lines = [
        f"vLLM {version} at {report.package_dir}",
        "delivery: import hook from sitecustomize.py, in every worker process (rank 0 writes)",
    ]
    for family in report.families:
        runner = next(t for t in family.family.targets if t.role == "cycle")
        if not family.present:
            lines.append(
                f"{family.family.name}: not in this version ({module_path(runner.module)} absent)"
            )
            continue
        state = "complete" if family.complete else "INCOMPLETE"
        lines.append(f"{family.family.name} ({module_path(runner.module)}): {state}")
        for check in family.targets:
            target = check.target
            shown = f"{target.class_name}.{target.method_name}"
            role = target.role
            if check.ok:
                lines.append(f"  ok      {role:<10} {shown}({check.detail})")
            elif not target.required:
                lines.append(f"  absent  {role:<10} {shown}: {check.detail} (optional)")
            else:
                mark = "BAD SIG" if check.detail.startswith(("is ", "takes")) else "MISSING"
                lines.append(f"  {mark} {role:<10} {shown}: {check.detail}")
    lines.append(verdict_line(report.families, "GPU model runner"))
    return "\n".join(lines)
