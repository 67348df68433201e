"""Every recorded difference between two runs, and the likely causes an operator reads from
them, most likely first: the auxiliary layers the draft is fed, then the draft's and the
target's checkpoints, the chat template, sampling, the server's version, flags, environment
(docs/run-diff.md). Pure: a run is what its record holds (``RunFacts``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.backends.flag_grammar import parse_flags
from specmon.model.diagnosis import Change, Diagnosis, shown_value
from specmon.state.run_status import RunStatus

# The flags that only say where a server listens.
ADDRESS_FLAGS = ("flag --port", "flag --host")
# The config.json fields that name the layers an EAGLE-3 draft reads (each server's key).
AUX_FIELD_WORDS = ("aux_hidden_state_layer_ids", "layer_ids")


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What a run's record says about how it ran: flags and environment as recorded (secrets
    as ***), the draft's and target's fingerprint, the server's version and, from the
    ledger's benchmarks of it, their sampling parameters."""

    run_id: str
    backend: str
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    fingerprint: Mapping[str, Any] | None = None
    server_version: str | None = None
    sampling: Mapping[str, Any] | None = None
    started_at: float | None = None
    profile: str | None = None

    @classmethod
    def from_status(cls, run: RunStatus, sampling: Mapping[str, Any] | None = None) -> RunFacts:
        from specmon.model.secrets import redact_argv

        return cls(
            run_id=run.run_id,
            backend=run.backend,
            argv=tuple(redact_argv(run.argv)),
            env=dict(run.env),
            fingerprint=run.fingerprint,
            server_version=run.server_version,
            sampling=sampling,
            started_at=run.started_at,
            profile=run.profile,
        )


def split_argv(argv: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str | bool]]:
    """The command words before the first ``--flag``, and the flags as name -> value (the
    last of a repeated flag; a switch's value True, so an absent one differs)."""
    start = next((i for i, word in enumerate(argv) if word.startswith("--")), len(argv))
    items, _problems = parse_flags(list(argv[start:]))
    return tuple(argv[:start]), {
        item.name: item.value if item.value is not None else True for item in items
    }


