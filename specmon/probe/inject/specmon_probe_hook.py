"""specmon's draft/verify timing probe runtime, running inside the server's processes.

This file is copied to the GPU host (``<run dir>/probe/``) with ``sitecustomize.py``, which
imports it there, and with the server tables of the backend being launched (each its
``specmon_probe_<name>.py``; ``specmon_probe_tables.txt`` beside this file lists them). It must
stay self-contained: the standard library, plus torch when it is present. Importing it changes
nothing; ``install()`` is the way in, and a server's table may offer its own (its server's
plugin loader).

What it does: a server table names the methods of one speculative cycle and its phases; this
runtime records a CUDA event before and after each (no synchronisation on the hot path), and a
background thread resolves finished events and appends one JSON line per cycle to
``$SPECMON_PROBE_FILE``. Only global rank 0 writes cycles. A table whose targets are missing
(another server version) writes one warning record and leaves the server untouched.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import importlib
import importlib.abc
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PROBE_FILE_ENV = "SPECMON_PROBE_FILE"
CLOCK_ENV = "SPECMON_PROBE_CLOCK"  # "auto" (default), "cuda" or "perf_counter"
FLUSH_INTERVAL_S = 0.2
MAX_PENDING_CYCLES = 20000  # cycles waiting for their GPU events; older ones are dropped
LOG_PREFIX = "[specmon probe]"
# Beside this file: the server tables shipped with it, one module name a line.
TABLES_FILE = "specmon_probe_tables.txt"


# --- the per-process recorder ------------------------------------------------------------------


class _Cycle:
    """One speculative cycle being timed; its stamps are CUDA events or perf_counter floats."""

    __slots__ = (
        "accepted",
        "accepted_tokens",
        "batch_size",
        "draft_tokens",
        "end",
        "extra",
        "spans",
        "start",
        "wall",
    )

    def __init__(self, wall: float, start: Any) -> None:
        self.wall = wall
        self.start = start
        self.end: Any = None
        self.spans: list[tuple[str, Any, Any]] = []
        self.batch_size: int | None = None
        self.draft_tokens: int | None = None
        self.accepted_tokens: int | None = None
        self.extra = ""  # further JSON members of the record, formatted, each led by a comma
        # Per-request accepted counts: a CPU list (v1), or a pinned host copy still in flight
        # (v2) that is read only after ``end`` has completed, or None.
        self.accepted: list[int] | _HostCopy | None = None

    def stamps(self) -> list[Any]:
        """Every stamp of the cycle once (a phase may share the cycle's start stamp)."""
        unique: dict[int, Any] = {}
        for stamp in (self.start, self.end, *(s for _, a, b in self.spans for s in (a, b))):
            if stamp is not None:
                unique.setdefault(id(stamp), stamp)
        return list(unique.values())


class _HostCopy:
    """A device tensor of per-request accept lengths (bonus included) being copied into pinned
    host memory on the cycle's stream; safe to read once a later event on that stream is done."""

    __slots__ = ("host",)

    def __init__(self, host: Any) -> None:
        self.host = host

    def counts(self) -> list[int]:
        return [max(0, int(v) - 1) for v in self.host.tolist()]


class _CudaClock:
    """Stamps are CUDA events recorded on the current stream, reused from a pool."""

    name = "cuda_event"

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._event = torch.cuda.Event
        self._free: collections.deque[Any] = collections.deque()
        self.device = torch.cuda.current_device()

    def stream(self) -> Any:
        return self._torch.cuda.current_stream()

    def stamp(self, stream: Any) -> Any:
        event = self._free.pop() if self._free else self._event(enable_timing=True)
        event.record(stream)
        return event

    def ready(self, stamp: Any) -> bool:
        return bool(stamp.query())

    def wait(self, stamp: Any) -> None:
        stamp.synchronize()

    def span_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def release(self, stamps: list[Any]) -> None:
        self._free.extend(stamps)

    def capturing(self) -> bool:
        return bool(self._torch.cuda.is_current_stream_capturing())

    def prepare_thread(self) -> None:
        self._torch.cuda.set_device(self.device)

    def copy_to_host(self, tensor: Any) -> _HostCopy | None:
        """Start a non-blocking device-to-host copy on the current stream (no sync)."""
        if not getattr(tensor, "is_cuda", False):
            return None
        host = self._torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        return _HostCopy(host)


class _PerfCounterClock:
    """Fallback with no torch or no CUDA: CPU wall time, labelled ``"clock": "perf_counter"``."""

    name = "perf_counter"

    def stream(self) -> None:
        return None

    def stamp(self, stream: Any) -> float:
        return time.perf_counter()

    def ready(self, stamp: Any) -> bool:
        return True

    def wait(self, stamp: Any) -> None:
        return None

    def span_ms(self, start: float, end: float) -> float:
        return (end - start) * 1000.0

    def release(self, stamps: list[Any]) -> None:
        return None

    def capturing(self) -> bool:
        return False

    def prepare_thread(self) -> None:
        return None

    def copy_to_host(self, tensor: Any) -> _HostCopy | None:
        return None  # no CUDA event would say when a copy is done


def _choose_clock() -> _CudaClock | _PerfCounterClock:
    wanted = os.environ.get(CLOCK_ENV, "auto").strip().lower()
    if wanted == "perf_counter":
        return _PerfCounterClock()
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        return _CudaClock(torch)
    return _PerfCounterClock()


def _is_global_rank_zero() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return True
    try:
        distributed = torch.distributed
        if distributed.is_available() and distributed.is_initialized():
            return distributed.get_rank() == 0
    except Exception:
        return True
    return True


class Recorder:
    """Per-process probe state: the cycle in progress, cycles awaiting their GPU events, and the
    writer thread. The hot path only records stamps and appends to a deque."""

    def __init__(self, probe_file: str) -> None:
        self.probe_file = probe_file
        self.enabled: bool | None = None  # decided at the first cycle (rank is known by then)
        self.clock: _CudaClock | _PerfCounterClock | None = None
        self.current: _Cycle | None = None
        self.pending: collections.deque[_Cycle] = collections.deque()
        self.dropped = 0
        self.written = 0
        self.flush_seconds = 0.0  # time the writer spent resolving and writing, for overhead checks
        self.plugin_claimed = False
        self.instrumented: set[tuple[str, str, str]] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._file: Any = None

    # the hot path ------------------------------------------------------------------------

    def _decide(self) -> bool:
        self.enabled = _is_global_rank_zero()
        if self.enabled:
            try:
                self.clock = _choose_clock()
            except Exception as exc:
                print(f"{LOG_PREFIX} disabled: no usable clock ({exc})", file=sys.stderr)
                self.enabled = False
                return False
            self._start_writer()
        return self.enabled

    def run_cycle(
        self,
        original: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        shape: Callable[[tuple, dict], tuple[int | None, int | None]],
    ) -> Any:
        """Time one call of a method that is a whole cycle; ``shape(args, kwargs)`` gives the
        cycle's (batch size, draft tokens) as ``end_cycle`` wants them."""
        cycle = self.begin_cycle()
        if cycle is None:
            return original(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self.abandon_cycle(cycle)
            raise
        self.end_cycle(cycle, lambda: shape(args, kwargs))
        return result

    def begin_cycle(self) -> _Cycle | None:
        """Open a cycle at the current stream position. None (pass the call through) when this
        process does not write, a cycle is already open, or the stream is capturing a graph."""
        enabled = self.enabled if self.enabled is not None else self._decide()
        if not enabled or self.current is not None:
            return None
        clock = self.clock
        if clock is None or clock.capturing():
            return None
        cycle = _Cycle(time.time(), clock.stamp(clock.stream()))
        self.current = cycle
        return cycle

    def abandon_cycle(self, cycle: _Cycle) -> None:
        self.current = None
        self.clock.release(cycle.stamps())  # type: ignore[union-attr]

    def end_cycle(self, cycle: _Cycle, shape: Callable[[], tuple[int | None, int | None]]) -> None:
        """Close the cycle; queue it for writing when it ran a verify, with (batch size, draft
        tokens) from ``shape``. A cycle without verify (a prefill batch) is dropped."""
        clock = self.clock
        self.current = None
        cycle.end = clock.stamp(clock.stream())  # type: ignore[union-attr]
        if any(phase == "verify" for phase, _, _ in cycle.spans):
            cycle.batch_size, cycle.draft_tokens = shape()
            self.pending.append(cycle)
            if len(self.pending) > MAX_PENDING_CYCLES:
                self._drop_oldest()
        else:
            clock.release(cycle.stamps())  # type: ignore[union-attr]

    def run_phase(
        self,
        phase: str,
        original: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        accepted: Callable[[Any, Any], list[int] | _HostCopy | None] | None = None,
    ) -> Any:
        """Time one call of a phase of the open cycle (pass it through when none is open);
        ``accepted(result, clock)``, when given, reads the cycle's per-request accepted draft
        tokens from the phase's result."""
        cycle = self.current
        if cycle is None:
            return original(*args, **kwargs)
        clock = self.clock
        stream = clock.stream()  # type: ignore[union-attr]
        start = clock.stamp(stream)  # type: ignore[union-attr]
        result = original(*args, **kwargs)
        cycle.spans.append((phase, start, clock.stamp(stream)))  # type: ignore[union-attr]
        if accepted is not None:
            cycle.accepted = accepted(result, clock)
        return result

    def _drop_oldest(self) -> None:
        try:
            cycle = self.pending.popleft()
        except IndexError:
            return
        self.dropped += 1
        if self.dropped == 1:
            write_warning(
                self.probe_file,
                f"probe fell behind: more than {MAX_PENDING_CYCLES} cycles awaited their GPU "
                "events, the oldest are being dropped",
            )
        del cycle

    # the writer thread -------------------------------------------------------------------

    def _start_writer(self) -> None:
        self._writer = threading.Thread(
            target=self._writer_loop, name="specmon-probe-writer", daemon=True
        )
        self._writer.start()
        atexit.register(self.close)

    def _writer_loop(self) -> None:
        try:
            self.clock.prepare_thread()  # type: ignore[union-attr]
        except Exception as exc:
            print(f"{LOG_PREFIX} writer thread could not select the device: {exc}", file=sys.stderr)
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush(wait=False)

    def flush(self, wait: bool) -> int:
        """Write every cycle whose events have completed, in order; with ``wait``, wait for them
        (used at exit). Returns the number of lines written."""
        clock = self.clock
        if clock is None:
            return 0
        with self._lock:
            began = time.perf_counter()
            lines: list[str] = []
            while self.pending:
                cycle = self.pending[0]
                stamps = cycle.stamps()
                if wait:
                    for stamp in stamps:
                        clock.wait(stamp)
                elif not clock.ready(cycle.end):  # later events on the stream finish last
                    break
                try:
                    lines.append(_record_line(cycle, clock))
                except Exception as exc:
                    if not wait and not all(clock.ready(stamp) for stamp in stamps):
                        break  # a phase on another stream is still running: retry later
                    message = json.dumps(f"probe could not read a cycle: {exc}")
                    lines.append(f'{{"type":"warning","message":{message}}}')
                self.pending.popleft()
                clock.release(stamps)
            if lines:
                self._write("".join(line + "\n" for line in lines))
            self.written += len(lines)
            self.flush_seconds += time.perf_counter() - began
            return len(lines)

    def _write(self, text: str) -> None:
        try:
            if self._file is None:
                self._file = open(self.probe_file, "a", encoding="utf-8")  # noqa: SIM115
            self._file.write(text)
            self._file.flush()
        except OSError as exc:
            print(f"{LOG_PREFIX} cannot write {self.probe_file}: {exc}", file=sys.stderr)

    def close(self) -> None:
        self._stop.set()
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(timeout=2.0)
        try:
            self.flush(wait=True)
        finally:
            if self._file is not None:
                self._file.close()
                self._file = None


def _record_line(cycle: _Cycle, clock: _CudaClock | _PerfCounterClock) -> str:
    """One JSON line of the records.py schema, formatted directly (the writer's hot spot)."""
    draft_ms = verify_ms = extend_ms = 0.0
    for phase, start, end in cycle.spans:
        span = clock.span_ms(start, end)
        if phase == "draft":
            draft_ms += span
        elif phase == "verify":
            verify_ms += span
        else:
            extend_ms += span
    accepted = cycle.accepted
    counts = accepted.counts() if isinstance(accepted, _HostCopy) else accepted
    per_request = (
        "" if counts is None else f',"accepted_per_request":[{",".join(map(str, counts))}]'
    )
    return (
        f'{{"wall":{cycle.wall:.6f},"draft_ms":{draft_ms:.4f},"verify_ms":{verify_ms:.4f},'
        f'"extend_ms":{extend_ms:.4f},"cycle_ms":{clock.span_ms(cycle.start, cycle.end):.4f},'
        f'"batch_size":{_json_int(cycle.batch_size)},"draft_tokens":{_json_int(cycle.draft_tokens)},'
        f'"accepted_tokens":{_json_int(cycle.accepted_tokens if counts is None else sum(counts))}'
        f"{per_request}{cycle.extra},"
        f'"clock":"{clock.name}"}}'
    )


def _json_int(value: int | None) -> str:
    return "null" if value is None else str(int(value))


# --- warnings --------------------------------------------------------------------------------


def write_warning(probe_file: str, message: str) -> None:
    """Append one warning record, once per message across all processes of the run (every TP
    rank imports the worker; a marker file beside the probe file keeps it to one line)."""
    digest = hashlib.sha1(message.encode()).hexdigest()[:12]
    marker = f"{probe_file}.warned-{digest}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return
    except OSError:
        fd = None
    if fd is not None:
        os.close(fd)
    print(f"{LOG_PREFIX} warning: {message}", file=sys.stderr)
    try:
        with open(probe_file, "a", encoding="utf-8") as out:
            out.write(json.dumps({"type": "warning", "message": message}) + "\n")
    except OSError as exc:
        print(f"{LOG_PREFIX} cannot write {probe_file}: {exc}", file=sys.stderr)


# --- instrumenting ---------------------------------------------------------------------------

_RECORDER: Recorder | None = None


def recorder() -> Recorder | None:
    return _RECORDER


def dressed_as(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` with ``original``'s name, module and docstring, and ``__wrapped__`` set: what
    a table puts in place of a server's method still reads as that method."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attribute, getattr(original, attribute, None))
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def start_recorder() -> Recorder | None:
    """This process's recorder, made at the first call; None when ``$SPECMON_PROBE_FILE`` is
    unset (then the probe stays off). ``install()`` and a server's plugin entry share it."""
    global _RECORDER
    probe_file = os.environ.get(PROBE_FILE_ENV, "").strip()
    if not probe_file:
        return None
    if _RECORDER is None:
        _RECORDER = Recorder(probe_file)
    return _RECORDER


# The server tables: modules shipped beside this one (named in TABLES_FILE by the backend that
# shipped them), each with a ``watched_modules(hook) -> {module name: callback(module)}``
# function, called with this module; the callback instruments the module once it executed.
_WATCHED: dict[str, Callable[[Any], None]] = {}


def shipped_tables() -> list[str]:
    """The server table modules named in ``TABLES_FILE`` beside this file (none without it)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), TABLES_FILE)
    try:
        with open(path, encoding="utf-8") as manifest:
            return [line.strip() for line in manifest if line.strip()]
    except OSError as exc:
        print(f"{LOG_PREFIX} no server table: {exc}", file=sys.stderr)
        return []


def _load_server_tables() -> None:
    for name in shipped_tables():
        try:
            table = importlib.import_module(name)
            watched = table.watched_modules(sys.modules[__name__])
        except Exception as exc:  # one server's table must not stop another's
            print(f"{LOG_PREFIX} {name} not loaded: {exc}", file=sys.stderr)
            continue
        for module, callback in watched.items():
            _WATCHED[module] = chain(_WATCHED.get(module), callback)


def chain(
    first: Callable[[Any], None] | None, second: Callable[[Any], None]
) -> Callable[[Any], None]:
    """One callback running ``first`` (when there is one), then ``second``: two watchers of one
    module, whether from two tables or two families of one table."""
    if first is None:
        return second

    def both(module: Any) -> None:
        first(module)
        second(module)

    return both


def _after_exec(fullname: str) -> Callable[[Any], None] | None:
    return _WATCHED.get(fullname)


class _InstrumentingLoader(importlib.abc.Loader):
    """Runs the real loader, then instruments the freshly executed worker module."""

    def __init__(self, inner: Any, after_exec: Callable[[Any], None]) -> None:
        self._inner = inner
        self._after_exec = after_exec

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        try:
            self._after_exec(module)
        except Exception as exc:  # never break the server's import
            print(f"{LOG_PREFIX} could not instrument {module.__name__}: {exc}", file=sys.stderr)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... for tracebacks
        return getattr(self._inner, name)


class WorkerModuleFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that answers only for the watched server modules and hands the real
    spec back with an instrumenting loader."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        after_exec = _after_exec(fullname)
        if after_exec is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _InstrumentingLoader(spec.loader, after_exec)
                return spec
        return None


def install() -> bool:
    """Start the probe in this process when ``$SPECMON_PROBE_FILE`` is set: load the server
    tables and install the import hook (watched modules already imported are instrumented at
    once). Returns whether it did."""
    if start_recorder() is None:
        return False
    if not _WATCHED:
        _load_server_tables()
    if not any(isinstance(f, WorkerModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, WorkerModuleFinder())
    for name in tuple(_WATCHED):
        module = sys.modules.get(name)
        after_exec = _after_exec(name)
        if module is not None and after_exec is not None:
            after_exec(module)
    return True
