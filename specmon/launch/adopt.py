"""``specmon adopt``: a running server's command line and environment as a profile, written
into the config file in use with every other byte of it kept.

The profile's keys come from the backend (``LaunchRules.profile_from_argv``, the inverse of
``profile_args``); its environment is what the host let through (the names a profile may set,
secrets already ``***``). The TOML is rendered by tomlkit (its quoting and escaping are the
TOML spec's) and checked by the config parser, as any profile is, before the file changes.

Where it goes: a new profile is appended at the end of the file, after a blank line, so the
file's own text is an exact prefix of the result (tomlkit's own insertion puts a new table
after the comments that lead the next one and drops the blank line before it). ``--replace``
cuts the old ``[profiles.NAME]`` and ``[profiles.NAME.*]`` tables (header to last key; the
comments after them stay, they lead what follows) and puts the new ones where the first was.
Either way the result is parsed again and everything but that profile must read as before.
"""

from __future__ import annotations

import itertools
import os
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.launch.config import (
    ConfigError,
    Profile,
    _split_key,
    _TomlPositions,
    find_config,
    parse_config_text,
)
from specmon.model.errors import UsageError
from specmon.model.secrets import MASK, is_secret_env, is_secret_setting
from specmon.model.user_dirs import make_private_dirs, user_config_path

# A profile's own keys in the order the adopted profile writes them (then its tables).
_ORDER = (
    "description",
    "backend",
    "command",
    "model_path",
    "draft_model_path",
    "tp",
    "port",
    "host_bind",
    "mem_fraction_static",
    "extra_args",
)
FILL_IN = "fill in the secret"
NEW_FILE_MODE = 0o600  # it will hold secrets once filled in


def adopted_table(
    backend: Any,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    description: str = "",
) -> dict[str, Any]:
    """The profile's keys: the backend's reading of ``argv``, the ``backend`` that read it,
    ``description`` and ``env`` (its values as given: secrets already ``***``)."""
    keys = backend.profile_from_argv(argv)
    table: dict[str, Any] = {"description": description} if description else {}
    table["backend"] = backend.name
    table.update(keys)
    if not table.get("extra_args"):
        table.pop("extra_args", None)
    if env:
        table["env"] = dict(env)
    return table


def render_fragment(name: str, table: Mapping[str, Any]) -> str:
    """``[profiles.NAME]`` (and its ``.speculative`` and ``.env`` tables) as TOML text; a
    secret left as ``***`` carries the comment "fill in the secret"."""
    import tomlkit

    profile = tomlkit.table()
    for key in _ORDER:
        if key in table:
            value = table[key]
            if isinstance(value, list | tuple):
                array = tomlkit.array()
                array.extend(list(value))
                if key == "extra_args" and len(", ".join(map(repr, value))) > 80:
                    array.multiline(True)
                value = array
            profile.add(key, value)
            if key == "extra_args" and _masked_flag(table[key]):
                profile[key].comment(f"{FILL_IN} (a flag's value is ***)")
    for sub in ("speculative", "env"):
        if table.get(sub):
            inner = tomlkit.table()
            for key, value in table[sub].items():
                inner.add(key, value)
                if sub == "env" and value == MASK and is_secret_env(key):
                    inner[key].comment(FILL_IN)
            profile.add(sub, inner)
    unknown = set(table) - {*_ORDER, "speculative", "env"}
    if unknown:
        raise ValueError(f"not a profile key: {sorted(unknown)[0]}")
    profiles = tomlkit.table(is_super_table=True)
    profiles.add(name, profile)
    document = tomlkit.document()
    document.add("profiles", profiles)
    return tomlkit.dumps(document).lstrip("\n")


def _masked_flag(args: Sequence[str]) -> bool:
    from specmon.backends.flag_grammar import parse_flags

    return any(item.value == MASK and is_secret_setting(item.name) for item in parse_flags(args)[0])


