"""Would the probe work on this SGLang? Reads an unpacked ``sglang`` package with ``ast`` (never
imports it, so no torch or GPU is needed) and checks every probe target by name and signature.

The target table is the one the injected probe itself uses (``probe_hook.py``, shipped as
``specmon_probe_sglang``), so this check and the runtime cannot disagree about names. What
every server's check shares is ``specmon.probe.check_source``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from specmon.backends.sglang.probe_hook import TARGET_FAMILIES, Target, TargetFamily
from specmon.probe.check_source import (
    call_through_problem,
    find_package_dir,
    fully_works,
    module_file,
    parse_module,
    read_version,
    verdict_line,
)

HOOK_REGISTRY_PATH = "srt/plugins/hook_registry.py"


@dataclass(frozen=True, slots=True)
class TargetCheck:
    role: str
    class_name: str
    method_name: str | None  # the spelling found, None when missing
    ok: bool
    detail: str  # "self, batch, spec_info" when found; what is wrong otherwise


@dataclass(frozen=True, slots=True)
class FamilyCheck:
    family: TargetFamily
    present: bool  # whether the module file exists in this version
    targets: tuple[TargetCheck, ...]

    @property
    def complete(self) -> bool:
        return self.present and all(t.ok for t in self.targets)


@dataclass(frozen=True, slots=True)
class SourceReport:
    package_dir: Path
    version: str | None
    plugin_hook: bool  # SGLang's own sglang.srt.plugins hook registry is there
    families: tuple[FamilyCheck, ...]

    @property
    def fully_works(self) -> bool:
        """Every worker module this version has is fully covered, and it has at least one."""
        return fully_works(self.families)


def check_source(path: Path) -> SourceReport:
    package_dir = find_package_dir(path, "sglang", "srt", "SGLang")
    families = tuple(_check_family(package_dir, family) for family in TARGET_FAMILIES)
    return SourceReport(
        package_dir=package_dir,
        version=read_version(package_dir),
        plugin_hook=_has_hook_registry(package_dir),
        families=families,
    )


def _check_family(package_dir: Path, family: TargetFamily) -> FamilyCheck:
    source = module_file(package_dir, family.module)
    if not source.is_file():
        return FamilyCheck(family, False, ())
    tree = parse_module(source)
    if tree is None:
        checks = tuple(
            TargetCheck(t.role, t.class_name, None, False, f"cannot parse {source.name}")
            for t in family.targets
        )
        return FamilyCheck(family, True, checks)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    return FamilyCheck(family, True, tuple(_check_target(classes, t) for t in family.targets))


def _check_target(classes: dict[str, ast.ClassDef], target: Target) -> TargetCheck:
    cls = classes.get(target.class_name)
    if cls is None:
        return TargetCheck(target.role, target.class_name, None, False, "class not found")
    methods = {
        node.name: node
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    name = next((n for n in target.method_names if n in methods), None)
    if name is None:
        wanted = " or ".join(target.method_names)
        return TargetCheck(target.role, target.class_name, None, False, f"no method {wanted}")
    method = methods[name]
    problem = _signature_problem(method)
    parameters = ", ".join(a.arg for a in (*method.args.posonlyargs, *method.args.args))
    if problem is not None:
        return TargetCheck(target.role, target.class_name, name, False, problem)
    return TargetCheck(target.role, target.class_name, name, True, parameters)


def _signature_problem(method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The probe calls through with the same arguments and reads the batch from the first one
    after self: a plain synchronous method taking (self, batch, ...) is compatible."""
    problem = call_through_problem(method)
    if problem is not None:
        return problem
    positional = [*method.args.posonlyargs, *method.args.args]
    if len(positional) >= 2 or (len(positional) == 1 and method.args.vararg is not None):
        return None
    return "takes no batch argument"


def _has_hook_registry(package_dir: Path) -> bool:
    tree = parse_module(package_dir / HOOK_REGISTRY_PATH)
    if tree is None:
        return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "HookRegistry":
            return any(
                isinstance(item, ast.FunctionDef) and item.name == "register" for item in node.body
            )
    return False


def format_report(report: SourceReport) -> str:
    """The text ``python -m specmon.probe --check-source`` prints."""
    version = report.version or "version unknown"
    lines = [f"SGLang {version} at {report.package_dir}"]
    if report.plugin_hook:
        lines.append(
            "delivery: sglang.srt.plugins entry point (HookRegistry), import hook as backup"
        )
    else:
        lines.append("delivery: import hook from sitecustomize.py (no sglang.srt.plugins registry)")
    for family in report.families:
        module_path = module_file(Path("sglang"), family.family.module).as_posix()
        if not family.present:
            lines.append(f"{family.family.name}: not in this version ({module_path} absent)")
            continue
        state = "complete" if family.complete else "INCOMPLETE"
        lines.append(f"{family.family.name} ({module_path}): {state}")
        spellings = {t.role: "/".join(t.method_names) for t in family.family.targets}
        for check in family.targets:
            shown = f"{check.class_name}.{check.method_name or spellings[check.role]}"
            if check.ok:
                lines.append(f"  ok      {check.role:<7} {shown}({check.detail})")
            else:
                mark = "MISSING" if check.method_name is None else "BAD SIG"
                lines.append(f"  {mark} {check.role:<7} {shown}: {check.detail}")
    lines.append(verdict_line(report.families, "EAGLE worker module"))
    return "\n".join(lines)
