"""The probe runtime, with no server: what ``injection_files()`` ships, how the runtime finds the
server tables shipped beside it (``specmon_probe_tables.txt``), and ``launch_env()``. The
servers' own tables are tested with their stand-ins in tests/backends/<name>/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.model.errors import UsageError
from specmon.probe import PROBE_FILE_ENV, TABLES_FILE, injection_files, launch_env

# A server table as a backend writes one: it watches a module of its "server" and times a
# cycle with a verify phase through the runtime's Recorder.
DEMO_TABLE = """
def watched_modules(hook):
    def instrument(module):
        rec = hook.recorder()
        original = module.Worker.step

        def verify(result, clock):
            return [1, 2]

        def step(*args, **kwargs):
            def body(*a, **k):
                return rec.run_phase("verify", original, a, k, verify)

            return rec.run_cycle(body, args, kwargs, lambda a, k: (2, 6))

        module.Worker.step = step
        print("demo table instrumented", module.__name__)

    return {"demo_server": instrument}
"""
DEMO_SERVER = """
class Worker:
    def step(self, batch):
        return batch * 2
"""


def probe_folder(tmp_path: Path, files: dict[str, bytes]) -> Path:
    folder = tmp_path / "probe"
    folder.mkdir()
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return folder


def run_server(tmp_path: Path, probe_dir: Path, probe_file: Path) -> subprocess.CompletedProcess:
    server = tmp_path / "server"
    server.mkdir(exist_ok=True)
    (server / "demo_server.py").write_text(DEMO_SERVER)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", PROBE_FILE_ENV)}
    env.update(launch_env(str(probe_dir), str(probe_file), str(server)))
    env["SPECMON_PROBE_CLOCK"] = "perf_counter"
    code = "import demo_server\nprint(demo_server.Worker().step(3))\n"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_injection_files_ship_the_runtime_and_the_tables_named_beside_it():
    files = injection_files({"specmon_probe_demo": "specmon.probe.records"})
    assert set(files) == {
        "sitecustomize.py",
        "specmon_probe_hook.py",
        "specmon_probe_demo.py",
        TABLES_FILE,
    }
    assert files[TABLES_FILE] == b"specmon_probe_demo\n"
    assert files["specmon_probe_demo.py"].startswith(b'"""')  # the module's own source
    assert injection_files({})[TABLES_FILE] == b""


@pytest.mark.parametrize("name", ["specmon_probe_hook", "sitecustomize", "not a module"])
def test_injection_files_refuse_a_table_name_that_is_no_module_of_its_own(name):
    with pytest.raises(ValueError, match="server table"):
        injection_files({name: "specmon.probe.records"})


def test_the_runtime_loads_the_tables_named_in_the_manifest_only(tmp_path):
    files = injection_files({})
    files["specmon_probe_demo.py"] = DEMO_TABLE.encode()
    files["specmon_probe_broken.py"] = b"raise RuntimeError('broken table')\n"
    files["specmon_probe_stray.py"] = b"raise RuntimeError('a stray file was imported')\n"
    files[TABLES_FILE] = b"specmon_probe_broken\nspecmon_probe_demo\n"
    probe_file = tmp_path / "probe.jsonl"
    completed = run_server(tmp_path, probe_folder(tmp_path, files), probe_file)
    assert completed.stdout.splitlines() == ["demo table instrumented demo_server", "6"]
    # one broken table does not stop the next one
    assert "specmon_probe_broken not loaded: broken table" in completed.stderr
    assert "stray" not in completed.stderr
    (record,) = [json.loads(line) for line in probe_file.read_text().splitlines()]
    assert record["batch_size"] == 2 and record["draft_tokens"] == 6
    assert record["accepted_per_request"] == [1, 2] and record["accepted_tokens"] == 3
    assert record["clock"] == "perf_counter"
    assert 0.0 <= record["verify_ms"] <= record["cycle_ms"]


def test_without_a_manifest_the_runtime_loads_no_table_and_says_so(tmp_path):
    files = injection_files({})
    del files[TABLES_FILE]
    files["specmon_probe_demo.py"] = DEMO_TABLE.encode()
    completed = run_server(tmp_path, probe_folder(tmp_path, files), tmp_path / "probe.jsonl")
    assert completed.stdout.splitlines() == ["6"]
    assert "no server table" in completed.stderr
    assert not (tmp_path / "probe.jsonl").exists()


def test_launch_env_prepends_probe_dir_and_keeps_host_path():
    env = launch_env("/run/abc/probe", "/run/abc/probe.jsonl", "/opt/a:/opt/b")
    assert env == {
        "PYTHONPATH": "/run/abc/probe:/opt/a:/opt/b",
        "SPECMON_PROBE_FILE": "/run/abc/probe.jsonl",
    }
    assert launch_env("/p", "/p.jsonl", None)["PYTHONPATH"] == "/p"
    assert launch_env("/p", "/p.jsonl", "/p:/q")["PYTHONPATH"] == "/p:/q"


@pytest.mark.parametrize(
    ("probe_dir_arg", "probe_file_arg"),
    [("relative/probe", "/x.jsonl"), ("/probe", ""), ("/a:b", "/x.jsonl")],
)
def test_launch_env_rejects_bad_paths_with_a_clear_message(probe_dir_arg, probe_file_arg):
    with pytest.raises(UsageError) as caught:
        launch_env(probe_dir_arg, probe_file_arg, None)
    assert "probe" in str(caught.value)
