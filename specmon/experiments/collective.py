"""Reading a collective benchmark's log: its results, and whether each setting reached the ranks.

The benchmark (:mod:`specmon.nccl_bench`) prints one ``specmon-collective-rank`` line per rank
(the NCCL_*/GLOO_* variables that rank sees) and one ``specmon-collective-result`` line per
tensor size. With ``NCCL_DEBUG=INFO``, NCCL adds its own lines, in the format of its
``INFO()`` macro (``host:pid:tid [dev] NCCL INFO <text>``); the ones read here are

* ``NCCL_PROTO set by environment to LL`` (likewise NCCL_ALGO, NCCL_P2P_LEVEL): NCCL's ENV
  subsystem, printed when it reads a variable it was given (on by default);
* ``AllReduce: 57344 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}`` (NCCL 2.19 and
  later) or ``57344 Bytes -> Algo 1 proto 0 time 9.1`` (earlier): the TUNING subsystem's choice
  per call, on rank 0, when ``NCCL_DEBUG_SUBSYS`` includes TUNING.

Pure text functions, no torch: the sweep reads the log through the host session.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from specmon.nccl_bench import DONE_PREFIX, RANK_PREFIX, RESULT_PREFIX

CHECKED_VARIABLES = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL")
# NCCL's algorithm and protocol indexes (nccl src/include/device.h: NCCL_ALGO_*, NCCL_PROTO_*),
# for the older numeric TUNING line.
NCCL_ALGO_BY_INDEX = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
NCCL_PROTO_BY_INDEX = ("LL", "LL128", "SIMPLE")

_NCCL_LINE = re.compile(r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO ")
_SET_BY_ENV = re.compile(
    r"NCCL INFO (?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S+)"
)
_CHOICE = re.compile(
    r"NCCL INFO (?:(?P<coll>[A-Za-z]+): +)?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) "
    r"proto (?P<proto>\w+)"
)


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One tensor size: per-call latency over all calls (the slowest rank's time per call)."""

    batch: int
    hidden: int
    bytes: int
    calls: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    world_size: int
    backend: str
    timer: str

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CollectiveResult:
        return cls(
            batch=int(record["batch"]),
            hidden=int(record["hidden"]),
            bytes=int(record["bytes"]),
            calls=int(record["calls"]),
            p50_us=float(record["p50_us"]),
            p90_us=float(record["p90_us"]),
            p99_us=float(record["p99_us"]),
            mean_us=float(record["mean_us"]),
            world_size=int(record["world_size"]),
            backend=str(record["backend"]),
            timer=str(record["timer"]),
        )


@dataclass(slots=True)
class CollectiveLog:
    """What a benchmark run's log says."""

    ranks: dict[int, dict[str, str]] = field(default_factory=dict)  # rank -> its NCCL env
    rank_pids: dict[int, int] = field(default_factory=dict)
    world_size: int | None = None
    backend: str | None = None
    results: list[CollectiveResult] = field(default_factory=list)
    done: bool = False
    nccl_env: dict[str, dict[int, str]] = field(default_factory=dict)  # name -> pid -> value
    nccl_choices: dict[tuple[str, str], int] = field(default_factory=dict)  # (algo, proto) -> n
    nccl_lines: int = 0


def read_log(lines: Iterable[str]) -> CollectiveLog:
    """Parse a benchmark log; lines that are neither ours nor NCCL's are ignored."""
    log = CollectiveLog()
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith(RANK_PREFIX):
            record = _json(line[len(RANK_PREFIX) :])
            if record is not None and isinstance(record.get("env"), dict):
                rank = int(record["rank"])
                log.ranks[rank] = {str(k): str(v) for k, v in record["env"].items()}
                log.rank_pids[rank] = int(record.get("pid", 0))
                log.world_size = int(record["world_size"])
                log.backend = str(record["backend"])
        elif line.startswith(RESULT_PREFIX):
            record = _json(line[len(RESULT_PREFIX) :])
            if record is not None:
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    log.results.append(CollectiveResult.from_record(record))
        elif line.startswith(DONE_PREFIX):
            log.done = True
        elif "NCCL INFO" in line:
            log.nccl_lines += 1
            _read_nccl_line(line, log)
    return log


