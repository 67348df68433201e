"""`specmon adopt`'s writing half: the profile rendered with tomlkit, put into the config file
with every other byte kept, checked by the config parser before the file changes, written
atomically with the file's mode; secrets as "***" placeholders refused at launch."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specmon.backends import get_backend
from specmon.launch.adopt import (
    Target,
    adopted_table,
    config_target,
    insert_profile,
    prepare,
    render_fragment,
    write_config,
)
from specmon.launch.config import load_config, parse_config_text
from specmon.model.errors import ConfigError

ARGV = [
    "/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m/Kimi-K2.5",
    "--tp", "8", "--port", "30000", "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/d", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--api-key", "***", "--enable-metrics",
]  # fmt: skip
ENV = {"NCCL_PROTO": "LL", "HF_TOKEN": "***", "SGLANG_X": "1"}

EXISTING = """\
# My specmon config: hand-written, comments matter.
default_host = "gpu"   # the usual one

[hosts.gpu]
address = "gpu-box"  # via ~/.ssh/config

# The production profile
[profiles.prod]
model_path = "/m/prod"
tp = 8 # eight GPUs
extra_args = [
    "--trust-remote-code",  # needed by Kimi
]

[profiles.prod.env]
NCCL_PROTO = "Simple"

# before the ui table
[ui]
theme = "light"
"""


def table(env: dict[str, str] | None = None) -> dict:
    return adopted_table(
        get_backend("sglang"), ARGV, ENV if env is None else env, description="adopted"
    )


def target_file(tmp_path: Path, text: str | None = EXISTING) -> Target:
    path = tmp_path / "specmon.toml"
    if text is None:
        return Target(path, False)
    path.write_text(text)
    return Target(path, True)


def test_fragment_holds_the_placeholders_and_reads_back() -> None:
    fragment = render_fragment("adopted", table())
    assert fragment.startswith("[profiles.adopted]\n")
    assert 'HF_TOKEN = "***" # fill in the secret' in fragment
    assert "[profiles.adopted.speculative]" in fragment and "[profiles.adopted.env]" in fragment
    profile = parse_config_text(fragment, None).profiles["adopted"]
    assert profile.env == ENV and profile.tp == 8 and profile.port == 30000
    assert profile.extra_args == ("--api-key", "***", "--enable-metrics")
    assert [key for key, _, _ in profile.unfilled] == [
        "profiles.adopted.env.HF_TOKEN",
        "profiles.adopted.extra_args",
    ]


def test_a_new_profile_is_appended_every_other_byte_kept(tmp_path: Path) -> None:
    target = target_file(tmp_path)
    prepared = prepare(target, "adopted", table(), replace=False)
    assert prepared.text.startswith(EXISTING)
    assert prepared.text == EXISTING + "\n" + prepared.fragment
    write_config(target, prepared.text, prepared.original)
    config = load_config(target.path)
    assert config.profiles["prod"].extra_args == ("--trust-remote-code",)
    assert config.profiles["adopted"].speculative.num_steps == 3  # type: ignore[union-attr]
    assert config.ui.theme == "light"


def test_an_existing_name_is_refused_in_one_line_unless_replace(tmp_path: Path) -> None:
    target = target_file(tmp_path)
    with pytest.raises(ConfigError) as caught:
        prepare(target, "prod", table(), replace=False)
    message = str(caught.value)
    assert "\n" not in message and "--replace" in message
    assert message.startswith(f"{target.path}:8: profiles.prod: ")
    assert target.path.read_text() == EXISTING

    prepared = prepare(target, "prod", table(), replace=True)
    head, _, _ = EXISTING.partition("[profiles.prod]\n")
    tail = '\n# before the ui table\n[ui]\ntheme = "light"\n'
    assert prepared.text == head + prepared.fragment + tail
    assert "Simple" not in prepared.text and "needed by Kimi" not in prepared.text
    assert prepared.profile.model_path == "/m/Kimi-K2.5"


def test_a_profile_that_does_not_validate_leaves_the_file_untouched(tmp_path: Path) -> None:
    target = target_file(tmp_path)
    before = target.path.stat()
    bad = table() | {"tp": 999}
    with pytest.raises(ConfigError, match=r"profiles\.adopted\.tp: 999 is out of range"):
        prepare(target, "adopted", bad, replace=False)
    assert target.path.read_text() == EXISTING
    assert target.path.stat().st_mtime_ns == before.st_mtime_ns


def test_a_profile_not_written_as_its_own_tables_is_not_replaced() -> None:
    text = '[profiles]\nprod = { model_path = "/m" }\n'
    fragment = render_fragment("prod", table())
    with pytest.raises(ConfigError, match="not written as its own"):
        insert_profile(text, "prod", fragment, replace=True, label="f")


def test_the_placeholder_is_refused_at_launch_until_filled_in(tmp_path: Path) -> None:
    target = target_file(tmp_path)
    prepared = prepare(target, "adopted", table(), replace=False)
    write_config(target, prepared.text, prepared.original)
    config = load_config(target.path)
    with pytest.raises(ConfigError) as caught:
        config.profile("adopted")
    line = next(
        n for n, text in enumerate(prepared.text.splitlines(), 1) if text.startswith("HF_TOKEN")
    )
    assert str(caught.value) == (
        f'{target.path}:{line}: profiles.adopted.env.HF_TOKEN: is the placeholder "***": '
        "fill in the secret before launching this profile"
    )
    filled = prepared.text.replace('HF_TOKEN = "***"', 'HF_TOKEN = "hf_real"')
    target.path.write_text(filled)
    with pytest.raises(ConfigError, match=r"profiles\.adopted\.extra_args: is the placeholder"):
        load_config(target.path).profile("adopted")
    target.path.write_text(filled.replace('"--api-key", "***"', '"--api-key", "k"'))
    spec = load_config(target.path).profile("adopted").to_launch_spec()
    assert spec.env_dict()["HF_TOKEN"] == "hf_real"
    # Any other profile of the file launches as before; "***" under a name that is not a
    # secret's is a value like any other.
    assert load_config(target.path).profile("prod").tp == 8
    plain = parse_config_text(
        '[profiles.p]\nmodel_path = "m"\n[profiles.p.env]\nNCCL_X = "***"\n', None
    )
    assert plain.profile("p").env == {"NCCL_X": "***"}


def test_write_keeps_the_mode_and_refuses_symlinks_and_changed_files(tmp_path: Path) -> None:
    target = target_file(tmp_path)
    os.chmod(target.path, 0o640)
    prepared = prepare(target, "adopted", table(), replace=False)
    write_config(target, prepared.text, prepared.original)
    assert stat.S_IMODE(target.path.stat().st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]

    again = prepare(target, "other", table(), replace=False)
    target.path.write_text(target.path.read_text() + "# edited meanwhile\n")
    with pytest.raises(ConfigError, match="changed while specmon read it"):
        write_config(target, again.text, again.original)

    real = tmp_path / "real.toml"
    real.write_text(EXISTING)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    linked = Target(link, True)
    with pytest.raises(ConfigError, match="is a symlink"):
        write_config(linked, EXISTING + "# x\n", EXISTING.encode())
    assert real.read_text() == EXISTING and link.is_symlink()


def test_no_config_file_creates_the_user_one_0600(tmp_path: Path) -> None:
    environ = {"SPECMON_CONFIG_DIR": str(tmp_path / "xdg" / "specmon")}
    target = config_target(None, cwd=tmp_path, environ=environ)
    assert not target.exists and target.path == tmp_path / "xdg" / "specmon" / "specmon.toml"
    prepared = prepare(target, "adopted", table(), replace=False)
    assert prepared.text == prepared.fragment and prepared.original is None
    write_config(target, prepared.text, prepared.original)
    assert stat.S_IMODE(target.path.stat().st_mode) == 0o600
    assert target.path.read_text() == prepared.fragment


def test_crlf_files_stay_crlf(tmp_path: Path) -> None:
    target = target_file(tmp_path, None)
    target.path.write_bytes(EXISTING.replace("\n", "\r\n").encode())
    target = Target(target.path, True)
    prepared = prepare(target, "adopted", table(), replace=False)
    assert prepared.text.startswith(EXISTING.replace("\n", "\r\n"))
    assert "\n" not in prepared.text.replace("\r\n", "")
