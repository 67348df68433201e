"""A server watched by its URL (specmon/session/url.py): the URL's shape and its refusals in
one line, backend detection from answers captured from the simulators (SGLang and vLLM
personalities, 2026-12-04) and from hostile ones, the controller's refusals, and the
SGLang ``/metrics`` reader a URL's server needs (no log says anything)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from specmon.backends import all_backends, get_backend
from specmon.backends.sglang.metrics import SGLangMetricsReader
from specmon.commands.printers import describe_event
from specmon.commands.url_targets import url_sessions
from specmon.model.errors import SpecmonError, UsageError
from specmon.model.events import Decode, RunInfo
from specmon.session.url import (
    GPUS_NOT_VISIBLE,
    UrlController,
    UrlTarget,
    is_url_target,
    parse_url_target,
    pick_backend,
)

# Captured from `python -m specmon.sim ... --enable-metrics` (trimmed: its fields are many).
SGLANG_ANSWERS = {
    "/get_server_info": {
        "model_path": "moonshotai/Kimi-K2.5",
        "host": "127.0.0.1",
        "port": 38711,
        "tp_size": 8,
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "internal_states": [{"last_gen_throughput": 279.04, "avg_spec_accept_length": 2.196}],
        "version": "0.5.9",
    },
    "/server_info": None,
    "/v1/models": {
        "object": "list",
        "data": [
            {
                "id": "moonshotai/Kimi-K2.5",
                "object": "model",
                "created": 1796370411,
                "owned_by": "sglang",
                "root": "moonshotai/Kimi-K2.5",
                "max_model_len": 262144,
            }
        ],
    },
    "/version": None,  # 404
}
# Captured from `python -m specmon.sim.vllm serve ...` (the permission list trimmed).
VLLM_ANSWERS = {
    "/get_server_info": None,  # 404
    "/server_info": None,
    "/v1/models": {
        "object": "list",
        "data": [
            {
                "id": "meta-llama/Llama-3.3-70B-Instruct",
                "object": "model",
                "created": 1796370411,
                "owned_by": "vllm",
                "root": "meta-llama/Llama-3.3-70B-Instruct",
                "parent": None,
                "max_model_len": 131072,
            }
        ],
    },
    "/version": {"version": "0.33.0"},
}


@pytest.mark.parametrize(
    ("text", "base"),
    [
        ("http://127.0.0.1:30000", "http://127.0.0.1:30000"),
        ("http://127.0.0.1:30000/", "http://127.0.0.1:30000"),
        ("HTTPS://gpu-box.example:8443", "https://gpu-box.example:8443"),
        ("http://gpu-box", "http://gpu-box:80"),
        ("https://gpu-box", "https://gpu-box:443"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_a_url_target_is_scheme_host_and_port(text: str, base: str) -> None:
    assert is_url_target(text)
    assert parse_url_target(text).base_url == base


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("ftp://gpu-box:21", "only http:// and https://"),
        ("ssh://root@gpu-box", "only http:// and https://"),
        ("http://user:pw@gpu-box:8000", "a user or password"),
        ("http://gpu-box:8000/v1", "no path, query or fragment"),
        ("http://gpu-box:8000/?x=1", "no path, query or fragment"),
        ("http://gpu-box:8000#top", "no path, query or fragment"),
        ("http://gpu-box:8000?", "no path, query or fragment"),
        ("http://:8000", "no host"),
        ("http://gpu-box:99999", "not a URL"),
        ("http://gpu-box:port", "not a URL"),
        ("http://gpu_box!:80", "is not a host name or address"),
        ("http://a\x1b]0;pwned\x07b:80", "not"),
    ],
)
def test_anything_else_after_the_scheme_is_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_url_target(text)
    message = str(caught.value)
    assert why in message and "\n" not in message
    assert "\x1b" not in message and "\x07" not in message  # safe text: the terminal untouched


def test_ssh_hosts_are_not_url_targets() -> None:
    for host in ("gpu-box", "root@gpu-box:22", "local", "[::1]:22"):
        assert not is_url_target(host)


def test_each_backend_is_told_from_its_simulators_answers() -> None:
    backends = all_backends()
    assert pick_backend(SGLANG_ANSWERS, backends) is get_backend("sglang")
    assert pick_backend(VLLM_ANSWERS, backends) is get_backend("vllm")
    # Each alone: SGLang's /v1/models card, vLLM's /version beside a model list.
    models_only = {"/v1/models": SGLANG_ANSWERS["/v1/models"]}
    assert pick_backend(models_only, backends) is get_backend("sglang")
    card = dict(VLLM_ANSWERS["/v1/models"]["data"][0], owned_by="someone")  # type: ignore[index]
    unbranded = {"/version": {"version": "0.33.0"}, "/v1/models": {"data": [card]}}
    assert pick_backend(unbranded, backends) is get_backend("vllm")


@pytest.mark.parametrize(
    "answers",
    [
        {},
        {"/v1/models": None, "/version": None, "/get_server_info": None},
        {"/get_server_info": ["model_path"], "/v1/models": "owned_by vllm"},
        {"/get_server_info": {"model_path": 1}},  # neither tp_size nor internal_states
        {"/v1/models": {"data": {"owned_by": "vllm"}}},
        {"/v1/models": {"data": [None, 3, {"owned_by": ["vllm"]}]}},
        {"/version": {"version": 33}},
    ],
)
def test_answers_no_backend_claims_pick_none(answers: dict) -> None:
    assert pick_backend(answers, all_backends()) is None


def test_two_backends_equally_sure_is_no_answer() -> None:
    both = {**SGLANG_ANSWERS, "/v1/models": VLLM_ANSWERS["/v1/models"]}  # 1.0 each
    assert pick_backend(both, all_backends()) is None


def test_the_controller_refuses_every_action_that_needs_a_host() -> None:
    controller = UrlController(UrlTarget("http", "127.0.0.1", 8000), backend="vllm")
    assert not controller.can_launch
    assert controller.host_label == "http://127.0.0.1:8000 (HTTP only)"
    assert controller.profiles() == [] and controller.current_run is None

    async def refused() -> list[str]:
        said = []
        for call in (
            lambda: controller.launch("p"),
            lambda: controller.stop(),
            lambda: controller.check_launch(),
        ):
            with pytest.raises(SpecmonError) as caught:
                await call()
            said.append(str(caught.value))
        return said

    for message in asyncio.run(refused()):
        assert "HTTP only" in message and "\n" not in message
    assert "HTTP only" in (controller.read_only_reason or "")
    assert GPUS_NOT_VISIBLE == "GPUs: not visible over HTTP"


def test_an_unknown_backend_name_is_refused() -> None:
    with pytest.raises(UsageError, match="unknown backend"):
        UrlController(UrlTarget("http", "h", 1), backend="tgi")


def hosts_args(*hosts: str, **extra: object) -> argparse.Namespace:
    values = {"hosts": list(hosts), "backend": None, "profile": None, "log": False}
    return argparse.Namespace(**{**values, **extra})


def test_watch_and_connect_dispatch_urls_before_any_host_lookup() -> None:
    assert url_sessions(hosts_args("gpu-box")) is None
    sessions = url_sessions(hosts_args("http://127.0.0.1:1", backend="sglang"))
    assert sessions is not None and isinstance(sessions[0][1], UrlController)
    for args, why in (
        (hosts_args("gpu-box", backend="vllm"), "--backend is for a URL target"),
        (hosts_args("http://h:1", "gpu-box"), "cannot be mixed"),
        (hosts_args("http://h:1", all_hosts=True), "cannot be mixed"),
        (hosts_args("http://h:1", profile="p"), "--profile needs SSH"),
        (hosts_args("http://h:1", log=True), "shows no log"),
        (hosts_args("http://h:1/metrics"), "no path"),
    ):
        with pytest.raises(UsageError, match=why):
            url_sessions(args)


def test_the_text_watch_names_the_url_and_http_only() -> None:
    event = RunInfo(run_id="http://h:1", backend="vllm", reattached=True)
    assert describe_event(event) == "run         watching http://h:1 (vllm, HTTP only)"


def test_server_info_reads_as_names_and_values_and_its_text_is_made_safe() -> None:
    """It printed as a Python tuple list: values=[('version', '0.5.9'), ...]."""
    import io

    from specmon.commands.printers import print_event
    from specmon.model.events import ServerInfo

    info = ServerInfo(values=(("version", "0.5.9"), ("tp_size", "8"), ("model_path", "m\x1b[2Jx")))
    assert describe_event(info) == "server info version 0.5.9, tp_size 8, model_path m\x1b[2Jx"
    out = io.StringIO()
    print_event(0.0, info, as_json=False, with_log=False, out=out)
    assert "\x1b" not in out.getvalue() and "version 0.5.9, tp_size 8" in out.getvalue()


SGLANG_PAGE = """\
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="m",tp_rank="0"} 250.5
sglang:gen_throughput{model_name="m",tp_rank="0",dp="1"} 49.5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",tp_rank="0"} 4.0
sglang:num_running_reqs{model_name="m",tp_rank="0",dp="1"} 1.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",tp_rank="0"} 2.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",tp_rank="0"} 0.25
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.5
sglang:spec_accept_length{model_name="m",tp_rank="0",dp="1"} 3.5
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.5
"""


def test_sglang_gauges_read_as_one_decode() -> None:
    (event,) = SGLangMetricsReader().read(SGLANG_PAGE, 1.0)
    assert isinstance(event, Decode)
    assert event.gen_throughput == 300.0 and event.running_req == 5 and event.queue_req == 2
    assert event.accept_len == 3.0 and event.accept_rate == 0.5 and event.token_usage == 0.25
    assert event.tokens is None


@pytest.mark.parametrize(
    "page",
    [
        "",
        "not prometheus {{{",
        "sglang:num_running_reqs 3\n",  # no throughput gauge: nothing to say
        "\x00\xff" * 100,
    ],
)
def test_sglang_pages_without_its_gauges_give_nothing(page: str) -> None:
    assert SGLangMetricsReader().read(page, 1.0) == []


def test_hostile_sglang_values_are_bounded() -> None:
    page = (
        "sglang:gen_throughput NaN\nsglang:gen_throughput 10\n"
        "sglang:num_running_reqs 1e300\nsglang:num_queue_reqs -5\n"
        "sglang:spec_accept_length +Inf\nsglang:spec_accept_length 0\n"
    )
    (event,) = SGLangMetricsReader().read(page, 1.0)
    assert isinstance(event, Decode)
    assert event.gen_throughput == 10.0 and event.running_req == 10**9 and event.queue_req == 0
    assert event.accept_len is None  # no speculation said (0 only)


def test_only_a_url_watch_reads_sglang_metrics_into_events() -> None:
    sglang = get_backend("sglang")
    assert sglang.new_metrics_reader() is None  # a launched run's log says all
    assert isinstance(sglang.new_http_only_metrics_reader(), SGLangMetricsReader)
    vllm = get_backend("vllm")
    assert type(vllm.new_http_only_metrics_reader()) is type(vllm.new_metrics_reader())


def test_a_host_name_that_does_not_resolve_is_refused_at_once_not_waited_for(monkeypatch) -> None:
    """Waiting suits a server whose HTTP is not up yet; a name that resolves to nothing will
    not start answering, so the watch ends in one line instead."""
    import httpx

    from specmon.session import url

    assert url._why(httpx.ConnectError("[Errno -2] Name or service not known")) == url.NO_SUCH_HOST
    refused = url._why(httpx.ConnectError("[Errno 111] Connection refused"))
    assert refused == "connection refused or host unreachable"

    async def no_such_host(base_url: str, *, timeout_s: float):
        raise url.NoAnswer(f"{base_url}: {url.NO_SUCH_HOST}", url.NO_SUCH_HOST)

    async def refused_now(base_url: str, *, timeout_s: float):
        raise url.NoAnswer(f"{base_url}: {refused}", refused)

    async def start(detect) -> url.UrlController:
        monkeypatch.setattr(url, "detect_backend", detect)
        controller = url.url_controller_from_args("http://gpu-box.example:8000", None)
        try:
            await controller.start()
        finally:
            await controller.close()
        return controller

    with pytest.raises(url.NoAnswer, match="no such host name"):
        asyncio.run(start(no_such_host))
    waited = asyncio.run(start(refused_now))  # returns at once, asking again in the background
    assert waited.backend is None
