"""One way to import the test helpers: ``from support.X import ...``. The other one
(``tests.support``) imports only where the working directory is on sys.path, so plain
``pytest`` failed to collect the files that used it while ``python -m pytest`` passed."""

from __future__ import annotations

import ast

from support.paths import TESTS


def imports_of_tests_support(source: str) -> list[int]:
    """The lines of ``source`` that import ``tests.support`` (in any form)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name == "tests.support" or name.startswith("tests.support.") for name in names):
            lines.append(node.lineno)
    return lines


def test_the_check_sees_every_form_of_the_other_style() -> None:
    source = (
        "from tests.support.hosts import local_session\n"
        "from tests.support import sim\n"
        "from tests import support\n"
        "import tests.support.prom\n"
        "from support.hosts import local_session\n"
        "text = 'from tests.support.hosts import x'\n"
    )
    assert imports_of_tests_support(source) == [1, 2, 3, 4]


def test_no_test_file_imports_tests_support() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in imports_of_tests_support(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], "import the helpers as `from support.X import ...`"
