"""``python -m specmon.sim.vllm serve MODEL [vLLM flags]``: run the simulated vLLM server."""

from __future__ import annotations

import sys

from specmon.backends.draft_wiring import DraftConfigError
from specmon.backends.vllm.sim.args import parse_serve
from specmon.sim.faults import FAULT_ENV, FaultSpecError, parse_fault
from specmon.sim.gpus import state_path_from_env


def main(argv: list[str] | None = None) -> int:
    launch, _ = parse_serve(sys.argv[1:] if argv is None else argv)  # argparse: exit 2
    env = launch.env
    try:
        parse_fault(env.get(FAULT_ENV))
        scale = float(env.get("SPECMON_SIM_TIME_SCALE", "1") or 1)
        int(env.get("SPECMON_SIM_SEED", "0") or 0)
        shards = int(env.get("SPECMON_SIM_SHARDS", "30") or 30)
        interval = float(env.get("VLLM_LOG_STATS_INTERVAL", "10") or 10)
        if scale < 0 or shards < 1 or interval <= 0:
            raise ValueError(
                "SPECMON_SIM_TIME_SCALE must be >= 0, SPECMON_SIM_SHARDS >= 1 and "
                "VLLM_LOG_STATS_INTERVAL > 0"
            )
        from specmon.backends.vllm.sim.server import draft_wiring

        draft_wiring(launch)  # an unusable draft config.json: one line, no traceback
    except DraftConfigError as error:
        print(f"specmon.sim.vllm: draft checkpoint: {error}", file=sys.stderr)
        return 2
    except FaultSpecError as error:
        print(f"specmon.sim.vllm: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        print(f"specmon.sim.vllm: bad simulator environment: {error}", file=sys.stderr)
        return 2
    from specmon.backends.vllm.sim.server import main_entry

    return main_entry(launch, state_path_from_env(launch.env))


def _run() -> int:
    try:
        return main()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(_run())