def _json(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read_nccl_line(line: str, log: CollectiveLog) -> None:
    prefix = _NCCL_LINE.match(line)
    pid = int(prefix["pid"]) if prefix else 0
    found = _SET_BY_ENV.search(line)
    if found:
        log.nccl_env.setdefault(found["name"], {})[pid] = found["value"].rstrip(".")
        return
    choice = _CHOICE.search(line)
    if choice:
        algo, proto = choice["algo"], choice["proto"]
        if algo.isdigit() and int(algo) < len(NCCL_ALGO_BY_INDEX):
            algo = NCCL_ALGO_BY_INDEX[int(algo)]
        if proto.isdigit() and int(proto) < len(NCCL_PROTO_BY_INDEX):
            proto = NCCL_PROTO_BY_INDEX[int(proto)]
        key = (algo.upper(), proto.upper())
        log.nccl_choices[key] = log.nccl_choices.get(key, 0) + 1


SHOWN_MISSING = 16  # missing ranks named in a problem; the rest are counted


@dataclass(frozen=True, slots=True)
class SettingCheck:
    """Whether a point's NCCL settings reached every rank: ``problems`` empty when they did;
    ``evidence`` says what showed it (for the table and the ledger)."""

    problems: tuple[str, ...]
    evidence: tuple[str, ...]

    @property
    def reached(self) -> bool:
        return not self.problems


def check_settings(log: CollectiveLog, wanted: Mapping[str, str | None]) -> SettingCheck:
    """Compare the point's settings (None: unset) with what the ranks and NCCL reported.

    Every rank must report each variable with the wanted value (or its absence). On the nccl
    backend NCCL itself must also confirm each set variable ("set by environment to") with no
    process contradicting it, and its per-call choices (when TUNING lines are on) must use only
    the wanted algorithm and protocol. gloo has no NCCL lines: the ranks' own reports decide.
    """
    problems: list[str] = []
    evidence: list[str] = []
    world = log.world_size
    if world is None or not log.ranks:
        return SettingCheck(("no rank reported its environment (did the ranks start?)",), ())
    # The world size is the log's word: the missing ranks are found lazily, never as a set
    # of ``world`` numbers (a record claiming 10^12 ranks would take the memory).
    reported = sum(1 for rank in log.ranks if 0 <= rank < world)
    missing = list(islice((r for r in range(world) if r not in log.ranks), SHOWN_MISSING))
    if missing:
        more = world - reported - len(missing)
        extra = f" and {more} more" if more > 0 else ""
        problems.append(f"ranks {missing}{extra} did not report their environment")
    for name, value in wanted.items():
        seen = {rank: env.get(name) for rank, env in log.ranks.items()}
        wrong = sorted(rank for rank, got in seen.items() if got != value)
        if wrong:
            shown = {rank: seen[rank] for rank in wrong[:4]}
            problems.append(f"{name}: ranks {wrong} saw {shown}, wanted {value}")
        else:
            evidence.append(
                f"{name}={value if value is not None else '(unset)'}: {len(seen)} ranks"
            )
    if log.backend == "nccl":
        _check_nccl(log, wanted, problems, evidence)
    if not log.done:
        problems.append("the benchmark did not finish (no completion line)")
    return SettingCheck(tuple(problems), tuple(evidence))


def _check_nccl(
    log: CollectiveLog,
    wanted: Mapping[str, str | None],
    problems: list[str],
    evidence: list[str],
) -> None:
    if log.nccl_lines == 0:
        problems.append("no NCCL INFO lines in the log: launch with NCCL_DEBUG=INFO")
        return
    for name, value in wanted.items():
        reports = log.nccl_env.get(name, {})
        if value is None:
            if reports:
                problems.append(f"{name}: NCCL reports it set to {sorted(set(reports.values()))}")
            continue
        if not reports:
            problems.append(f"{name}: NCCL never said '{name} set by environment to {value}'")
            continue
        others = sorted({v for v in reports.values() if v.lower() != value.lower()})
        if others:
            problems.append(f"{name}: NCCL reports {others}, wanted {value}")
        else:
            evidence.append(f"NCCL: {name} set by environment to {value} ({len(reports)} procs)")
    if log.nccl_choices:
        algo = (wanted.get("NCCL_ALGO") or "").upper()
        proto = (wanted.get("NCCL_PROTO") or "").upper()
        used = sorted(log.nccl_choices)
        bad = [
            (a, p)
            for a, p in used
            if (algo and "," not in algo and a != algo)
            or (proto and "," not in proto and p != proto)
        ]
        if bad:
            problems.append(f"NCCL chose {bad} for some calls, wanted algo {algo} proto {proto}")
        else:
            calls = sum(log.nccl_choices.values())
            evidence.append(f"NCCL per-call choice {used} on {calls} calls")
