"""``python -m specmon.probe --check-source DIR``: would the probe work on this SGLang or vLLM?

Exit status: 0 when it would fully work, 1 when not, 2 for bad input. The checks are each
server's (``specmon/backends/<name>/check_source.py``); ``specmon/probe/__main__.py`` runs this
module by name, since probe/ sits below backends/ in the layer order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specmon.model.errors import SpecmonError, UsageError


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m specmon.probe",
        description="Check an SGLang or vLLM source tree for the probe's targets (no GPU needed).",
    )
    parser.add_argument(
        "--check-source",
        metavar="DIR",
        required=True,
        type=Path,
        help="an unpacked sglang package (the folder holding srt/) or vllm package (the folder "
        "holding v1/), or its parent",
    )
    try:
        args = parser.parse_args(argv)
        from specmon.backends.sglang.check_source import check_source, format_report
        from specmon.backends.vllm.check_source import (
            check_vllm_source,
            format_vllm_report,
            is_vllm_tree,
        )

        if is_vllm_tree(args.check_source):
            vllm_report = check_vllm_source(args.check_source)
            print(format_vllm_report(vllm_report))
            return 0 if vllm_report.fully_works else 1
        report = check_source(args.check_source)
    except SpecmonError as exc:
        print(f"specmon probe: {exc}", file=sys.stderr)
        return exc.exit_code
    print(format_report(report))
    return 0 if report.fully_works else 1


if __name__ == "__main__":
    raise SystemExit(main())
