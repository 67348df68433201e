"""SGLang's probe table: the EAGLE worker methods the probe times, and the glue that times them
inside SGLang's scheduler processes.

Copied to the GPU host as ``specmon_probe_sglang.py`` beside the probe runtime
(``specmon_probe_hook.py``, from ``specmon/probe/inject/``), which loads it at ``install()`` and
asks ``watched_modules(hook)`` which modules to watch (the import-hook path, every version).
SGLang 0.5.11 and later also load it through their plugin loader: ``register_sglang_plugin`` is
the entry point of the shipped ``.dist-info`` (``specmon/backends/sglang/probe.py``). It needs
nothing but the standard library, and imports the runtime only inside the server, so specmon
reads the table too (``python -m specmon.probe --check-source``).

What is timed: the EAGLE worker's per-cycle methods (the cycle itself, and its draft, verify
and draft-extend phases). When a target is missing (another SGLang version) one warning record
is written and the worker is left untouched.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

PLUGIN_NAME = "specmon_probe"  # the entry point's name in group sglang.srt.plugins


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


# --- what a cycle's call tells ------------------------------------------------------------


def batch_shape(args: tuple, kwargs: dict) -> tuple[int | None, int | None]:
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


def accepted_counts(result: Any, clock: Any) -> Any:
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


# --- instrumenting (inside the server, with the runtime module passed in) --------------------


def _make_wrapper(
    hook: Any, role: str, original: Callable[..., Any], rec: Any
) -> Callable[..., Any]:
    if role == "cycle":

        def timed_cycle(*args: Any, **kwargs: Any) -> Any:
            return rec.run_cycle(original, args, kwargs, batch_shape)

        wrapper = timed_cycle
    else:
        reader = _result_reader(role)

        def timed_phase(*args: Any, **kwargs: Any) -> Any:
            return rec.run_phase(role, original, args, kwargs, reader)

        wrapper = timed_phase
    return hook.dressed_as(wrapper, original)


def _result_reader(role: str) -> Callable[[Any, Any], Any] | None:
    """What a phase's result tells the cycle: verify's holds the accepted draft tokens."""
    return accepted_counts if role == "verify" else None


def _check_family(
    hook: Any, module: Any, family: TargetFamily, rec: Any
) -> dict[str, tuple[type, str]] | None:
    found, problems = resolve_family(module, family)
    if problems:
        hook.write_warning(
            rec.probe_file,
            f"probe disabled for {family.name} in SGLang {sglang_version()}: "
            + "; ".join(problems)
            + f" (module {family.module}); the server runs unmodified",
        )
        return None
    return found


def instrument_module(hook: Any, family: TargetFamily, module: Any) -> None:
    """Wrap the targets of ``family`` in ``module`` (the import-hook path). Does nothing when the
    plugin path has claimed this process, or when any target is missing (then it warns)."""
    rec = hook.recorder()
    if rec is None or rec.plugin_claimed:
        return
    found = _check_family(hook, module, family, rec)
    if found is None:
        return
    wrapped = []
    for role, (cls, name) in found.items():
        key = (family.module, cls.__name__, name)
        if key in rec.instrumented:
            continue
        original = inspect.getattr_static(cls, name)
        setattr(cls, name, _make_wrapper(hook, role, original, rec))
        rec.instrumented.add(key)
        wrapped.append(f"{cls.__name__}.{name}")
    if wrapped:
        print(
            f"{hook.LOG_PREFIX} timing {', '.join(wrapped)} via import hook -> {rec.probe_file}",
            file=sys.stderr,
        )


def watched_modules(hook: Any) -> dict[str, Callable[[Any], None]]:
    """Called by specmon_probe_hook at install: module name -> what to do once it executed."""
    return {
        family.module: functools.partial(instrument_module, hook, family)
        for family in TARGET_FAMILIES
    }


def register_sglang_plugin() -> None:
    """Entry point for SGLang's plugin loader (group ``sglang.srt.plugins``, 0.5.11 and later):
    register AROUND hooks with its HookRegistry, which applies them after all plugins load."""
    import specmon_probe_hook as hook  # the runtime, beside this file in <run dir>/probe/

    rec = hook.start_recorder()
    if rec is None:
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError as exc:
        hook.write_warning(
            rec.probe_file, f"SGLang plugin registry unusable ({exc}); import hook only"
        )
        return
    rec.plugin_claimed = True  # from now on the import hook stands aside
    for family in TARGET_FAMILIES:
        try:
            if importlib.util.find_spec(family.module) is None:
                continue
            module = importlib.import_module(family.module)
            _register_family(hook, module, family, rec, HookRegistry, HookType)
        except Exception as exc:  # the plugin loader would only log it: say it in the probe file
            hook.write_warning(
                rec.probe_file,
                f"probe disabled for {family.name}: {type(exc).__name__}: {exc}; "
                "the server runs unmodified",
            )


def _register_family(
    hook: Any, module: Any, family: TargetFamily, rec: Any, registry: Any, hook_type: Any
) -> None:
    found = _check_family(hook, module, family, rec)
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
            f"{hook.LOG_PREFIX} timing {', '.join(registered)} via sglang plugin hooks -> "
            f"{rec.probe_file}",
            file=sys.stderr,
        )


def _around_hook(role: str, rec: Any) -> Callable[..., Any]:
    if role == "cycle":

        def around_cycle(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return rec.run_cycle(original, args, kwargs, batch_shape)

        return around_cycle
    reader = _result_reader(role)

    def around_phase(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return rec.run_phase(role, original, args, kwargs, reader)

    return around_phase
