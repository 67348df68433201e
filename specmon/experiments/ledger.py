"""The experiment ledger: every run, benchmark and sweep point, in one SQLite file.

Why SQLite: one file in the user data dir, readable with any tool, and crash-safe. The ledger
uses WAL mode with ``synchronous=FULL`` and writes each record (a sweep point together with its
benchmark and its run) in one transaction, so a specmon killed mid-write leaves either the whole
record or nothing. The schema carries a version (``PRAGMA user_version``) and is brought up to
date by ordered migrations when opened.

Baseline discipline lives here too: a :class:`Baseline` can only come from a stored benchmark
whose server reported speculation off, measured on the same host, model, prompt set and
concurrency as the result it is compared with. There is no way to make one from a number.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon import __version__
from specmon.model.errors import SpecmonError
from specmon.model.process_owner import owner_gone, this_process
from specmon.model.secrets import (
    is_secret_name,
    redact_argv,
    redact_env,
    redact_params,
    redact_settings,
)

DATA_DIR_ENV = "SPECMON_DATA_DIR"
LEDGER_FILE = "ledger.sqlite3"

_V1 = (
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        host TEXT NOT NULL,
        profile TEXT,
        run_id TEXT,
        argv_json TEXT NOT NULL,
        env_json TEXT NOT NULL,
        specmon_version TEXT NOT NULL,
        status TEXT NOT NULL,
        load_seconds REAL,
        error TEXT,
        root_cause_json TEXT NOT NULL DEFAULT '[]'
    )""",
    """CREATE TABLE benchmarks (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        host TEXT NOT NULL,
        profile TEXT,
        run_ref INTEGER REFERENCES runs(id),
        model TEXT,
        argv_json TEXT NOT NULL,
        env_json TEXT NOT NULL,
        specmon_version TEXT NOT NULL,
        server_version TEXT,
        speculative INTEGER,
        prompt_set TEXT NOT NULL,
        prompt_set_digest TEXT NOT NULL,
        concurrency INTEGER NOT NULL,
        max_tokens INTEGER NOT NULL,
        requests INTEGER NOT NULL,
        warmup INTEGER NOT NULL,
        duration_s REAL NOT NULL,
        tok_s REAL NOT NULL,
        tok_s_median REAL NOT NULL,
        tok_s_p10 REAL NOT NULL,
        tok_s_p90 REAL NOT NULL,
        ttft_median_ms REAL,
        ttft_p90_ms REAL,
        accept_len REAL,
        metrics_accept_len REAL,
        draft_ms REAL,
        verify_ms REAL,
        extend_ms REAL,
        timing_source TEXT,
        server_args_json TEXT,
        request_results_json TEXT NOT NULL
    )""",
    """CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        sweep_key TEXT NOT NULL,
        host TEXT NOT NULL,
        profile TEXT NOT NULL,
        spec_json TEXT NOT NULL,
        status TEXT NOT NULL,
        finished_at REAL
    )""",
    """CREATE TABLE sweep_points (
        id INTEGER PRIMARY KEY,
        sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
        created_at REAL NOT NULL,
        params_key TEXT NOT NULL,
        params_json TEXT NOT NULL,
        is_baseline INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
        run_ref INTEGER REFERENCES runs(id),
        benchmark_ref INTEGER REFERENCES benchmarks(id),
        load_seconds REAL,
        error TEXT,
        root_cause_json TEXT NOT NULL DEFAULT '[]',
        UNIQUE (sweep_id, params_key)
    )""",
)

# Version 2: the baseline look-up (host, model, prompt set, concurrency, speculation off) and
# the resume look-up are indexed, so a ledger of years stays instant.
_V2 = (
    """CREATE INDEX benchmarks_baseline
        ON benchmarks (host, model, prompt_set, concurrency, speculative, created_at)""",
    "CREATE INDEX sweeps_key ON sweeps (sweep_key, status)",
)

