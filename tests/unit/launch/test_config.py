"""specmon.toml: the shipped example loads and validates, every mistake is reported with
file, line and key, the search order holds, and saved profiles read back unchanged."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import REPO

from specmon.backends import DEFAULT_BACKEND
from specmon.launch.config import (
    BUILTIN_CONFIG_TOML,
    Profile,
    SpeculativeSettings,
    find_config_path,
    load_config,
    parse_config_text,
    render_profile_toml,
    save_profile,
)
from specmon.model.errors import ConfigError, UsageError

SHIPPED = REPO / "specmon.toml"
NO_USER_DIR = {"SPECMON_CONFIG_DIR": "/nonexistent/specmon-test-config"}


def write(tmp_path: Path, text: str, name: str = "specmon.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


GOOD_PROFILE = """
[profiles.p]
model_path = "/models/target"
draft_model_path = "/models/draft"
tp = 8

[profiles.p.speculative]
algorithm = "EAGLE3"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""


# --- the shipped example ------------------------------------------------------------------------


def test_shipped_config_loads_and_every_profile_validates():
    config = load_config(SHIPPED, environ=NO_USER_DIR)
    assert config.source == SHIPPED
    assert {"kimi-eagle3", "kimi-baseline", "kimi-eagle3-nccl", "demo"} <= set(config.profiles)
    assert {"local", "gpu-box"} <= set(config.hosts)
    for profile in config.profiles.values():
        profile.to_launch_spec().validate()
    assert config.hosts["local"].transport == "local"
    assert config.hosts["gpu-box"].label == "root@10.0.0.12:22"
    assert config.default_host == "local" and config.default_profile == "demo"


def test_kimi_eagle3_is_the_command_from_the_operators_account():
    spec = load_config(SHIPPED, environ=NO_USER_DIR).profiles["kimi-eagle3"].to_launch_spec()
    assert spec.command == ("python3", "-m", "sglang.launch_server")
    assert spec.key_flags() == {
        "algorithm": "EAGLE3",
        "steps": "3",
        "topk": "1",
        "draft_tokens": "4",
        "tp": "8",
        "mem_fraction": "0.88",
    }
    assert spec.flag("port") == "8000"
    assert spec.env_dict() == {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}


def test_baseline_and_nccl_profiles():
    config = load_config(SHIPPED, environ=NO_USER_DIR)
    baseline = config.profiles["kimi-baseline"].to_launch_spec()
    assert baseline.has_flag("disable-custom-all-reduce")
    assert not any(token.startswith("--speculative") for token in baseline.args)
    assert config.profiles["kimi-eagle3"].baseline_profile == "kimi-baseline"
    nccl = config.profiles["kimi-eagle3-nccl"].to_launch_spec()
    assert nccl.env_dict() == {
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        "NCCL_PROTO": "LL",
        "NCCL_ALGO": "Ring",
        "NCCL_P2P_LEVEL": "SYS",
    }
    assert nccl.args == config.profiles["kimi-eagle3"].to_launch_spec().args


def test_demo_profile_runs_the_simulator_and_matches_the_built_in_one():
    shipped = load_config(SHIPPED, environ=NO_USER_DIR).profiles["demo"]
    builtin = parse_config_text(BUILTIN_CONFIG_TOML, None).profiles["demo"]
    assert shipped == builtin
    spec = shipped.to_launch_spec(python="/venv/bin/python")
    assert spec.command == ("/venv/bin/python", "-m", "specmon.sim")
    assert spec.key_flags()["tp"] == "8" and spec.flag("port") == "auto"
    assert spec.has_flag("enable-metrics") and shipped.probe and shipped.gpu_agent == "sim"
    assert spec.env_dict()["SPECMON_SIM_SHARDS"] == "64"
    assert spec.env_dict()["SPECMON_SIM_GPUS"] == "8"


def test_time_scale_from_the_environment_overrides_simulator_profiles_only():
    config = load_config(SHIPPED, environ={**NO_USER_DIR, "SPECMON_SIM_TIME_SCALE": "0.5"})
    assert config.profiles["demo"].env["SPECMON_SIM_TIME_SCALE"] == "0.5"
    assert "SPECMON_SIM_TIME_SCALE" not in config.profiles["kimi-eagle3"].env
    with pytest.raises(ConfigError, match="SPECMON_SIM_TIME_SCALE: 'fast' is not a positive"):
        load_config(SHIPPED, environ={**NO_USER_DIR, "SPECMON_SIM_TIME_SCALE": "fast"})


