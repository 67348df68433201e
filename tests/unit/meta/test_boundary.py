"""The core knows nothing of Textual: checked by importing every core module in a fresh
interpreter and looking at what was loaded, not hoped."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import specmon

CORE_EXCLUDED_PREFIXES = ("specmon.tui", "specmon.commands")


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(specmon.__path__, prefix="specmon."):
        if info.name.startswith(CORE_EXCLUDED_PREFIXES):
            continue
        if info.name.endswith("__main__") or ".sim.__main__" in info.name:
            continue
        names.append(info.name)
    return sorted(names)


def test_core_modules_exist():
    names = core_modules()
    assert "specmon.model.events" in names and "specmon.state.store" in names


def test_no_core_module_imports_textual():
    names = core_modules()
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "    bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]\n"
        "    if bad:\n"
        "        print('IMPORTS-TEXTUAL', name); raise SystemExit(1)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_help_does_not_import_textual():
    code = (
        "import sys\n"
        "from specmon.cli import build_parser\n"
        "build_parser().format_help()\n"
        "assert not any(m.startswith('textual') for m in sys.modules), 'textual loaded'\n"
        "assert 'asyncssh' not in sys.modules and 'httpx' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