# Version 3: who runs a sweep (host, pid, process start time: a sweep killed with SIGKILL is
# seen as interrupted once its process is gone) and why it was interrupted.
_V3 = (
    "ALTER TABLE sweeps ADD COLUMN owner_json TEXT",
    "ALTER TABLE sweeps ADD COLUMN note TEXT",
)

# Version 4: the tuning advisor's predictions, kept so that its accuracy on each host can be
# read against what was measured later (a sweep it was made for, or any benchmark).
_V4 = (
    """CREATE TABLE predictions (
        id INTEGER PRIMARY KEY,
        created_at REAL NOT NULL,
        host TEXT NOT NULL,
        model TEXT,
        sweep_id INTEGER REFERENCES sweeps(id),
        source TEXT NOT NULL,
        cycles INTEGER NOT NULL,
        current_steps INTEGER NOT NULL,
        recommended_steps INTEGER NOT NULL,
        advice_json TEXT NOT NULL
    )""",
    "CREATE INDEX predictions_sweep ON predictions (sweep_id)",
)

# Collective benchmarks (`specmon nccl-sweep`): per point, one row per tensor size with its
# per-call latency percentiles, and what showed that the point's settings reached every rank.
# The point itself is an ordinary sweep point (run, status, params).
_V5 = (
    """CREATE TABLE collective_results (
        id INTEGER PRIMARY KEY,
        point_ref INTEGER NOT NULL REFERENCES sweep_points(id),
        batch INTEGER NOT NULL,
        hidden INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        world_size INTEGER NOT NULL,
        backend TEXT NOT NULL,
        timer TEXT NOT NULL,
        p50_us REAL NOT NULL,
        p90_us REAL NOT NULL,
        p99_us REAL NOT NULL,
        mean_us REAL NOT NULL,
        evidence_json TEXT NOT NULL DEFAULT '[]'
    )""",
    "CREATE INDEX collective_results_point ON collective_results (point_ref)",
)

# Version 6: sweeps at several loads (`specmon sweep --concurrency 1,8,32`). A point of such a
# sweep is one setting at one load (its concurrency; NULL: the sweep's single load); a
# benchmark keeps the client's inter-token latency (p50/p90 over requests) and, when a load
# was measured more than once, each repeat's aggregate tok/s. An advisor's per-load
# predictions stay in predictions.advice_json ("by_load").
_V6 = (
    "ALTER TABLE sweep_points ADD COLUMN concurrency INTEGER",
    "ALTER TABLE benchmarks ADD COLUMN itl_median_ms REAL",
    "ALTER TABLE benchmarks ADD COLUMN itl_p90_ms REAL",
    "ALTER TABLE benchmarks ADD COLUMN repeats_json TEXT",
)

# Version 7: what tells two runs apart (docs/run-diff.md): a run's and a benchmark's draft and
# target fingerprint (each config.json's fields, the chat template's hash, the auxiliary
# layers in effect), and the sampling a benchmark's requests asked for.
_V7 = (
    "ALTER TABLE runs ADD COLUMN fingerprint_json TEXT",
    "ALTER TABLE benchmarks ADD COLUMN fingerprint_json TEXT",
    "ALTER TABLE benchmarks ADD COLUMN sampling_json TEXT",
    "ALTER TABLE benchmarks ADD COLUMN run_id TEXT",  # the host's run it measured
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7)
SCHEMA_VERSION = len(MIGRATIONS)


class LedgerError(SpecmonError):
    """The ledger file cannot be used (not a database, from a newer specmon, unwritable)."""


def default_data_dir() -> Path:
    """``$SPECMON_DATA_DIR`` if set (tests, portable installs), else the user data dir."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_data_dir("specmon", appauthor=False))


def default_ledger_path() -> Path:
    return default_data_dir() / LEDGER_FILE


def _create_private(path: Path) -> None:
    """Create the ledger's missing directories 0700 and the file 0600 (SQLite gives its -wal
    and -shm files the database's mode). What exists already keeps its mode."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.is_dir():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One server launch: what was run, and how it ended up (ready after N s, or failed)."""

    host: str
    profile: str | None
    argv: tuple[str, ...]
    env: Mapping[str, str]
    status: str  # "ready" | "failed" | "hung" | "timeout"
    run_id: str | None = None
    load_seconds: float | None = None
    error: str | None = None
    root_cause: tuple[str, ...] = ()
    fingerprint: Mapping[str, Any] | None = None  # the draft's and target's (run_diff)