# --- finding the file ---------------------------------------------------------------------------


def test_search_order_explicit_then_working_dir_then_user_config_dir(tmp_path):
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    user_file = write(user_dir, GOOD_PROFILE)
    environ = {"SPECMON_CONFIG_DIR": str(user_dir)}
    assert find_config_path(cwd=work, environ=environ) == user_file
    local_file = write(work, GOOD_PROFILE)
    assert find_config_path(cwd=work, environ=environ) == local_file
    explicit = write(tmp_path, GOOD_PROFILE, "other.toml")
    assert find_config_path(explicit, cwd=work, environ=environ) == explicit
    assert load_config(explicit, cwd=work, environ=environ).source == explicit


def test_user_config_dir_follows_xdg_config_home(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECMON_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "specmon").mkdir(parents=True)
    user_file = write(tmp_path / "xdg" / "specmon", GOOD_PROFILE)
    assert find_config_path(cwd=tmp_path) == user_file


def test_without_any_file_the_built_in_demo_host_and_profile_apply(tmp_path):
    config = load_config(cwd=tmp_path, environ=NO_USER_DIR)
    assert config.source is None
    assert set(config.profiles) == {"demo", "demo-vllm"} and set(config.hosts) == {"local"}
    assert config.hosts["local"].python == sys.executable


def test_a_file_keeps_the_built_in_demo_unless_it_defines_its_own(tmp_path):
    config = load_config(write(tmp_path, GOOD_PROFILE), environ=NO_USER_DIR)
    assert list(config.profiles) == ["p", "demo", "demo-vllm"]


def test_missing_explicit_config_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.toml: config file does not exist"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)
    assert issubclass(ConfigError, UsageError) and ConfigError("x").exit_code == 2


