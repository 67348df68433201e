"""vLLM's probe table: its targets, and the glue that times them inside vLLM's worker processes.

Copied to the GPU host as ``specmon_probe_vllm.py`` beside the probe runtime
(``specmon_probe_hook.py``, from ``specmon/probe/inject/``), which loads it at ``install()`` (it
is named in the ``specmon_probe_tables.txt`` shipped with it) and asks ``watched_modules(hook)``
which modules to watch. The table itself needs nothing but the standard library, so specmon
reads it too (``python -m specmon.probe --check-source``).

A vLLM cycle is one engine step in a worker process (``Worker_TPn``, or the EngineCore process
with one GPU): it opens when ``GPUModelRunner.execute_model`` is entered and closes when it
returns, or, from ~0.11 where that call only runs the forward and keeps its state, when the
following ``GPUModelRunner.sample_tokens`` returns. Inside it:

* verify: from the cycle's start (the target forward and everything before it) to the exit of
  the rejection sampler, in a step that verifies draft tokens (from ~0.32 the V1 runner calls
  the rejection sampler in prefill steps too; a step without drafts is not recorded);
* draft: the EAGLE proposer's ``propose`` (V1 ``EagleProposer``, V2 ``EagleSpeculator``);
* extend: vLLM's EAGLE has no separate draft-extend call (the proposer's first forward runs over
  the accepted tokens), so it is 0.0.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

VLLM_VERIFY_END = "verify_end"


class VllmTarget(NamedTuple):
    """One method the probe wraps in vLLM, and the module whose import defines its class."""

    role: str  # "cycle", "cycle_end", "draft" or "verify_end"
    module: str
    class_name: str
    method_name: str
    required: bool = True  # an optional target (sample_tokens before ~0.11) may be absent


class VllmFamily(NamedTuple):
    """The targets of one vLLM model runner; they live in several modules."""

    name: str
    targets: tuple[VllmTarget, ...]

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.module for t in self.targets))


VLLM_FAMILIES: tuple[VllmFamily, ...] = (
    VllmFamily(
        "V1 GPUModelRunner",
        (
            VllmTarget(
                "cycle", "vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "execute_model"
            ),
            VllmTarget(
                "cycle_end",
                "vllm.v1.worker.gpu_model_runner",
                "GPUModelRunner",
                "sample_tokens",
                required=False,
            ),
            VllmTarget("draft", "vllm.v1.spec_decode.eagle", "EagleProposer", "propose"),
            VllmTarget(
                VLLM_VERIFY_END, "vllm.v1.sample.rejection_sampler", "RejectionSampler", "forward"
            ),
        ),
    ),
    VllmFamily(
        "V2 GPUModelRunner",
        (
            VllmTarget(
                "cycle", "vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "execute_model"
            ),
            VllmTarget(
                "cycle_end",
                "vllm.v1.worker.gpu.model_runner",
                "GPUModelRunner",
                "sample_tokens",
                required=False,
            ),
            VllmTarget(
                "draft",
                "vllm.v1.worker.gpu.spec_decode.eagle.speculator",
                "EagleSpeculator",
                "propose",
            ),
            VllmTarget(
                VLLM_VERIFY_END,
                "vllm.v1.worker.gpu.spec_decode.rejection_sampler",
                "RejectionSampler",
                "__call__",
            ),
        ),
    ),
)


def vllm_version() -> str:
    for name in ("vllm", "vllm.version", "vllm._version"):
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is not None:
            return str(version)
    return "unknown"


# --- the runtime (only inside vLLM, with the hook module passed in) --------------------------


class _FamilyTiming:
    """Watches one family's modules; once all have executed, wraps its targets."""

    def __init__(self, hook: Any, family: VllmFamily) -> None:
        self.hook = hook
        self.family = family
        self.executed: set[str] = set()
        self.done = False
        self.scheduler_output: Any = None  # of the open cycle
        self.open_cycle: Any = None
        self.has_cycle_end = False  # sample_tokens was wrapped: it closes the cycle

    def module_executed(self, module: Any) -> None:
        self.executed.add(module.__name__)
        if self.done or not all(name in self.executed for name in self.family.modules):
            return
        self.done = True
        rec = self.hook.recorder()
        if rec is None:
            return
        found, problems = self._resolve()
        if problems:
            self.hook.write_warning(
                rec.probe_file,
                f"probe disabled for vLLM {self.family.name} in vLLM {vllm_version()}: "
                + "; ".join(problems)
                + "; the server runs unmodified",
            )
            return
        wrapped = []
        for target, cls in found:
            key = (target.module, cls.__name__, target.method_name)
            if key in rec.instrumented:
                continue
            original = inspect.getattr_static(cls, target.method_name)
            setattr(cls, target.method_name, self._wrapper(target.role, original, rec))
            rec.instrumented.add(key)
            self.has_cycle_end = self.has_cycle_end or target.role == "cycle_end"
            wrapped.append(f"{cls.__name__}.{target.method_name}")
        if wrapped:
            print(
                f"{self.hook.LOG_PREFIX} timing {', '.join(wrapped)} ({self.family.name}) "
                f"via import hook -> {rec.probe_file}",
                file=sys.stderr,
            )

    def _resolve(self) -> tuple[list[tuple[VllmTarget, type]], list[str]]:
        found: list[tuple[VllmTarget, type]] = []
        problems: list[str] = []
        for target in self.family.targets:
            cls = getattr(sys.modules.get(target.module), target.class_name, None)
            where = f"{target.class_name}.{target.method_name} (module {target.module})"
            if not isinstance(cls, type):
                problems.append(f"class {target.class_name} not found (module {target.module})")
            elif not inspect.isfunction(inspect.getattr_static(cls, target.method_name, None)):
                if target.required:
                    problems.append(f"{where} not found")
            else:
                found.append((target, cls))
        return found, problems

    def _wrapper(self, role: str, original: Callable[..., Any], rec: Any) -> Callable[..., Any]:
        if role == "cycle":

            def timed(*args: Any, **kwargs: Any) -> Any:
                return self._execute_model(rec, original, args, kwargs)

        elif role == "cycle_end":

            def timed(*args: Any, **kwargs: Any) -> Any:
                return self._sample_tokens(rec, original, args, kwargs)

        elif role == VLLM_VERIFY_END:

            def timed(*args: Any, **kwargs: Any) -> Any:
                return self._rejection_sampler(rec, original, args, kwargs)

        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                return rec.run_phase(role, original, args, kwargs)

        return self.hook.dressed_as(timed, original)

    # each call is the hot path: stamps and attribute reads only, never a sync

    def _execute_model(self, rec: Any, original: Callable[..., Any], args: tuple, kwargs: dict):
        if self.open_cycle is not None and rec.current is self.open_cycle:
            self._close(rec, None)  # sample_tokens never came: close what is open
        if kwargs.get("dummy_run"):  # V2's warm-up and graph capture: not a serving step
            return original(*args, **kwargs)
        cycle = rec.begin_cycle()
        if cycle is None:
            return original(*args, **kwargs)
        self.open_cycle = cycle
        self.scheduler_output = args[1] if len(args) > 1 else kwargs.get("scheduler_output")
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self.open_cycle = self.scheduler_output = None
            rec.abandon_cycle(cycle)
            raise
        # From ~0.11 execute_model returns None and keeps its state for sample_tokens.
        if result is not None or not self.has_cycle_end:
            self._close(rec, result)
        return result

    def _sample_tokens(self, rec: Any, original: Callable[..., Any], args: tuple, kwargs: dict):
        cycle = self.open_cycle
        if cycle is None or rec.current is not cycle:
            return original(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self.open_cycle = self.scheduler_output = None
            rec.abandon_cycle(cycle)
            raise
        self._close(rec, result)
        return result

    def _rejection_sampler(
        self, rec: Any, original: Callable[..., Any], args: tuple, kwargs: dict
    ) -> Any:
        result = original(*args, **kwargs)
        cycle = rec.current
        if (
            cycle is not None
            and cycle is self.open_cycle
            and has_draft_tokens(self.scheduler_output)
            and not any(phase == "verify" for phase, _, _ in cycle.spans)
        ):
            clock = rec.clock
            cycle.spans.append(("verify", cycle.start, clock.stamp(clock.stream())))
        return result

    def _close(self, rec: Any, result: Any) -> None:
        cycle, scheduler_output = self.open_cycle, self.scheduler_output
        self.open_cycle = self.scheduler_output = None
        accepted = accepted_counts(scheduler_output, result)
        if accepted is not None:
            cycle.accepted_tokens, per_position, drafted = accepted
            cycle.extra = (
                f',"accepted_per_position":[{",".join(map(str, per_position))}],'
                f'"drafted_per_position":[{",".join(map(str, drafted))}]'
            )
        rec.end_cycle(cycle, lambda: batch_shape(scheduler_output))


def has_draft_tokens(scheduler_output: Any) -> bool:
    """Whether the step verifies any draft token. From ~0.32 the V1 runner calls the rejection
    sampler on every step once speculative decoding is configured, a prefill with no drafts
    included; such a step is no speculative cycle (it is dropped, as SGLang's prefills are).
    True when the scheduler output has no readable draft table (keep the cycle)."""
    drafts = getattr(scheduler_output, "scheduled_spec_decode_tokens", None)
    if not isinstance(drafts, dict):
        return True
    return any(drafts.values())


def batch_shape(scheduler_output: Any) -> tuple[int | None, int | None]:
    """(requests in the step, draft tokens scheduled for verification), from the scheduler's
    CPU-side ``SchedulerOutput``; None where a field is absent."""
    try:
        batch_size = len(scheduler_output.num_scheduled_tokens)
    except Exception:
        return None, None
    drafts = getattr(scheduler_output, "scheduled_spec_decode_tokens", None)
    if not isinstance(drafts, dict):
        return batch_size, None
    return batch_size, sum(len(tokens) for tokens in drafts.values())


def accepted_counts(scheduler_output: Any, result: Any) -> tuple[int, list[int], list[int]] | None:
    """(accepted draft tokens, accepted per position, drafted per position) when the step's
    output already holds the sampled tokens as CPU lists (``ModelRunnerOutput.sampled_token_ids``,
    which vLLM filled after its own sync). None for an async output (the copy is still running)
    or anything else: the probe never reads the GPU."""
    sampled = getattr(result, "sampled_token_ids", None)
    req_ids = getattr(result, "req_ids", None)
    drafts = getattr(scheduler_output, "scheduled_spec_decode_tokens", None)
    if (
        not isinstance(sampled, list)
        or not isinstance(req_ids, list)
        or not isinstance(drafts, dict)
        or len(sampled) != len(req_ids)
    ):
        return None
    accepted_total = 0
    per_position: list[int] = []
    drafted: list[int] = []
    for req_id, tokens in zip(req_ids, sampled, strict=True):
        if not isinstance(tokens, (list, tuple)):
            return None
        proposed = len(drafts.get(req_id, ()))
        if proposed == 0 or not tokens:
            continue
        accepted = min(max(len(tokens) - 1, 0), proposed)  # the last token is the bonus
        accepted_total += accepted
        while len(drafted) < proposed:
            drafted.append(0)
            per_position.append(0)
        for position in range(proposed):
            drafted[position] += 1
            if position < accepted:
                per_position[position] += 1
    return accepted_total, per_position, drafted


def watched_modules(hook: Any) -> dict[str, Callable[[Any], None]]:
    """Called by specmon_probe_hook at install: module name -> what to do once it executed."""
    watched: dict[str, Callable[[Any], None]] = {}
    for family in VLLM_FAMILIES:
        timing = _FamilyTiming(hook, family)
        for module in family.modules:
            previous = watched.get(module)
            watched[module] = hook.chain(previous, timing.module_executed)
    return watched
