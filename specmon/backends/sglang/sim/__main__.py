"""``python -m specmon.sim [SGLang launch_server flags]``: run the simulated SGLang server."""

from __future__ import annotations

import sys

from specmon.backends.draft_wiring import DraftConfigError
from specmon.backends.sglang.sim.args import LaunchFailure, parse_launch
from specmon.backends.sglang.sim.metrics import VERSION_ENV, parse_version
from specmon.sim.faults import FAULT_ENV, FaultSpecError, parse_fault
from specmon.sim.gpus import state_path_from_env


def main(argv: list[str] | None = None) -> int:
    launch = parse_launch(sys.argv[1:] if argv is None else argv)  # argparse: exit 2 on bad flags
    try:
        parse_fault(launch.env.get(FAULT_ENV))
        scale = float(launch.env.get("SPECMON_SIM_TIME_SCALE", "1") or 1)
        int(launch.env.get("SPECMON_SIM_SEED", "0") or 0)
        shards = int(launch.env.get("SPECMON_SIM_SHARDS", "64") or 64)
        if scale < 0 or shards < 1:
            raise ValueError("SPECMON_SIM_TIME_SCALE must be >= 0 and SPECMON_SIM_SHARDS >= 1")
        version = parse_version(launch.env.get(VERSION_ENV))
        from specmon.backends.sglang.sim.server import draft_wiring

        draft_wiring(launch, version)  # an unusable draft config.json: one line, no traceback
    except DraftConfigError as error:
        print(f"specmon.sim: draft checkpoint: {error}", file=sys.stderr)
        return 2
    except FaultSpecError as error:
        print(f"specmon.sim: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"specmon.sim: bad simulator environment: {error}", file=sys.stderr)
        return 2
    for warning in launch.warnings:  # printed before logging is configured: bare lines
        print(warning, file=sys.stderr, flush=True)
    from specmon.backends.sglang.sim.server import main_entry

    return main_entry(launch, state_path_from_env(launch.env))


def _run() -> int:
    try:
        return main()
    except LaunchFailure as failure:
        sys.stderr.write(failure.text)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(_run())
