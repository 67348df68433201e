"""``python -m specmon.probe --check-source DIR``: would the probe work on this SGLang or vLLM?

Exit status: 0 when it would fully work, 1 when not, 2 for bad input. Each backend answers
for its own tree (``ProbeHook.probe_source_report``, its checks in
``specmon/backends/<name>/check_source.py``) and the first that claims the folder reports, so
a new server's probe needs no line here. ``specmon/probe/__main__.py`` runs this module by
name, since probe/ sits below backends/ in the layer order.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from specmon.backends import all_backends
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
        first_refusal: UsageError | None = None
        for backend in all_backends():
            try:
                found = backend.probe_source_report(args.check_source)
            except UsageError as exc:  # not this server's tree: another may claim it
                first_refusal = first_refusal or exc
                continue
            if found is not None:
                text, fully_works = found
                print(text)
                return 0 if fully_works else 1
        raise first_refusal or UsageError(f"{args.check_source}: no server's source tree")
    except SpecmonError as exc:
        print(f"specmon probe: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