@dataclass(frozen=True, slots=True)
class BenchContext:
    """Where a benchmark ran: everything needed to reproduce it besides the result itself."""

    host: str
    profile: str | None = None
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] | None = None  # the run's draft and target (run_diff)
    run_id: str | None = None  # the host's run it measured, where known


@dataclass(frozen=True, slots=True)
class VerifySample:
    """One speculative benchmark's mean verify time, with the launch and load it ran under."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    verify_ms: float
    concurrency: int


@dataclass(frozen=True, slots=True)
class Baseline:
    """A measured no-speculation benchmark; the only thing a speed-up may be computed against."""

    benchmark_id: int
    tok_s: float
    measured_at: float
    host: str
    model: str | None
    profile: str | None
    prompt_set: str
    concurrency: int
    ttft_p90_ms: float | None = None
    itl_p90_ms: float | None = None

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.measured_at)

    def describe(self, now: float | None = None) -> str:
        """e.g. "baseline b7 (kimi-baseline, speculation off, 62.9 tok/s, measured 2.0 h ago)"."""
        who = f"{self.profile}, " if self.profile else ""
        return (
            f"baseline b{self.benchmark_id} ({who}speculation off, {self.tok_s:.1f} tok/s, "
            f"measured {format_age(self.age_s(now))} ago)"
        )

    def speedup(self, tok_s: float) -> float:
        return tok_s / self.tok_s


def format_age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@dataclass(frozen=True, slots=True)
class SweepRow:
    id: int
    created_at: float
    sweep_key: str
    host: str
    profile: str
    spec: dict[str, Any]
    status: str  # "running" | "finished" | "interrupted" (also a "running" one whose owner died)
    finished_at: float | None
    note: str | None = None  # why it was interrupted


@dataclass(frozen=True, slots=True)
class PointRow:
    id: int
    sweep_id: int
    created_at: float
    params: dict[str, str]
    params_key: str
    is_baseline: bool
    status: str
    load_seconds: float | None
    error: str | None
    root_cause: tuple[str, ...]
    run_ref: int | None
    benchmark_ref: int | None
    tok_s: float | None = None
    accept_len: float | None = None
    verify_ms: float | None = None
    speculative: bool | None = None
    model: str | None = None
    prompt_set: str | None = None
    concurrency: int | None = None
    load: bool = False  # a point of a sweep at several loads (its concurrency is its own)


def params_key(params: Mapping[str, str]) -> str:
    """A canonical text for a combination, so a resumed sweep recognises its finished points;
    a secret value is kept as a digest of it, never in clear."""
    shown = {
        name: "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]
        if is_secret_name(name) and value
        else value
        for name, value in sorted(params.items())
    }
    return json.dumps(shown, separators=(",", ":"))


def load_point_key(params: Mapping[str, str], concurrency: int) -> str:
    """The key of one setting at one load in a sweep at several loads."""
    return f"{params_key(params)}@c{int(concurrency)}"


def _shown_sweep_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's plan as stored: the values of a secret axis of its grid as ``***``."""
    shown = dict(spec)
    grid = shown.get("grid")
    if isinstance(grid, list):
        shown["grid"] = [
            {**axis, "values": redact_params({axis["name"]: axis["values"]})[axis["name"]]}
            if isinstance(axis, dict) and "name" in axis and isinstance(axis.get("values"), list)
            else axis
            for axis in grid
        ]
    return shown


# --- the ledger -----------------------------------------------------------------------------


