"""specmon's draft/verify timing probe, running inside SGLang's scheduler processes.

This file is copied to the GPU host (``<run dir>/probe/``) and imported there by the
sitecustomize.py beside it or by SGLang's plugin loader, so it must stay self-contained:
the standard library, plus torch when it is present. Importing it changes nothing; ``install()``
and ``register_sglang_plugin()`` are the two ways in.

What it does: wraps the EAGLE worker's per-cycle methods (the cycle itself, and its draft,
verify and draft-extend phases), records a CUDA event before and after each (no
synchronisation on the hot path), and lets a background thread resolve finished events and
append one JSON line per cycle to ``$SPECMON_PROBE_FILE``. Only global rank 0 writes cycles.
When a target is missing (another SGLang version) it writes one warning record and leaves the
worker untouched.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import importlib
import importlib.abc
import importlib.util
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

PROBE_FILE_ENV = "SPECMON_PROBE_FILE"
CLOCK_ENV = "SPECMON_PROBE_CLOCK"  # "auto" (default), "cuda" or "perf_counter"
PLUGIN_NAME = "specmon_probe"
FLUSH_INTERVAL_S = 0.2
MAX_PENDING_CYCLES = 20000  # cycles waiting for their GPU events; older ones are dropped
LOG_PREFIX = "[specmon probe]"


class Target(NamedTuple):
    """One method the probe wraps. ``method_names`` lists the spellings across versions."""

    role: str  # "cycle", "draft", "verify" or "extend"
    class_name: str
    method_names: tuple[str, ...]


class TargetFamily(NamedTuple):
    """The targets of one EAGLE worker implementation, all found in one module."""

    name: str
    module: str
    targets: tuple[Target, ...]


TARGET_FAMILIES: tuple[TargetFamily, ...] = (
    TargetFamily(
        "v1 EAGLEWorker",
        "sglang.srt.speculative.eagle_worker",
        (
            # <= 0.5.2 named the cycle forward_batch_speculative_generation.
            Target(
                "cycle",
                "EAGLEWorker",
                ("forward_batch_generation", "forward_batch_speculative_generation"),
            ),
            Target("draft", "EAGLEWorker", ("draft",)),
            Target("verify", "EAGLEWorker", ("verify",)),
            Target("extend", "EAGLEWorker", ("forward_draft_extend_after_decode",)),
        ),
    ),
    TargetFamily(
        "v2 EAGLEWorkerV2",
        "sglang.srt.speculative.eagle_worker_v2",
        (
            Target("cycle", "EAGLEWorkerV2", ("forward_batch_generation",)),
            Target("draft", "EagleDraftWorker", ("draft",)),
            Target("verify", "EAGLEWorkerV2", ("verify",)),
            Target("extend", "EagleDraftWorker", ("_draft_extend_for_decode",)),
        ),
    ),
)
FAMILY_BY_MODULE = {family.module: family for family in TARGET_FAMILIES}
# Attributes of a verify result that hold the accepted draft tokens per request (a CPU list).
ACCEPTED_ATTRIBUTES = ("accept_length_per_req_cpu", "num_correct_drafts_per_req_cpu")
# v2's verify result keeps them on the GPU, bonus token included: copied asynchronously.
ACCEPT_LENS_ATTRIBUTE = "accept_lens"


# --- resolving targets ------------------------------------------------------------------------


def takes_a_batch(function: Any) -> bool:
    """True when ``function(self, batch, ...)`` is callable: the probe passes arguments through
    unchanged and reads the batch size from the first argument after self."""
    if not inspect.isfunction(function):
        return False
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    has_varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return len(positional) >= 2 or (len(positional) == 1 and has_varargs)


def resolve_family(
    module: Any, family: TargetFamily
) -> tuple[dict[str, tuple[type, str]], list[str]]:
    """Find each target of ``family`` in an imported module: (role -> (class, method name)),
    and a list of problems, each naming what was not found or not usable."""
    found: dict[str, tuple[type, str]] = {}
    problems: list[str] = []
    for target in family.targets:
        cls = getattr(module, target.class_name, None)
        if not isinstance(cls, type):
            problems.append(f"class {target.class_name} not found")
            continue
        name = next((n for n in target.method_names if hasattr(cls, n)), None)
        if name is None:
            problems.append(f"{target.class_name}.{'/'.join(target.method_names)} not found")
            continue
        if not takes_a_batch(inspect.getattr_static(cls, name)):
            problems.append(f"{target.class_name}.{name} has an incompatible signature")
            continue
        found[target.role] = (cls, name)
    return found, problems


def sglang_version() -> str:
    module = sys.modules.get("sglang")
    version = getattr(module, "__version__", None)
    if version is None:
        version_module = sys.modules.get("sglang.version")
        version = getattr(version_module, "__version__", None)
    return str(version) if version is not None else "unknown"


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

    def run_cycle(self, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        cycle = self.begin_cycle()
        if cycle is None:
            return original(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self.abandon_cycle(cycle)
            raise
        self.end_cycle(cycle, lambda: _batch_shape(args, kwargs))
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

    def run_phase(self, phase: str, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        cycle = self.current
        if cycle is None:
            return original(*args, **kwargs)
        clock = self.clock
        stream = clock.stream()  # type: ignore[union-attr]
        start = clock.stamp(stream)  # type: ignore[union-attr]
        result = original(*args, **kwargs)
        cycle.spans.append((phase, start, clock.stamp(stream)))  # type: ignore[union-attr]
        if phase == "verify":
            cycle.accepted = _accepted(result, clock)  # type: ignore[arg-type]
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


def _batch_shape(args: tuple, kwargs: dict) -> tuple[int | None, int | None]:
    """(batch size, draft tokens verified) from ``forward_batch_generation(self, batch)``:
    ``len(batch.seq_lens)`` x the worker's ``speculative_num_draft_tokens``; None when absent."""
    worker = args[0] if args else None
    batch = args[1] if len(args) > 1 else kwargs.get("batch", kwargs.get("model_worker_batch"))
    try:
        batch_size = len(batch.seq_lens)  # a tensor's length is host metadata: no sync
    except Exception:
        return None, None
    per_request = getattr(worker, "speculative_num_draft_tokens", None)
    if per_request is None:
        per_request = getattr(
            getattr(worker, "server_args", None), "speculative_num_draft_tokens", None
        )
    draft_tokens = batch_size * per_request if isinstance(per_request, int) else None
    return batch_size, draft_tokens