def test_config_that_is_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "specmon.toml"
    path.write_bytes(b"[ui]\ntheme = '\xff'\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


# --- every mistake names file, line and key --------------------------------------------------------

BAD_CONFIGS = [
    ("syntax", "[ui]\ntheme = \n", None, 2, "TOML syntax error"),
    (
        "unknown key with hint",
        GOOD_PROFILE.replace("num_steps", "num_step"),
        "profiles.p.speculative.num_step",
        8,
        "did you mean 'num_steps'?",
    ),
    ("unknown top key", "[uii]\ntheme = 'dark'\n", "uii", 1, "did you mean 'ui'?"),
    ("wrong type", GOOD_PROFILE.replace("tp = 8", 'tp = "8"'), "profiles.p.tp", 4, "expected an integer"),
    ("bool is not int", GOOD_PROFILE.replace("tp = 8", "tp = true"), "profiles.p.tp", 4, "got a boolean"),
    ("missing required", GOOD_PROFILE.replace('model_path = "/models/target"\n', ""), "profiles.p.model_path", 1, "missing required key"),
    ("bad enum", "[hosts.h]\ntransport = 'sssh'\n", "hosts.h.transport", 2, "did you mean 'ssh'?"),
    ("bad host port", "[hosts.h]\naddress = '10.0.0.1'\nport = 70000\n", "hosts.h.port", 3, "out of range"),
    ("bad host port type", "[hosts.h]\nport = '22'\n", "hosts.h.port", 2, "expected an integer"),
    ("bad address", "[hosts.h]\naddress = '-oProxyCommand=x'\n", "hosts.h.address", 2, "not a host name"),
    ("bad algorithm", GOOD_PROFILE.replace('"EAGLE3"', '"EAGLE4"'), "profiles.p.speculative.algorithm", 7, "is not one of EAGLE, EAGLE3"),
    (
        "topk rule",
        GOOD_PROFILE.replace("num_draft_tokens = 4", "num_draft_tokens = 6"),
        "profiles.p.speculative.num_draft_tokens",
        10,
        "must be --speculative-num-steps + 1 = 4",
    ),
    ("forbidden env", GOOD_PROFILE + "\n[profiles.p.env]\nLD_PRELOAD = '/x.so'\n", "profiles.p.env.LD_PRELOAD", 13, "may not be set"),
    ("bad NCCL value", GOOD_PROFILE + "\n[profiles.p.env]\nNCCL_PROTO = 'LL,Fast'\n", "profiles.p.env.NCCL_PROTO", 13, "'Fast' is not a protocol"),
    ("env not string", GOOD_PROFILE + "\n[profiles.p.env]\nNCCL_MAX_NCHANNELS = 4\n", "profiles.p.env.NCCL_MAX_NCHANNELS", 13, "expected a string"),
    ("bad extra arg", GOOD_PROFILE.replace("tp = 8", "tp = 8\nextra_args = ['-x']"), "profiles.p.extra_args", 5, "not a flag"),
    ("mem fraction", GOOD_PROFILE.replace("tp = 8", "mem_fraction_static = 1.5"), "profiles.p.mem_fraction_static", 4, "out of range (0.0, 1.0]"),
    ("bad ui rate", "[ui]\ngpu_sample_hz = 0\n", "ui.gpu_sample_hz", 2, "out of range"),
    ("bad name", "[profiles.'a b']\nmodel_path = 'm'\n", "profiles.a b", 1, "letters, digits"),
    ("unknown baseline", GOOD_PROFILE.replace("tp = 8", "baseline_profile = 'pp'"), "profiles.p.baseline_profile", 4, "did you mean 'p'?"),
    ("extends loop", "[profiles.a]\nextends = 'b'\nmodel_path = 'm'\n[profiles.b]\nextends = 'a'\n", "profiles.b.extends", 5, "loop: a -> b -> a"),
    ("dotted key line", "[profiles.p]\nmodel_path = 'm'\nspeculative.algorithm = 'X'\n", "profiles.p.speculative.algorithm", 3, "not one of"),
    ("nul in value", "[profiles.p]\nmodel_path = \"m\\u0000\"\n", "profiles.p.model_path", None, "NUL"),
    ("multi-line string", '[profiles.p]\ndescription = """\ntp = "x"\n"""\nmodel_path = "m"\ntp = "8"\n', "profiles.p.tp", 6, "expected an integer"),
    ("default profile", 'default_profile = "kimi"\n', "default_profile", 1, "no profile named 'kimi'"),
    ("bad attach", "[hosts.h]\nattach = 'first'\n", "hosts.h.attach", 2, "not an attach target"),
    ("bad attach pid", "[hosts.h]\nattach = 0\n", "hosts.h.attach", 2, "not a process id"),
    ("bad attach unit", "[hosts.h]\nattach = 'unit:-x'\n", "hosts.h.attach", 2, "not a unit name"),
    ("attach bool", "[hosts.h]\nattach = true\n", "hosts.h.attach", 2, "not an attach target"),
    ("nan redraw", "[ui]\nredraw_hz = nan\n", "ui.redraw_hz", 2, "not a finite number"),
    ("inf http poll", "[ui]\nhttp_poll_s = inf\n", "ui.http_poll_s", 2, "not a finite number"),
    ("nan stop grace", GOOD_PROFILE.replace("tp = 8", "stop_grace_s = nan"), "profiles.p.stop_grace_s", 4, "not a finite number"),
    ("-inf mem fraction", GOOD_PROFILE.replace("tp = 8", "mem_fraction_static = -inf"), "profiles.p.mem_fraction_static", 4, "not a finite number"),
    ("bad take_over", GOOD_PROFILE.replace("tp = 8", "take_over = 'dockr'"), "profiles.p.take_over", 4, "did you mean 'docker'?"),
    ("take_over type", GOOD_PROFILE.replace("tp = 8", "take_over = true"), "profiles.p.take_over", 4, "expected a string"),
    ("profile attach", GOOD_PROFILE.replace("tp = 8", "attach = 'first'"), "profiles.p.attach", 4, "'first' is not an attach target (expected \"auto\", a pid"),
    ("profile attach pid", GOOD_PROFILE.replace("tp = 8", "attach = -3"), "profiles.p.attach", 4, "not an attach target"),
    ("profile attach zero", GOOD_PROFILE.replace("tp = 8", "attach = 'pid:0'"), "profiles.p.attach", 4, "not a process id"),
    ("profile attach name", GOOD_PROFILE.replace("tp = 8", "attach = 'container:-rm'"), "profiles.p.attach", 4, "not a container name"),
    ("profile attach list", GOOD_PROFILE.replace("tp = 8", "attach = [4242]"), "profiles.p.attach", 4, "expected \"auto\", a pid"),
    (
        "profile attach with nodes",
        "[profiles.n]\nmodel_path = 'm'\nnodes = ['a', 'b']\nattach = 'auto'\n",
        "profiles.n.attach",
        4,
        "a profile with nodes cannot attach: attaching follows one server on one host",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "line", "fragment"),
    [case[1:] for case in BAD_CONFIGS],
    ids=[case[0] for case in BAD_CONFIGS],
)
def test_every_mistake_names_file_line_and_key(tmp_path, text, key, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_USER_DIR)
    error = caught.value
    assert error.path == str(path)
    assert error.key == key
    if line is not None:
        assert error.line == line
        assert str(error).startswith(f"{path}:{line}: ")
    assert fragment in str(error)
    assert "\n" not in str(error)  # one line, fit for the terminal


def test_string_values_in_ssh_options_and_scalars_become_text(tmp_path):
    path = write(
        tmp_path, "[hosts.h]\nssh_options = { Compression = true, ServerAliveInterval = 30 }\n"
    )
    host = load_config(path, environ=NO_USER_DIR).hosts["h"]
    assert host.ssh_options == {"Compression": "yes", "ServerAliveInterval": "30"}
    assert host.address == "h" and host.python == "python3"


def test_unknown_host_or_profile_lookup_hints_at_the_nearest_name():
    config = load_config(SHIPPED, environ=NO_USER_DIR)
    with pytest.raises(ConfigError, match="did you mean 'kimi-eagle3'"):
        config.profile("kimi-eagl3")
    with pytest.raises(ConfigError, match="did you mean 'gpu-box'"):
        config.host("gpu-bx")


# --- saving a profile ------------------------------------------------------------------------------


def test_save_profile_appends_and_keeps_the_file_intact(tmp_path):
    path = tmp_path / "specmon.toml"
    original = SHIPPED.read_text(encoding="utf-8")
    path.write_text(original, encoding="utf-8")
    config = load_config(path, environ=NO_USER_DIR)
    base = config.profiles["kimi-eagle3"]
    edited = dataclasses.replace(
        base,
        name="kimi-eagle3-steps5",
        speculative=SpeculativeSettings("EAGLE3", 5, 1, 6),
        env={**base.env, "NCCL_PROTO": "LL"},
        description="5 steps, saved from the console",
    )
    save_profile(path, edited)
    text = path.read_text(encoding="utf-8")
    assert text.startswith(original)
    assert load_config(path, environ=NO_USER_DIR).profiles["kimi-eagle3-steps5"] == edited
    with pytest.raises(ConfigError, match="already exists") as caught:
        save_profile(path, edited)
    assert caught.value.line is not None
    assert path.read_text(encoding="utf-8") == text


def test_save_profile_refuses_a_profile_that_would_not_load(tmp_path):
    path = write(tmp_path, GOOD_PROFILE)
    before = path.read_text(encoding="utf-8")
    broken = Profile(
        name="q",
        model_path="/m",
        draft_model_path="/d",
        speculative=SpeculativeSettings("EAGLE3", 3, 1, 9),
    )
    with pytest.raises(ConfigError, match="num_draft_tokens"):
        save_profile(path, broken)
    assert path.read_text(encoding="utf-8") == before


def test_save_profile_creates_a_missing_file(tmp_path):
    path = tmp_path / "new.toml"
    profile = Profile(name="plain", model_path="/m", tp=2, extra_args=("--enable-metrics",))
    save_profile(path, profile)
    assert load_config(path, environ=NO_USER_DIR).profiles["plain"] == profile


text_values = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20
)


