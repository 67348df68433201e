"""Reading a running server's command line back into a profile's keys (``specmon adopt``): the
inverse of ``LaunchRules.profile_args``, shared by the backends.

A flag becomes a profile key only when the profile renders it back as the same setting with
the same value text: given once (no other spelling of the same setting), with a value that
reads back unchanged (``8`` for tp, not ``08``; ``0.88``, not ``.880``). Every other token
stays in ``extra_args``, in its own order, so the adopted profile launches what was running.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specmon.backends.flag_grammar import parse_flags


def as_text(value: str) -> str | None:
    """A path or name: any non-empty text."""
    return value if value else None


def as_int(value: str) -> int | None:
    """A whole number written as the profile writes it back (no sign, no leading zero)."""
    return int(value) if value.isdigit() and str(int(value)) == value else None


def as_float(value: str) -> float | None:
    """A number written as the profile writes it back (``repr`` of the float)."""
    try:
        number = float(value)
    except ValueError:
        return None
    return number if repr(number) == value else None


@dataclass(frozen=True, slots=True)
class Field:
    """A flag that stands for a profile key: the key's path (``("speculative",
    "num_steps")``) and how its value text reads back."""

    key: tuple[str, ...]
    read: Callable[[str], object | None]


def split_words(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the command words, the flags after them): the command ends at the first ``--`` word."""
    words = list(argv)
    first = next((i for i, word in enumerate(words) if word.startswith("--")), len(words))
    return words[:first], words[first:]


def take_flags(
    tail: Sequence[str],
    fields: Mapping[str, Field],
    setting_of: Callable[[str], str],
) -> tuple[dict[tuple[str, ...], object], list[str]]:
    """({key path: value} of the flags of ``tail`` that ``fields`` maps, the remaining tokens in
    order). ``setting_of`` names the setting a flag spelling stands for (an alias or an
    argparse prefix reads as the same setting): a setting given more than once is left alone,
    since moving one of its spellings could change which one the server keeps."""
    items, _ = parse_flags(tail)
    given: dict[str, int] = {}
    for item in items:
        setting = setting_of(item.name)
        given[setting] = given.get(setting, 0) + 1
    taken: dict[tuple[str, ...], object] = {}
    consumed: set[int] = set()
    for item in items:
        field = fields.get(item.name)
        if field is None or item.value is None or given[setting_of(item.name)] != 1:
            continue
        value = field.read(item.value)
        if value is None:
            continue
        taken[field.key] = value
        consumed.add(item.index)
        if not tail[item.index].startswith(f"--{item.name}="):
            consumed.add(item.index + 1)
    rest = [word for index, word in enumerate(tail) if index not in consumed]
    return taken, rest


def nest(flat: Mapping[tuple[str, ...], object]) -> dict[str, object]:
    """Key paths as nested tables: ``{("speculative", "num_steps"): 3}`` ->
    ``{"speculative": {"num_steps": 3}}``."""
    out: dict[str, object] = {}
    for path, value in flat.items():
        table = out
        for part in path[:-1]:
            table = table.setdefault(part, {})  # type: ignore[assignment]
        table[path[-1]] = value
    return out