class Ledger:
    """The SQLite ledger. Open with ``Ledger(path)`` (default: the user data dir)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        try:
            _create_private(self.path)
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {exc}") from None
        self._conn.row_factory = sqlite3.Row
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise LedgerError(
                f"ledger {self.path} is not a usable SQLite database: {exc}"
            ) from None
        if str(mode).lower() != "wal":
            self._conn.close()
            raise LedgerError(f"ledger {self.path}: cannot switch to WAL mode (got {mode})")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write: all of it lands, or (killed, failed) none of it does."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise LedgerError(f"ledger {self.path}: cannot write: {exc}") from None
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException as exc:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.IntegrityError):
                raise LedgerError(f"ledger {self.path}: {exc} (already recorded)") from exc
            if isinstance(exc, sqlite3.Error):
                raise LedgerError(f"ledger {self.path}: cannot write: {exc}") from exc
            raise

    def _migrate(self) -> None:
        with self._transaction() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path} has schema version {version}, newer than this specmon "
                    f"({__version__}) understands ({SCHEMA_VERSION}); upgrade specmon"
                )
            for number in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[number - 1]:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def integrity_check(self) -> str:
        """SQLite's own check: "ok" for a sound file."""
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    # --- writing ------------------------------------------------------------------------------

    def record_run(self, run: RunRecord) -> int:
        with self._transaction() as conn:
            return self._insert_run(conn, run)

    def record_benchmark(
        self, result: Any, context: BenchContext, *, run_ref: int | None = None
    ) -> int:
        """Store a :class:`specmon.experiments.bench.runner.BenchResult` with where and how it ran."""
        with self._transaction() as conn:
            return self._insert_benchmark(conn, result, context, run_ref)

    def start_sweep(self, sweep_key: str, host: str, profile: str, spec: Mapping[str, Any]) -> int:
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO sweeps"
                " (created_at, sweep_key, host, profile, spec_json, status, owner_json)"
                " VALUES (?, ?, ?, ?, ?, 'running', ?)",
                (
                    time.time(),
                    sweep_key,
                    host,
                    profile,
                    json.dumps(_shown_sweep_spec(spec), sort_keys=True),
                    json.dumps(this_process()),
                ),
            )
            return int(cursor.lastrowid or 0)

    def record_prediction(
        self,
        *,
        host: str,
        model: str | None,
        advice: Mapping[str, Any],
        source: str,
        sweep_id: int | None = None,
    ) -> int:
        """Store an advisor prediction (``Advice.to_dict()``), made before ``sweep_id`` ran."""
        inputs = advice["inputs"]
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO predictions (created_at, host, model, sweep_id, source, cycles,"
                " current_steps, recommended_steps, advice_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    time.time(),
                    host,
                    model,
                    sweep_id,
                    source,
                    int(inputs["cycles"]),
                    int(inputs["num_steps"]),
                    int(advice["recommended"]["num_steps"]),
                    json.dumps(dict(advice), sort_keys=True),
                ),
            )
            return int(cursor.lastrowid or 0)

    def set_sweep_status(self, sweep_id: int, status: str, *, note: str | None = None) -> None:
        """``running`` makes this process the sweep's owner (a resume); ``note`` says why an
        interrupted sweep stopped (e.g. which console replaced its server)."""
        finished = time.time() if status == "finished" else None
        owner = json.dumps(this_process()) if status == "running" else None
        with self._transaction() as conn:
            conn.execute(
                "UPDATE sweeps SET status = ?, finished_at = ?, note = ?,"
                " owner_json = COALESCE(?, owner_json) WHERE id = ?",
                (status, finished, note, owner, sweep_id),
            )

    def record_sweep_point(
        self,
        sweep_id: int,
        params: Mapping[str, str],
        *,
        is_baseline: bool,
        status: str,
        run: RunRecord | None = None,
        benchmark: tuple[Any, BenchContext] | None = None,
        load_seconds: float | None = None,
        error: str | None = None,
        root_cause: Sequence[str] = (),
        concurrency: int | None = None,
        run_ref: int | None = None,
    ) -> int:
        """The point, its run and its benchmark, in one transaction. ``concurrency``: the
        load of a point of a sweep at several loads (keyed by setting and load); ``run_ref``:
        its launch already recorded (one launch serves every load of a setting)."""
        with self._transaction() as conn:
            if run is not None:
                run_ref = self._insert_run(conn, run)
            bench_ref = None
            if benchmark is not None:
                bench_ref = self._insert_benchmark(conn, benchmark[0], benchmark[1], run_ref)
            key = params_key(params) if concurrency is None else load_point_key(params, concurrency)
            cursor = conn.execute(
                "INSERT INTO sweep_points (sweep_id, created_at, params_key, params_json,"
                " is_baseline, status, run_ref, benchmark_ref, load_seconds, error,"
                " root_cause_json, concurrency) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sweep_id,
                    time.time(),
                    key,
                    json.dumps(redact_params(params)),  # grid order, for display
                    int(is_baseline),
                    status,
                    run_ref,
                    bench_ref,
                    load_seconds,
                    error,
                    json.dumps(list(root_cause)),
                    concurrency,
                ),
            )
            return int(cursor.lastrowid or 0)

    def record_collective_point(
        self,
        sweep_id: int,
        params: Mapping[str, str],
        *,
        status: str,
        run: RunRecord,
        results: Sequence[Any] = (),
        evidence: Sequence[str] = (),
        load_seconds: float | None = None,
        error: str | None = None,
        root_cause: Sequence[str] = (),
    ) -> int:
        """A collective benchmark's point: the point, its run and its per-size results
        (:class:`specmon.experiments.collective.CollectiveResult`), in one transaction."""
        with self._transaction() as conn:
            run_ref = self._insert_run(conn, run)
            cursor = conn.execute(
                "INSERT INTO sweep_points (sweep_id, created_at, params_key, params_json,"
                " is_baseline, status, run_ref, benchmark_ref, load_seconds, error,"
                " root_cause_json) VALUES (?, ?, ?, ?, 0, ?, ?, NULL, ?, ?, ?)",
                (
                    sweep_id,
                    time.time(),
                    params_key(params),
                    json.dumps(redact_params(params)),
                    status,
                    run_ref,
                    load_seconds,
                    error,
                    json.dumps(list(root_cause)),
                ),
            )
            point_ref = int(cursor.lastrowid or 0)
            for result in results:
                conn.execute(
                    "INSERT INTO collective_results (point_ref, batch, hidden, bytes, calls,"
                    " world_size, backend, timer, p50_us, p90_us, p99_us, mean_us,"
                    " evidence_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        point_ref,
                        result.batch,
                        result.hidden,
                        result.bytes,
                        result.calls,
                        result.world_size,
                        result.backend,
                        result.timer,
                        result.p50_us,
                        result.p90_us,
                        result.p99_us,
                        result.mean_us,
                        json.dumps(list(evidence)),
                    ),
                )
            return point_ref

    def collective_results(self, point_ref: int) -> list[dict[str, Any]]:
        """A collective point's per-size rows, smallest tensor first."""
        rows = self._conn.execute(
            "SELECT * FROM collective_results WHERE point_ref = ? ORDER BY bytes", (point_ref,)
        ).fetchall()
        return [_decode(row) for row in rows]

    @staticmethod
    def _insert_run(conn: sqlite3.Connection, run: RunRecord) -> int:
        cursor = conn.execute(
            "INSERT INTO runs (created_at, host, profile, run_id, argv_json, env_json,"
            " specmon_version, status, load_seconds, error, root_cause_json, fingerprint_json)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(),
                run.host,
                run.profile,
                run.run_id,
                json.dumps(list(redact_argv(run.argv))),
                json.dumps(redact_env(run.env), sort_keys=True),
                __version__,
                run.status,
                run.load_seconds,
                run.error,
                json.dumps(list(run.root_cause)),
                _json_or_none(run.fingerprint),
            ),
        )
        return int(cursor.lastrowid or 0)

    @staticmethod
    def _insert_benchmark(
        conn: sqlite3.Connection, result: Any, context: BenchContext, run_ref: int | None
    ) -> int:
        settings = result.settings
        phases = result.phase_times
        speculative = result.speculative
        requests = result.to_dict()["requests"]
        cursor = conn.execute(
            "INSERT INTO benchmarks (created_at, host, profile, run_ref, model, argv_json,"
            " env_json, specmon_version, server_version, speculative, prompt_set,"
            " prompt_set_digest, concurrency, max_tokens, requests, warmup, duration_s, tok_s,"
            " tok_s_median, tok_s_p10, tok_s_p90, ttft_median_ms, ttft_p90_ms, accept_len,"
            " metrics_accept_len, draft_ms, verify_ms, extend_ms, timing_source,"
            " server_args_json, request_results_json, itl_median_ms, itl_p90_ms, repeats_json,"
            " fingerprint_json, sampling_json, run_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                result.started_at,
                context.host,
                context.profile,
                run_ref,
                result.model,
                json.dumps(list(redact_argv(context.argv))),
                json.dumps(redact_env(context.env), sort_keys=True),
                __version__,
                result.server_version,
                None if speculative is None else int(speculative),
                result.prompt_set_version,
                result.prompt_set_digest,
                settings.concurrency,
                settings.max_tokens,
                settings.requests,
                settings.warmup,
                result.duration_s,
                result.tok_s_overall,
                result.tok_s_median,
                result.tok_s_p10,
                result.tok_s_p90,
                result.ttft_median_ms,
                result.ttft_p90_ms,
                result.accept_len,
                result.metrics_accept_len,
                phases.draft_ms if phases else None,
                phases.verify_ms if phases else None,
                phases.extend_ms if phases else None,
                phases.source if phases else None,
                json.dumps(redact_settings(result.server_info), default=str)
                if result.server_info
                else None,
                json.dumps(requests),
                getattr(result, "itl_median_ms", None),
                getattr(result, "itl_p90_ms", None),
                json.dumps(list(result.repeat_tok_s))
                if getattr(result, "repeat_tok_s", ())
                else None,
                _json_or_none(context.fingerprint),
                _json_or_none(getattr(result, "sampling", None)),
                context.run_id,
            ),
        )
        return int(cursor.lastrowid or 0)

    # --- reading ------------------------------------------------------------------------------

    def find_baseline(
        self,
        *,
        host: str,
        model: str | None,
        prompt_set: str,
        concurrency: int,
        before: float | None = None,
    ) -> Baseline | None:
        """The newest measured baseline comparable with a result of these coordinates.

        Only benchmarks whose server itself reported speculation off qualify (``speculative``
        is 0, not unknown): a profile *named* baseline that ran speculation is no baseline.
        """
        query = (
            "SELECT * FROM benchmarks WHERE host = ? AND model IS ? AND prompt_set = ?"
            " AND concurrency = ? AND speculative = 0"
        )
        args: list[Any] = [host, model, prompt_set, concurrency]
        if before is not None:
            query += " AND created_at <= ?"
            args.append(before)
        row = self._conn.execute(query + " ORDER BY created_at DESC, id DESC LIMIT 1", args)
        found = row.fetchone()
        return _baseline_from_row(found) if found else None

    def baseline_for_benchmark(self, benchmark_id: int) -> Baseline | None:
        """The newest baseline comparable with benchmark ``benchmark_id`` (same coordinates)."""
        row = self.get_benchmark(benchmark_id)
        if row is None:
            return None
        return self.find_baseline(
            host=row["host"],
            model=row["model"],
            prompt_set=row["prompt_set"],
            concurrency=row["concurrency"],
        )

    def get_benchmark(self, benchmark_id: int) -> dict[str, Any] | None:
        row = self._conn.execute("SELECT * FROM benchmarks WHERE id = ?", (benchmark_id,))
        found = row.fetchone()
        return _decode(found) if found else None

    def get_run(self, run_ref: int) -> dict[str, Any] | None:
        found = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_ref,)).fetchone()
        return _decode(found) if found else None

    def get_sweep(self, sweep_id: int) -> SweepRow | None:
        found = self._conn.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
        return _sweep_from_row(found) if found else None

    def latest_sweep(self) -> SweepRow | None:
        found = self._conn.execute("SELECT * FROM sweeps ORDER BY id DESC LIMIT 1").fetchone()
        return _sweep_from_row(found) if found else None

    def resumable_sweep(self, sweep_key: str) -> SweepRow | None:
        """The newest unfinished sweep with this key (same host, profile, grid and settings)."""
        found = self._conn.execute(
            "SELECT * FROM sweeps WHERE sweep_key = ? AND status != 'finished'"
            " ORDER BY id DESC LIMIT 1",
            (sweep_key,),
        ).fetchone()
        return _sweep_from_row(found) if found else None

    def sweep_points(self, sweep_id: int) -> list[PointRow]:
        rows = self._conn.execute(
            "SELECT p.*, b.tok_s AS b_tok_s,"
            " COALESCE(b.accept_len, b.metrics_accept_len) AS b_accept_len,"
            " b.verify_ms AS b_verify_ms, b.speculative AS b_speculative, b.model AS b_model,"
            " b.prompt_set AS b_prompt_set, b.concurrency AS b_concurrency"
            " FROM sweep_points p LEFT JOIN benchmarks b ON b.id = p.benchmark_ref"
            " WHERE p.sweep_id = ? ORDER BY p.id",
            (sweep_id,),
        ).fetchall()
        return [_point_from_row(row) for row in rows]

    def point_run_ref(self, point_id: int) -> int | None:
        """The run a recorded sweep point refers to."""
        found = self._conn.execute(
            "SELECT run_ref FROM sweep_points WHERE id = ?", (point_id,)
        ).fetchone()
        return None if found is None else found["run_ref"]

    def prediction_for_sweep(self, sweep_id: int) -> dict[str, Any] | None:
        """The newest prediction made for this sweep (``advice`` decoded), or None."""
        found = self._conn.execute(
            "SELECT * FROM predictions WHERE sweep_id = ? ORDER BY id DESC LIMIT 1", (sweep_id,)
        ).fetchone()
        return _decode(found) if found else None

    def speculative_verify_times(self, host: str, model: str | None) -> list[VerifySample]:
        """The probe's mean verify ms of every speculative benchmark of this host and model,
        with the launch it measured (the advisor reads the draft-token count from it)."""
        rows = self._conn.execute(
            "SELECT argv_json, env_json, verify_ms, concurrency FROM benchmarks"
            " WHERE host = ? AND model IS ? AND speculative = 1 AND verify_ms > 0"
            " AND timing_source = 'probe'",  # a step time is the whole cycle, not a verify
            (host, model),
        ).fetchall()
        return [
            VerifySample(
                argv=tuple(json.loads(row["argv_json"])),
                env=json.loads(row["env_json"]),
                verify_ms=float(row["verify_ms"]),
                concurrency=int(row["concurrency"]),
            )
            for row in rows
        ]

    def sampling_of_run(self, run_id: str) -> dict[str, Any] | None:
        """The sampling of the latest benchmark recorded for the host's run ``run_id`` (the
        run its ``run_ref`` names), None when no benchmark of it recorded one."""
        row = self._conn.execute(
            "SELECT b.sampling_json FROM benchmarks b LEFT JOIN runs r ON b.run_ref = r.id"
            " WHERE (b.run_id = ? OR r.run_id = ?) AND b.sampling_json IS NOT NULL"
            " ORDER BY b.id DESC LIMIT 1",
            (run_id, run_id),
        ).fetchone()
        if row is None:
            return None
        value = json.loads(row[0])
        return value if isinstance(value, dict) else None

    def list_sweeps(self, limit: int = 50) -> list[SweepRow]:
        rows = self._conn.execute("SELECT * FROM sweeps ORDER BY id DESC LIMIT ?", (limit,))
        return [_sweep_from_row(row) for row in rows.fetchall()]

    def list_benchmarks(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT * FROM benchmarks ORDER BY id DESC LIMIT ?", (limit,))
        return [_decode(row) for row in rows.fetchall()]

    def list_runs(self, limit: int = 50) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT * FROM runs ORDER BY id DESC LIMIT ?", (limit,))
        return [_decode(row) for row in rows.fetchall()]

    def table(self, name: str) -> list[dict[str, Any]]:
        """Every row of one table (for export), JSON columns decoded."""
        if name not in (
            "runs",
            "benchmarks",
            "sweeps",
            "sweep_points",
            "predictions",
            "collective_results",
        ):
            raise LedgerError(f"no ledger table {name!r}")
        rows = self._conn.execute(f"SELECT * FROM {name} ORDER BY id").fetchall()
        return [_decode(row) for row in rows]


def recorded_sampling(
    run_ids: Iterable[str], path: str | os.PathLike[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Each run's benchmark sampling (``Ledger.sampling_of_run``) from the ledger at ``path``
    (the default one when None), for `specmon diff` and the console's `d`. A ledger file that
    does not exist holds none: none is created by looking."""
    where = Path(path) if path is not None else default_ledger_path()
    if not where.is_file():
        return {}
    found: dict[str, dict[str, Any]] = {}
    with Ledger(where) as ledger:
        for run_id in run_ids:
            sampling = ledger.sampling_of_run(run_id)
            if sampling is not None:
                found[run_id] = sampling
    return found


def _json_or_none(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in row.keys():  # noqa: SIM118 - sqlite3.Row is not iterable by key
        value = row[key]
        if key.endswith("_json") and isinstance(value, str):
            decoded = json.loads(value)
            if key == "env_json":  # a ledger written before secrets were masked
                decoded = redact_env(decoded) if isinstance(decoded, dict) else decoded
            elif key == "server_args_json":
                decoded = redact_settings(decoded)
            out[key[: -len("_json")]] = decoded
        else:
            out[key] = value
    return out


def _baseline_from_row(row: sqlite3.Row) -> Baseline:
    return Baseline(
        benchmark_id=int(row["id"]),
        tok_s=float(row["tok_s"]),
        measured_at=float(row["created_at"]),
        host=str(row["host"]),
        model=row["model"],
        profile=row["profile"],
        prompt_set=str(row["prompt_set"]),
        concurrency=int(row["concurrency"]),
        ttft_p90_ms=row["ttft_p90_ms"],
        itl_p90_ms=row["itl_p90_ms"],
    )


def _sweep_from_row(row: sqlite3.Row) -> SweepRow:
    status, note = str(row["status"]), row["note"]
    if status == "running":
        owner = json.loads(row["owner_json"]) if row["owner_json"] else None
        if owner_gone(owner):
            status = "interrupted"
            note = f"its process (pid {owner['pid']} on {owner['host']}) ended without a word"
    return SweepRow(
        id=int(row["id"]),
        created_at=float(row["created_at"]),
        sweep_key=str(row["sweep_key"]),
        host=str(row["host"]),
        profile=str(row["profile"]),
        spec=json.loads(row["spec_json"]),
        status=status,
        finished_at=row["finished_at"],
        note=note,
    )


def _point_from_row(row: sqlite3.Row) -> PointRow:
    speculative = row["b_speculative"]
    return PointRow(
        id=int(row["id"]),
        sweep_id=int(row["sweep_id"]),
        created_at=float(row["created_at"]),
        params=json.loads(row["params_json"]),
        params_key=str(row["params_key"]),
        is_baseline=bool(row["is_baseline"]),
        status=str(row["status"]),
        load_seconds=row["load_seconds"],
        error=row["error"],
        root_cause=tuple(json.loads(row["root_cause_json"])),
        run_ref=row["run_ref"],
        benchmark_ref=row["benchmark_ref"],
        tok_s=row["b_tok_s"],
        accept_len=row["b_accept_len"],
        verify_ms=row["b_verify_ms"],
        speculative=None if speculative is None else bool(speculative),
        model=row["b_model"],
        prompt_set=row["b_prompt_set"],
        concurrency=row["concurrency"] if row["concurrency"] is not None else row["b_concurrency"],
        load=row["concurrency"] is not None,
    )