@settings(max_examples=100, deadline=None)
@given(
    model_path=text_values,
    description=text_values,
    extra_value=text_values,
    env_value=text_values,
)
def test_saved_profiles_read_back_unchanged_whatever_their_text(
    tmp_path_factory, model_path, description, extra_value, env_value
):
    path = tmp_path_factory.mktemp("save") / "specmon.toml"
    path.write_text('[ui]\ntheme = "light"\n', encoding="utf-8")
    profile = Profile(
        name="odd",
        model_path=model_path or "m",
        description=description,
        extra_args=("--served-model-name", extra_value) if not extra_value.startswith("-") else (),
        env={"SPECMON_SIM_FAULT": env_value},
    )
    save_profile(path, profile)
    assert load_config(path, environ=NO_USER_DIR).profiles["odd"] == profile


# --- staying cheap to import ----------------------------------------------------------------------


def test_importing_config_loads_no_heavy_modules():
    code = (
        "import sys, specmon.launch.config; "
        "heavy = [m for m in ('tomllib', 'tomli', 'platformdirs', 'difflib', 'specmon.launch.spec', "
        "'specmon.backends', 'textual') if m in sys.modules]; print(heavy)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.stdout.strip() == "[]", result.stderr


def test_the_simulator_accepts_every_shipped_profile_launch():
    from specmon.backends.sglang.sim.args import parse_launch
    from specmon.remote.helper import _with_port

    config = load_config(SHIPPED, environ=NO_USER_DIR)
    for profile in config.profiles.values():
        if profile.backend != DEFAULT_BACKEND:
            continue  # the vLLM profiles: the next test
        spec = profile.to_launch_spec()
        # as the host's helper launches it: a port = "auto" made a free port's number
        parse_launch(_with_port(list(spec.args), 30001), spec.env_dict())


def test_the_vllm_simulator_accepts_every_shipped_vllm_profile_launch():
    """The simulator's vLLM personality parses each vLLM profile's `serve MODEL flags` as
    vLLM would. Skipped where the personality (specmon.sim.vllm) is not in this tree."""
    from specmon.remote.helper import _with_port

    serve = pytest.importorskip(
        "specmon.backends.vllm.sim.args", reason="no simulator vLLM personality"
    )
    config = load_config(SHIPPED, environ=NO_USER_DIR)
    vllm_profiles = [p for p in config.profiles.values() if p.backend == "vllm"]
    assert {"demo-vllm", "llama70b-eagle3-vllm"} <= {p.name for p in vllm_profiles}
    for profile in vllm_profiles:
        spec = profile.to_launch_spec()
        argv = list(spec.command[spec.command.index("serve") :] + spec.args)
        serve.parse_serve(_with_port(argv, 30001), spec.env_dict())


scalar_values = st.one_of(
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False),
    text_values,
    st.sampled_from(["EAGLE3", "ssh", "local", "sim", "LL", "/m", "--x", "8"]),
)
toml_values = st.one_of(
    scalar_values,
    st.lists(scalar_values, max_size=3),
    st.dictionaries(
        st.sampled_from(["algorithm", "num_steps", "eagle_topk", "NCCL_PROTO", "PATH", "x"]),
        scalar_values,
        max_size=3,
    ),
)