def _mapping_changes(
    prefix: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[Change]:
    return [
        Change(f"{prefix}{key}", before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def _side(fingerprint: Mapping[str, Any] | None, role: str) -> Mapping[str, Any]:
    side = (fingerprint or {}).get(role)
    return side if isinstance(side, Mapping) else {}


def _fields(side: Mapping[str, Any]) -> Mapping[str, Any]:
    fields = side.get("fields")
    return fields if isinstance(fields, Mapping) else {}


def diff_runs(a: RunFacts, b: RunFacts) -> list[Change]:
    """Every recorded difference from run ``a`` to run ``b``, grouped as ``diagnose`` reads
    them. What neither record holds (a fingerprint of a run from before they existed) is not
    a difference: ``unknown_parts`` says what could not be compared."""
    changes: list[Change] = []
    if a.backend != b.backend:
        changes.append(Change("backend", a.backend, b.backend))
    fa, fb = a.fingerprint, b.fingerprint
    if fa and fb:
        if fa.get("aux_layer_ids") != fb.get("aux_layer_ids"):
            changes.append(
                Change("aux_layer_ids", fa.get("aux_layer_ids"), fb.get("aux_layer_ids"))
            )
        captured_a = fa.get("aux_captured", fa.get("aux_layer_ids"))
        captured_b = fb.get("aux_captured", fb.get("aux_layer_ids"))
        if captured_a != captured_b:  # what the draft is fed (each server's numbering)
            changes.append(Change("aux_layers_captured", captured_a, captured_b))
        if fa.get("aux_source") != fb.get("aux_source"):
            changes.append(Change("aux_source", fa.get("aux_source"), fb.get("aux_source")))
        for role in ("draft", "target"):
            sa, sb = _side(fa, role), _side(fb, role)
            for key in ("path", "revision"):
                if sa.get(key) != sb.get(key):
                    changes.append(Change(f"{role}.{key}", sa.get(key), sb.get(key)))
            changes += _mapping_changes(f"{role}.config.", _fields(sa), _fields(sb))
            if sa.get("config_sha256") != sb.get("config_sha256") and not (
                _mapping_changes("", _fields(sa), _fields(sb))
            ):
                # the bytes differ, no field does (formatting, or past the kept fields)
                changes.append(
                    Change(
                        f"{role}.config_sha256", sa.get("config_sha256"), sb.get("config_sha256")
                    )
                )
        if fa.get("chat_template_sha256") != fb.get("chat_template_sha256"):
            changes.append(
                Change(
                    "chat_template_sha256",
                    fa.get("chat_template_sha256"),
                    fb.get("chat_template_sha256"),
                )
            )
    if a.sampling is not None and b.sampling is not None:
        changes += _mapping_changes("sampling.", a.sampling, b.sampling)
    if a.server_version and b.server_version and a.server_version != b.server_version:
        changes.append(Change("server_version", a.server_version, b.server_version))
    words_a, flags_a = split_argv(a.argv)
    words_b, flags_b = split_argv(b.argv)
    if words_a != words_b:
        changes.append(Change("command", " ".join(words_a), " ".join(words_b)))
    changes += _mapping_changes("flag --", flags_a, flags_b)
    changes += _mapping_changes("env ", a.env, b.env)
    return changes


def unknown_parts(a: RunFacts, b: RunFacts) -> list[str]:
    """What could not be compared, one phrase each (a record that lacks it)."""
    missing: list[str] = []
    for label, present in (
        ("draft and target configs", bool(a.fingerprint and b.fingerprint)),
        (
            "sampling (no benchmark of both runs in the ledger)",
            a.sampling is not None and b.sampling is not None,
        ),
        ("server version", bool(a.server_version and b.server_version)),
    ):
        if not present:
            missing.append(label)
    return missing


def _is_aux_field(change: Change) -> bool:
    return change.field.startswith("draft.config.") and any(
        word in change.field for word in AUX_FIELD_WORDS
    )


def _aux_message(changes: Sequence[Change]) -> str:
    named = next((c for c in changes if c.field == "aux_layer_ids"), None)
    if named is None:  # the same ids, read otherwise (SGLang: a checkpoint's are shifted)
        named = next(c for c in changes if c.field == "aux_layers_captured")
    raw = [c for c in changes if _is_aux_field(c)]
    where = raw[0].field.removeprefix("draft.config.") if raw else "the server's default"
    source = next((c for c in changes if c.field == "aux_source"), None)
    tail = f", {source.before} -> {source.after}" if source is not None else ""
    return (
        f"auxiliary layers {shown_value(named.before)} -> {shown_value(named.after)} "
        f"({where}{tail}): the draft is fed other target layers than before"
    )


def _prefixed(*prefixes: str) -> Callable[[Change], bool]:
    return lambda change: change.field.startswith(prefixes)


def _named(*names: str) -> Callable[[Change], bool]:
    return lambda change: change.field in names


# (code, which changes it takes, the message's lead), most likely cause of a collapse first;
# the auxiliary layers come before these, when the layers in effect changed.
GROUPS: tuple[tuple[str, Callable[[Change], bool], str], ...] = (
    # the same layers in effect: a moved or added key is a change of the draft's config
    (
        "draft_changed",
        lambda c: c.field.startswith("draft.") or c.field in ("aux_source", "aux_layer_ids"),
        "the draft checkpoint changed",
    ),
    ("target_changed", _prefixed("target."), "the target checkpoint changed"),
    (
        "chat_template_changed",
        _named("chat_template_sha256"),
        "the chat template changed: prompts are tokenized otherwise",
    ),
    ("sampling_changed", _prefixed("sampling."), "the benchmark's sampling changed"),
    ("server_changed", _named("server_version", "backend", "command"), "the server changed"),
    (
        "flags_changed",
        lambda c: c.field.startswith("flag ") and c.field not in ADDRESS_FLAGS,
        "launch flags changed",
    ),
    ("env_changed", _prefixed("env "), "the environment changed"),
    # last: where a server listens never changes what it computes (an "auto" port differs
    # at every launch)
    ("address_changed", _named(*ADDRESS_FLAGS), "where it listens changed (not a cause)"),
)


def diagnose(changes: Iterable[Change]) -> list[Diagnosis]:
    """The likely causes, most likely first, each with the changes behind it; one
    ``no_recorded_change`` when the records show none (then load, prompts, the hardware or
    something not recorded changed)."""
    left = list(changes)
    out: list[Diagnosis] = []
    if any(c.field == "aux_layers_captured" for c in left):
        aux = ("aux_layer_ids", "aux_source", "aux_layers_captured")
        mine = [c for c in left if c.field in aux or _is_aux_field(c)]
        left = [c for c in left if c not in mine]
        out.append(Diagnosis("aux_layers_changed", _aux_message(mine), tuple(mine)))
    for code, picks, lead in GROUPS:
        mine = [c for c in left if picks(c)]
        if not mine:
            continue
        left = [c for c in left if not picks(c)]
        shown = "; ".join(c.text() for c in mine[:3])
        more = f"; and {len(mine) - 3} more" if len(mine) > 3 else ""
        out.append(Diagnosis(code, f"{lead}: {shown}{more}", tuple(mine)))
    if left:
        out.append(Diagnosis("other_changed", "; ".join(c.text() for c in left[:3]), tuple(left)))
    if not out:
        out.append(
            Diagnosis(
                "no_recorded_change",
                "nothing the records keep changed (flags, environment, configs, server): "
                "look at the load, the prompts and the hardware",
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class DiffReport:
    """Two runs' differences as ``specmon diff`` and the console's history show them: one
    formatter for both (``lines``), and the JSON (``to_dict``)."""

    a: RunFacts
    b: RunFacts
    changes: tuple[Change, ...]
    diagnoses: tuple[Diagnosis, ...]
    not_compared: tuple[str, ...]

    @classmethod
    def of(cls, a: RunFacts, b: RunFacts) -> DiffReport:
        changes = tuple(diff_runs(a, b))
        return cls(a, b, changes, tuple(diagnose(changes)), tuple(unknown_parts(a, b)))

    def lines(self) -> list[str]:
        """Each likely cause (its code and message) with its differences under it, then what
        could not be compared. Raw record text: the caller passes it through safe_text."""
        out = [f"{_run_label(self.a)} -> {_run_label(self.b)}: {_count(len(self.changes))}"]
        for diagnosis in self.diagnoses:
            out.append(f"  {diagnosis.code}: {diagnosis.message}")
            for change in diagnosis.changed:
                out.append(
                    f"      {change.field}: {shown_value(change.before)} -> "
                    f"{shown_value(change.after)}"
                )
        if self.not_compared:
            out.append("  not compared: " + "; ".join(self.not_compared))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [self.a.run_id, self.b.run_id],
            "changes": [c.to_dict() for c in self.changes],
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "not_compared": list(self.not_compared),
        }


def _run_label(facts: RunFacts) -> str:
    profile = f" ({facts.profile})" if facts.profile else ""
    return f"run {facts.run_id}{profile}"


def _count(n: int) -> str:
    return "no recorded difference" if n == 0 else f"{n} difference{'s' if n != 1 else ''}"


def find_run(runs: Sequence[RunStatus], wanted: str) -> RunStatus:
    """The run named by its id, a unique prefix of it, ``latest`` or ``latest~N`` (N runs
    before the latest; ``runs`` in start order); UsageError naming the candidates."""
    from specmon.model.errors import UsageError
    from specmon.model.terminal_text import safe_text

    def named(candidates: Sequence[RunStatus]) -> str:
        return ", ".join(safe_text(r.run_id) for r in candidates) or "none"

    if wanted == "latest" or wanted.startswith("latest~"):
        back = wanted.removeprefix("latest").removeprefix("~") or "0"
        if not back.isdigit() or int(back) >= len(runs):
            raise UsageError(f"{wanted!r}: the host has {len(runs)} runs")
        return runs[-1 - int(back)]
    exact = [r for r in runs if r.run_id == wanted]
    if exact:
        return exact[0]
    matches = [r for r in runs if wanted and r.run_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UsageError(f"no run {wanted!r} on this host (the latest: {named(runs[-5:])})")
    raise UsageError(f"run {wanted!r} is ambiguous: {named(matches[:6])}")