def _accepted(result: Any, clock: _CudaClock | _PerfCounterClock) -> list[int] | _HostCopy | None:
    """Each request's accepted draft tokens (bonus excluded) from a verify result: v1's CPU list
    (the second item of its tuple) as it is, v2's ``accept_lens`` device tensor as a pinned
    host copy started now and read by the writer once the cycle's end event has completed (no
    synchronisation on the hot path); None when the result has neither."""
    candidates = result if isinstance(result, tuple) else (result,)
    for candidate in candidates:
        for attribute in ACCEPTED_ATTRIBUTES:
            per_request = getattr(candidate, attribute, None)
            if isinstance(per_request, (list, tuple)):
                try:
                    return [int(a) for a in per_request]
                except (TypeError, ValueError):
                    return None
        lens = getattr(candidate, ACCEPT_LENS_ATTRIBUTE, None)
        if lens is not None:
            try:
                return clock.copy_to_host(lens)
            except Exception:
                return None
    return None


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


def _make_wrapper(role: str, original: Callable[..., Any], rec: Recorder) -> Callable[..., Any]:
    if role == "cycle":

        def timed_cycle(*args: Any, **kwargs: Any) -> Any:
            return rec.run_cycle(original, args, kwargs)

        wrapper = timed_cycle
    else:

        def timed_phase(*args: Any, **kwargs: Any) -> Any:
            return rec.run_phase(role, original, args, kwargs)

        wrapper = timed_phase
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(wrapper, attribute, getattr(original, attribute, None))
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _check_family(
    module: Any, family: TargetFamily, rec: Recorder
) -> dict[str, tuple[type, str]] | None:
    found, problems = resolve_family(module, family)
    if problems:
        write_warning(
            rec.probe_file,
            f"probe disabled for {family.name} in SGLang {sglang_version()}: "
            + "; ".join(problems)
            + f" (module {family.module}); the server runs unmodified",
        )
        return None
    return found