def toml_literal(value) -> str:
    from specmon.launch.config import _toml_key, _toml_value

    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {toml_literal(v)}" for k, v in value.items()) + " }"
        )
    return _toml_value(value)


@settings(max_examples=300, deadline=None)
@given(
    section=st.sampled_from(["profiles.p", "hosts.h", "ui"]),
    table=st.dictionaries(
        st.sampled_from(
            ["model_path", "command", "tp", "port", "speculative", "env", "extra_args", "probe",
             "gpu_agent", "mem_fraction_static", "extends", "transport", "address", "user",
             "ssh_options", "theme", "gpu_sample_hz", "log_lines", "bogus"]
        ),
        toml_values,
        max_size=6,
    ),
)  # fmt: skip
def test_any_table_of_any_shape_loads_or_gives_a_config_error(section, table):
    text = f"[{section}]\n" + "".join(f"{k} = {toml_literal(v)}\n" for k, v in table.items())
    try:
        config = parse_config_text(text, Path("fuzz.toml"))
    except ConfigError as error:
        assert str(error).startswith("fuzz.toml") and "\n" not in str(error)
    else:
        for profile in config.profiles.values():
            profile.to_launch_spec().validate()


# --- hostile files: one-line errors, never a traceback --------------------------------------


@pytest.mark.parametrize("opening", ["[", "{a = "])
def test_deeply_nested_toml_is_a_one_line_error(tmp_path, opening):
    closing = "]" if opening == "[" else "}"
    path = tmp_path / "specmon.toml"
    path.write_text("x = " + opening * 5000 + "1" + closing * 5000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply") as caught:
        load_config(path, environ=NO_USER_DIR)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "specmon.toml"
    path.write_bytes(b"\xef\xbb\xbf[ui]\nredraw_hz = 5\n")
    assert load_config(path, environ=NO_USER_DIR).ui.redraw_hz == 5.0
    path.write_bytes(b"\xef\xbb\xbf[ui]\nredraw_hz = 0\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=NO_USER_DIR)
    assert str(caught.value).startswith(f"{path}:2: ui.redraw_hz: ")


def test_host_attach_key_is_the_attach_grammar_and_reaches_the_session(tmp_path):
    """`attach` on a host: what `connect HOST` / `watch HOST` follow there (a server
    specmon did not launch); `--attach` on the command line wins over it."""
    from specmon.session import SessionOptions, open_session

    path = write(
        tmp_path,
        "[hosts.a]\nattach = 'auto'\n[hosts.b]\nattach = 4242\n"
        "[hosts.c]\nattach = 'container:vllm-1'\n[hosts.d]\naddress = 'x'\n",
    )
    config = load_config(path, environ=NO_USER_DIR)
    assert [config.hosts[h].attach for h in "abcd"] == ["auto", "4242", "container:vllm-1", None]
    assert open_session("a", config).options.attach == "auto"
    assert open_session("d", config).options.attach is None
    chosen = open_session("a", config, options=SessionOptions(attach="77"))
    assert chosen.options.attach == "77"


def test_take_over_is_read_and_written_back(tmp_path):
    """``take_over = "docker" | "systemd"``: a take-over may run that supervisor's stop."""
    path = write(tmp_path, GOOD_PROFILE.replace("tp = 8", 'tp = 8\ntake_over = "systemd"'))
    profile = load_config(path, environ=NO_USER_DIR).profile("p")
    assert profile.take_over == "systemd"
    assert 'take_over = "systemd"' in render_profile_toml(profile)
    plain = load_config(write(tmp_path, GOOD_PROFILE, "b.toml"), environ=NO_USER_DIR)
    assert plain.profile("p").take_over is None


def test_profile_attach_key_is_the_attach_grammar_and_is_written_back(tmp_path):
    """`attach` on a profile: the server it describes is usually running already, started
    outside specmon (`connect HOST -p P` follows it); the same grammar as the host's key."""
    path = write(
        tmp_path,
        "[profiles.a]\nmodel_path = 'm'\nattach = 'auto'\n"
        "[profiles.b]\nmodel_path = 'm'\nattach = 4242\n"
        "[profiles.c]\nmodel_path = 'm'\nattach = ' pid:77 '\n"
        "[profiles.d]\nmodel_path = 'm'\nattach = 'unit:vllm.service'\n"
        "[profiles.e]\nmodel_path = 'm'\nattach = 'container:llm-1'\n"
        "[profiles.f]\nextends = 'b'\n"
        "[profiles.g]\nmodel_path = 'm'\n",
    )
    config = load_config(path, environ=NO_USER_DIR)
    attached = [config.profile(name).attach for name in "abcdefg"]
    assert attached == ["auto", "4242", "77", "unit:vllm.service", "container:llm-1", "4242", None]
    for name in "abde":
        profile = config.profile(name)
        saved = tmp_path / f"saved-{name}.toml"
        save_profile(saved, profile)
        assert load_config(saved, environ=NO_USER_DIR).profile(name) == profile
    assert "attach" not in render_profile_toml(config.profile("g"))


def test_save_as_profile_keeps_only_the_secrets_the_source_profile_held_in_clear(tmp_path):
    """A secret the user wrote into the file stays as written in the copy; one from anywhere
    else (the running server, the form) is saved as the placeholder, listed by name."""
    from specmon.launch.config import secrets_as_placeholders

    path = tmp_path / "specmon.toml"
    path.write_text(SHIPPED.read_text(encoding="utf-8"), encoding="utf-8")
    base = load_config(path, environ=NO_USER_DIR).profiles["kimi-eagle3"]
    source = dataclasses.replace(
        base, env={**base.env, "HF_TOKEN": "hf_in_file"}, extra_args=("--api-key", "k-in-file")
    )
    same, masked = secrets_as_placeholders(dataclasses.replace(source, name="copy"), source)
    assert masked == [] and same.env["HF_TOKEN"] == "hf_in_file"
    changed = dataclasses.replace(
        source,
        name="copy2",
        env={**source.env, "HF_TOKEN": "hf_from_server", "HF_API_KEY": "w1", "NCCL_PROTO": "LL"},
        extra_args=("--api-key", "k-in-file", "--admin-api-key=t-typed"),
    )
    placed, masked = secrets_as_placeholders(changed, source)
    assert masked == ["HF_TOKEN", "HF_API_KEY", "--admin-api-key"]
    assert placed.env["HF_TOKEN"] == placed.env["HF_API_KEY"] == "***"
    assert placed.env["NCCL_PROTO"] == "LL"
    assert placed.extra_args == ("--api-key", "k-in-file", "--admin-api-key=***")
    saved = save_profile(path, placed)
    text = path.read_text(encoding="utf-8")
    assert "hf_from_server" not in text and "t-typed" not in text and "w1" not in text
    assert "# fill in the secret (a flag's value is ***)" in text
    assert [key for key, _path, _line in saved.unfilled] == [
        "profiles.copy2.env.HF_TOKEN",
        "profiles.copy2.env.HF_API_KEY",
        "profiles.copy2.extra_args",
    ]