# --- the file ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The config file ``adopt`` writes: the one specmon reads (``--config``, ./specmon.toml,
    the user config dir's), or, when there is none, the user config dir's, created."""

    path: Path
    exists: bool
    in_working_dir: bool = False


def config_target(
    path: str | os.PathLike[str] | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Target:
    found = find_config(path, cwd=cwd, environ=environ)
    if found is not None:
        return Target(found.path, True, found.in_working_dir)
    return Target(user_config_path(environ), False)


def _parse(text: str) -> dict[str, Any]:
    import tomlkit

    return tomlkit.parse(text.removeprefix("\ufeff")).unwrap()


def _without(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    out = dict(data)
    profiles = dict(out.get("profiles") or {})
    profiles.pop(name, None)
    if profiles:
        out["profiles"] = profiles
    else:
        out.pop("profiles", None)
    return out


def _header_blocks(text: str) -> list[tuple[tuple[str, ...], int, int]]:
    """Every table header as (its key, its first line, one past its last key's line), lines
    counted from 0; multi-line strings are skipped as _TomlPositions skips them."""
    lines = text.split("\n")
    headers: list[tuple[tuple[str, ...], int]] = []
    last_content: dict[int, int] = {}
    in_multiline: str | None = None
    for number, line in enumerate(lines):
        if in_multiline is not None:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            if headers:
                last_content[len(headers) - 1] = number
            continue
        stripped = line.strip()
        if stripped.startswith("["):
            inner = stripped[2:] if stripped.startswith("[[") else stripped[1:]
            parsed = _split_key(inner)
            if parsed and parsed[1].lstrip().startswith("]"):
                headers.append((tuple(parsed[0]), number))
                last_content[len(headers) - 1] = number
                continue
        if stripped and not stripped.startswith("#") and headers:
            last_content[len(headers) - 1] = number
            parsed = _split_key(stripped)
            if parsed and parsed[1].startswith("="):
                for opener in ('"""', "'''"):
                    if parsed[1].count(opener) % 2 == 1:
                        in_multiline = opener
    return [(key, start, last_content[i] + 1) for i, (key, start) in enumerate(headers)]


def insert_profile(text: str, name: str, fragment: str, *, replace: bool, label: str) -> str:
    """``text`` with the profile ``fragment`` added (or, with ``replace``, put in place of the
    profile ``name``); every other byte kept. ConfigError for a name taken (without
    ``replace``) or a profile not written as its own tables."""
    newline = "\r\n" if "\r\n" in text else "\n"
    plain = text.replace("\r\n", "\n")
    before = _parse(plain) if plain.strip() else {}
    exists = name in (before.get("profiles") or {})
    if exists and not replace:
        raise ConfigError(
            "a profile of this name already exists; choose another name or pass --replace",
            path=label,
            key=f"profiles.{name}",
            line=_TomlPositions(plain).line_of(["profiles", name]),
        )
    if exists:
        own = [
            (start, end)
            for key, start, end in _header_blocks(plain)
            if key[:2] == ("profiles", name)
        ]
        lines = plain.split("\n")
        cut = {number for start, end in own for number in range(start, end)}
        for (_, end), (start, _) in itertools.pairwise(own):
            if all(not line.strip() for line in lines[end:start]):
                cut.update(range(end, start))  # the blank lines between its own tables
        result_lines: list[str] = []
        for number, line in enumerate(lines):
            if own and number == own[0][0]:
                result_lines.extend(fragment.rstrip("\n").split("\n"))
            if number not in cut:
                result_lines.append(line)
        result = "\n".join(result_lines)
    elif not plain.strip():
        result = plain + fragment
    else:
        separator = "" if plain.endswith("\n\n") else "\n" if plain.endswith("\n") else "\n\n"
        result = plain + separator + fragment
    after = _parse(result)
    wanted = _parse(fragment)["profiles"][name]
    if (after.get("profiles") or {}).get(name) != wanted or _without(after, name) != _without(
        before, name
    ):
        raise ConfigError(
            "is not written as its own [profiles.NAME] tables; edit or remove it by hand",
            path=label,
            key=f"profiles.{name}",
        )
    return result.replace("\n", newline) if newline != "\n" else result


def check_text(text: str, path: Path, name: str) -> Profile:
    """The adopted profile as the config parser reads the whole file with it: any mistake is
    a ConfigError naming its key and line. Its secret placeholders are allowed here (they
    are refused at launch: ``Profile.unfilled``)."""
    config = parse_config_text(text.replace("\r\n", "\n"), path)
    return config.profiles[name]


def write_config(target: Target, text: str, original: bytes | None) -> None:
    """Replace the file with ``text`` atomically (a temporary file beside it, renamed over
    it), keeping its mode (a new file is 0600: it will hold secrets). A symlink is refused,
    so nothing is written elsewhere than the file named; a file changed since it was read is
    refused too. A working-directory file that was trusted stays trusted (the user asked
    specmon to write it); one that was not is not made trusted."""
    path = target.path
    if path.is_symlink():
        raise ConfigError(
            f"is a symlink (to {os.readlink(path)}); adopt writes only a regular file: "
            "pass --config with the file itself",
            path=str(path),
        )
    was_trusted = False
    if target.in_working_dir and original is not None:
        from specmon.launch.trust import trust_state

        was_trusted = trust_state(path, original) == "trusted"
    data = text.encode("utf-8")
    mode = NEW_FILE_MODE
    if original is not None:
        try:
            current = path.read_bytes()
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError as exc:
            raise ConfigError(f"cannot read: {exc.strerror}", path=str(path)) from None
        if current != original:
            raise ConfigError("changed while specmon read it; run adopt again", path=str(path))
    make_private_dirs(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.fchmod(fd, mode)  # past the umask
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"cannot write: {exc.strerror}", path=str(path)) from None
    if was_trusted:
        from specmon.launch.trust import trust

        trust(path, data)


@dataclass(frozen=True)
class Prepared:
    """What ``adopt`` would write: the fragment, the file's whole new text, the file's bytes as
    read (None: a new file) and the profile as the config parser reads it back."""

    fragment: str
    text: str
    original: bytes | None
    profile: Profile


def prepare(target: Target, name: str, table: Mapping[str, Any], *, replace: bool) -> Prepared:
    """Render the profile, put it into the file's text and check the whole; nothing written.
    A ConfigError (the name taken, a mistake in the profile) leaves the file as it was."""
    fragment = render_fragment(name, table)
    text, original = read_target(target)
    combined = insert_profile(text, name, fragment, replace=replace, label=str(target.path))
    return Prepared(fragment, combined, original, check_text(combined, target.path, name))


def read_target(target: Target) -> tuple[str, bytes | None]:
    """(the file's text, its bytes; None when it does not exist yet)."""
    if not target.exists:
        return "", None
    try:
        data = target.path.read_bytes()
        return data.decode("utf-8"), data
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", path=str(target.path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason})", path=str(target.path)) from None


def profile_name_problem(name: str) -> None:
    from specmon.launch.config import NAME_PATTERN

    if not NAME_PATTERN.match(name):
        raise UsageError(
            f"--profile {name!r:.40}: a profile name is letters, digits, '-' and '_' "
            "(starting with a letter or digit, at most 64)"
        )


__all__ = [
    "FILL_IN",
    "Prepared",
    "Target",
    "adopted_table",
    "check_text",
    "config_target",
    "insert_profile",
    "prepare",
    "read_target",
    "render_fragment",
    "write_config",
]