def instrument_module(module: Any, family: TargetFamily) -> None:
    """Wrap the targets of ``family`` in ``module`` (the import-hook path). Does nothing when the
    plugin path has claimed this process, or when any target is missing (then it warns)."""
    rec = _RECORDER
    if rec is None or rec.plugin_claimed:
        return
    found = _check_family(module, family, rec)
    if found is None:
        return
    wrapped = []
    for role, (cls, name) in found.items():
        key = (family.module, cls.__name__, name)
        if key in rec.instrumented:
            continue
        original = inspect.getattr_static(cls, name)
        setattr(cls, name, _make_wrapper(role, original, rec))
        rec.instrumented.add(key)
        wrapped.append(f"{cls.__name__}.{name}")
    if wrapped:
        print(
            f"{LOG_PREFIX} timing {', '.join(wrapped)} via import hook -> {rec.probe_file}",
            file=sys.stderr,
        )


# Other servers' target tables: injected modules beside this one, each with a
# ``watched_modules(hook) -> {module name: callback(module)}`` function (see specmon_probe_vllm).
SERVER_TABLES = ("specmon_probe_vllm",)
_WATCHED: dict[str, Callable[[Any], None]] = {}


def _load_server_tables() -> None:
    for name in SERVER_TABLES:
        try:
            table = importlib.import_module(name)
            _WATCHED.update(table.watched_modules(sys.modules[__name__]))
        except Exception as exc:  # one server's table must not stop another's
            print(f"{LOG_PREFIX} {name} not loaded: {exc}", file=sys.stderr)


def _after_exec(fullname: str) -> Callable[[Any], None] | None:
    family = FAMILY_BY_MODULE.get(fullname)
    if family is not None:
        return lambda module: instrument_module(module, family)
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
    """Start the probe in this process when ``$SPECMON_PROBE_FILE`` is set: install the import
    hook (worker modules already imported are instrumented at once). Returns whether it did."""
    global _RECORDER
    probe_file = os.environ.get(PROBE_FILE_ENV, "").strip()
    if not probe_file:
        return False
    if _RECORDER is None:
        _RECORDER = Recorder(probe_file)
    if not _WATCHED:
        _load_server_tables()
    if not any(isinstance(f, WorkerModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, WorkerModuleFinder())
    for name in (*FAMILY_BY_MODULE, *_WATCHED):
        module = sys.modules.get(name)
        after_exec = _after_exec(name)
        if module is not None and after_exec is not None:
            after_exec(module)
    return True


def register_sglang_plugin() -> None:
    """Entry point for SGLang's plugin loader (group ``sglang.srt.plugins``, 0.5.11 and later):
    register AROUND hooks with its HookRegistry, which applies them after all plugins load."""
    global _RECORDER
    probe_file = os.environ.get(PROBE_FILE_ENV, "").strip()
    if not probe_file:
        return
    if _RECORDER is None:
        _RECORDER = Recorder(probe_file)
    rec = _RECORDER
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError as exc:
        write_warning(probe_file, f"SGLang plugin registry unusable ({exc}); import hook only")
        return
    rec.plugin_claimed = True  # from now on the import hook stands aside
    for family in TARGET_FAMILIES:
        try:
            if importlib.util.find_spec(family.module) is None:
                continue
            module = importlib.import_module(family.module)
            _register_family(module, family, rec, HookRegistry, HookType)
        except Exception as exc:  # the plugin loader would only log it: say it in the probe file
            write_warning(
                probe_file,
                f"probe disabled for {family.name}: {type(exc).__name__}: {exc}; "
                "the server runs unmodified",
            )


def _register_family(
    module: Any, family: TargetFamily, rec: Recorder, registry: Any, hook_type: Any
) -> None:
    found = _check_family(module, family, rec)
    if found is None:
        return
    registered = []
    for role, (cls, name) in found.items():
        key = (family.module, cls.__name__, name)
        if key in rec.instrumented:  # the import hook got there first
            continue
        registry.register(
            f"{family.module}.{cls.__name__}.{name}", _around_hook(role, rec), hook_type.AROUND
        )
        rec.instrumented.add(key)
        registered.append(f"{cls.__name__}.{name}")
    if registered:
        print(
            f"{LOG_PREFIX} timing {', '.join(registered)} via sglang plugin hooks -> "
            f"{rec.probe_file}",
            file=sys.stderr,
        )


def _around_hook(role: str, rec: Recorder) -> Callable[..., Any]:
    if role == "cycle":

        def around_cycle(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return rec.run_cycle(original, args, kwargs)

        return around_cycle

    def around_phase(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return rec.run_phase(role, original, args, kwargs)

    return around_phase
