"""Writes docs/grafana/specmon.json, specmon's Grafana dashboard, from the panel list below
(docs/exporter.md, "The Grafana dashboard", says what each panel shows and why).

    python3 scripts/grafana_dashboard.py           # rewrite the file
    python3 scripts/grafana_dashboard.py --check   # exit 1 if the file is not what this writes

Two scrape jobs feed it: the exporter (``specmon_*``: launches, run state, loading, token
flow, draft/verify timing, GPUs) and the servers' own ``/metrics`` (latency histograms, queue,
KV cache, preemptions, in each server's names, as the dashboards SGLang and vLLM ship read
them). Every panel has a description and a unit; each panel type gets the options Grafana's
dashboard schema requires of it (tests/unit/exporter/test_grafana_dashboard.py validates the
file against that schema). Standard library only: no specmon import.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "specmon.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
HOST = 'host=~"$host"'
GPU = 'host=~"$host", gpu=~"$gpu"'
# The servers' own series: the `job`, `instance` and `model` variables pick them.
SERVER = 'job=~"$job", instance=~"$instance", model_name=~"$model"'
# A run's own specmon series, kept where the run serves a model the `model` variable picks.
OF_MODEL = ' and on (host, run_id) specmon_run_info{model=~"$model"}'
RATE = "[$__rate_interval]"
RANGE = "[$__range]"


def family(*names: str, selector: str = SERVER) -> str:
    """A selector for the same figure under each server's name (a server serves one)."""
    return '{__name__=~"' + "|".join(names) + '", ' + selector + "}"


# Each figure in SGLang's and vLLM's names (specmon/backends/*/metrics.py reads the same).
TTFT = family(
    "sglang:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_bucket"
)
ITL = family("sglang:inter_token_latency_seconds_bucket", "vllm:inter_token_latency_seconds_bucket")
ITL_OLD = family("vllm:time_per_output_token_seconds_bucket")  # vLLM before 0.11, same gaps
E2E = family("sglang:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket")
RUNNING = family("sglang:num_running_reqs", "vllm:num_requests_running")
WAITING = family("sglang:num_queue_reqs", "vllm:num_requests_waiting")
KV_USAGE = family("sglang:token_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREEMPTED = family("sglang:num_retracted_requests_total", "vllm:num_preemptions_total")
RETRACTED_LAST = family("sglang:num_retracted_reqs")  # older SGLang: the last interval's count
FINISHED = family("sglang:num_requests_total", "vllm:request_success_total")
VLLM_DRAFTS = family("vllm:spec_decode_num_drafts_total")
VLLM_DRAFTED = family("vllm:spec_decode_num_draft_tokens_total")
VLLM_ACCEPTED = family("vllm:spec_decode_num_accepted_tokens_total")
# SGLang with --enable-metrics-for-all-schedulers exports one copy per TP rank: one per
# data-parallel rank (SGLang) or engine (vLLM) is kept, then the server's are summed.
ONE_PER_RANK = "max by (instance, dp_rank, engine)"


def per_server(expr: str) -> str:
    return f"sum by (instance) ({ONE_PER_RANK} ({expr}))"


def quantile(q: float, buckets: str, old: str | None = None, window: str = RATE) -> str:
    """``histogram_quantile`` per server (each server has one bucket layout), from ``old``
    where a server serves only the older name."""
    rises = f"histogram_quantile({q}, sum by (le, instance) (rate({buckets}{window})))"
    if old is None:
        return rises
    return f"{rises} or histogram_quantile({q}, sum by (le, instance) (rate({old}{window})))"


def heat(buckets: str, old: str | None = None) -> str:
    rises = f"sum by (le) (rate({buckets}{RATE}))"
    return rises if old is None else f"{rises} or sum by (le) (rate({old}{RATE}))"


# --- panel builders ------------------------------------------------------------------------

LEGEND = {"calcs": [], "displayMode": "list", "placement": "bottom", "showLegend": True}
TOOLTIP = {"mode": "multi", "sort": "desc"}
LAST = {"calcs": ["lastNotNull"], "fields": "", "values": False}


def target(ref: str, expr: str, legend: str = "", **extra: Any) -> dict[str, Any]:
    return {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend, **extra}


def targets(*pairs: tuple[str, str]) -> list[dict[str, Any]]:
    """(expr, legend) pairs, their refIds A, B, C..."""
    return [target(chr(65 + i), expr, legend) for i, (expr, legend) in enumerate(pairs)]


def unit_of(ref: str, unit: str) -> dict[str, Any]:
    """A field override: the query ``ref``'s series in ``unit``."""
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [{"id": "unit", "value": unit}],
    }


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def panel(
    kind: str,
    title: str,
    description: str,
    unit: str | None,
    queries: list[dict[str, Any]],
    options: dict[str, Any],
    size: tuple[int, int],
    *,
    overrides: Sequence[dict[str, Any]] = (),
    **defaults: Any,
) -> dict[str, Any]:
    """A panel of ``kind``; ``unit`` None where the panel takes none (a heatmap's)."""
    if unit is not None:
        defaults = {"unit": unit, **defaults}
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"w": size[0], "h": size[1]},
        "targets": queries,
        "fieldConfig": {"defaults": defaults, "overrides": list(overrides)},
        "options": options,
    }


def timeseries(
    title: str,
    description: str,
    unit: str,
    queries: list[dict[str, Any]],
    size: tuple[int, int] = (8, 8),
    **extra: Any,
) -> dict[str, Any]:
    options = {"legend": LEGEND, "tooltip": TOOLTIP}
    return panel("timeseries", title, description, unit, queries, options, size, **extra)


def stat(
    title: str,
    description: str,
    unit: str,
    queries: list[dict[str, Any]],
    size: tuple[int, int] = (4, 5),
    **extra: Any,
) -> dict[str, Any]:
    options = {
        "colorMode": "background",
        "graphMode": "none",
        "justifyMode": "auto",
        "orientation": "auto",
        "percentChangeColorMode": "standard",
        "reduceOptions": LAST,
        "showPercentChange": False,
        "textMode": "value_and_name",
        "wideLayout": True,
    }
    return panel("stat", title, description, unit, queries, options, size, **extra)


def bargauge(
    title: str,
    description: str,
    queries: list[dict[str, Any]],
    size: tuple[int, int],
    orientation: str,
) -> dict[str, Any]:
    options = {
        "displayMode": "gradient",
        "legend": {**LEGEND, "showLegend": False},
        "maxVizHeight": 300,
        "minVizHeight": 16,
        "minVizWidth": 8,
        "namePlacement": "auto",
        "orientation": orientation,
        "reduceOptions": LAST,
        "showUnfilled": True,
        "sizing": "auto",
        "valueMode": "color",
    }
    return panel(
        "bargauge", title, description, "percentunit", queries, options, size, min=0, max=1
    )


def table(
    title: str,
    description: str,
    unit: str,
    queries: list[dict[str, Any]],
    size: tuple[int, int],
    **extra: Any,
) -> dict[str, Any]:
    options = {"frameIndex": 0, "showHeader": True}
    return panel("table", title, description, unit, queries, options, size, **extra)


def rows_over_time(
    kind: str,
    title: str,
    description: str,
    unit: str,
    queries: list[dict[str, Any]],
    size: tuple[int, int],
    show_value: str,
    **extra: Any,
) -> dict[str, Any]:
    """A status-history or state-timeline panel: one row per series, coloured by value."""
    options = {"legend": LEGEND, "rowHeight": 0.9, "showValue": show_value, "tooltip": TOOLTIP}
    return panel(kind, title, description, unit, queries, options, size, **extra)


def heatmap(title: str, description: str, expr: str, cell_unit: str) -> dict[str, Any]:
    """Grafana's heatmap of a histogram's buckets (``format: heatmap``: Grafana turns the
    cumulative ``le`` rates into each bucket's own). Grafana's heatmap takes no standard
    unit: the bucket bounds' unit is ``options.yAxis.unit``, the cells' ``cellValues.unit``."""
    query = target("A", expr, "{{le}}", format="heatmap")
    options = {
        "calculate": False,
        "cellGap": 1,
        "cellValues": {"unit": cell_unit},
        "color": {
            "exponent": 0.5,
            "fill": "dark-orange",
            "mode": "scheme",
            "reverse": False,
            "scale": "exponential",
            "scheme": "Oranges",
            "steps": 64,
        },
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": True},
        "rowsFrame": {"layout": "auto"},
        "showValue": "never",
        "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": "s"},
    }
    return panel("heatmap", title, description, None, [query], options, (12, 8))


# --- the panels ----------------------------------------------------------------------------

UP_DOWN = [{"type": "value", "options": {"0": {"text": "down", "color": "red"}, "1": {"text": "up", "color": "green"}}}]  # fmt: skip
READY = [{"type": "value", "options": {"0": {"text": "not ready", "color": "orange"}, "1": {"text": "ready", "color": "green"}}}]  # fmt: skip
SLO_STEPS = thresholds((None, "green"), (0.8, "orange"), (1.0, "red"))


def slo_tile(figure: str, buckets: str, variable: str, old: str | None = None) -> dict[str, Any]:
    expr = f"({quantile(0.9, buckets, old, RANGE)}) / (${variable} / 1000)"
    return stat(
        f"{figure} p90 / SLO (${variable} ms)",
        f"Each server's {figure} p90 over the dashboard's time range as a share of the "
        f"`{variable}` variable: green under 80 %, orange up to the SLO, red past it "
        "(the servers' own histograms).",
        "percentunit",
        [target("A", expr, "{{instance}}", instant=True)],
        thresholds=SLO_STEPS,
    )


def hosts_row() -> list[dict[str, Any]]:
    return [
        stat(
            "Reachable",
            "1 while specmon's session to the host is connected (SSH up, helper answering).",
            "bool_yes_no",
            targets((f"specmon_host_up{{{HOST}}}", "{{host}}")),
            mappings=UP_DOWN,
        ),
        stat(
            "Ready",
            "1 while the followed run's server is ready to serve, 0 while it loads or stops; "
            "absent once the run ended.",
            "bool_yes_no",
            targets((f"specmon_ready{{{HOST}}}{OF_MODEL}", "{{host}} {{run_id}}")),
            mappings=READY,
        ),
        bargauge(
            "Loading progress per host",
            "Start-up phases done, the target-weights phase counted by its shards.",
            targets((f"specmon_loading_progress_ratio{{{HOST}}}{OF_MODEL}", "{{host}} {{run_id}}")),
            (8, 5),
            "horizontal",
        ),
        table(
            "Loading: ETA, elapsed, last load",
            "Seconds to ready while loading (absent where nothing says), seconds since the "
            "start-up began, the latest known start-to-ready time, and the current phase.",
            "s",
            targets(
                (f"specmon_loading_eta_seconds{{{HOST}}}", "ETA {{host}} {{run_id}}"),
                (f"specmon_loading_elapsed_seconds{{{HOST}}}", "elapsed {{host}} {{run_id}}"),
                (f"specmon_last_load_duration_seconds{{{HOST}}}", "last load {{host}}"),
                (
                    f"max by (host, phase) (specmon_loading_phase{{{HOST}}} == 1)",
                    "phase {{host}} {{phase}}",
                ),
            ),
            (8, 5),
            overrides=[unit_of("D", "bool_yes_no")],
        ),
        {
            **table(
                "Run",
                "Backend, profile, model, speculative settings and NCCL environment of each "
                "host's followed run (specmon_run_info).",
                "bool_yes_no",
                [
                    target(
                        "A",
                        f'specmon_run_info{{{HOST}, model=~"$model"}}',
                        format="table",
                        instant=True,
                    )
                ],
                (24, 4),
            ),
            "transformations": [
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "Value": True,
                            "__name__": True,
                            "job": True,
                            "instance": True,
                        }
                    },
                }
            ],
        },
    ]


def slo_row() -> list[dict[str, Any]]:
    return [
        slo_tile("ITL", ITL, "itl_slo_ms", ITL_OLD),
        slo_tile("TTFT", TTFT, "ttft_slo_ms"),
        stat(
            "Queue: requests waiting",
            "Requests waiting to be scheduled on each server now (SGLang num_queue_reqs, "
            "vLLM num_requests_waiting); a queue that keeps growing is saturation.",
            "short",
            [target("A", per_server(WAITING), "{{instance}}", instant=True)],
            thresholds=thresholds((None, "green"), (1, "orange"), (16, "red")),
        ),
        stat(
            "KV cache in use",
            "The fullest rank's share of the KV cache on each server now (SGLang token_usage, "
            "vLLM kv_cache_usage_perc); red from 90 %, where the console's badge turns on.",
            "percentunit",
            [target("A", f"max by (instance) ({KV_USAGE})", "{{instance}}", instant=True)],
            thresholds=thresholds((None, "green"), (0.75, "orange"), (0.9, "red")),
            min=0,
            max=1,
        ),
        stat(
            "Preemptions",
            "Requests preempted (vLLM) or retracted (SGLang) over the dashboard's time range: "
            "the KV cache ran out under load. Older SGLang counts only the last interval "
            "(num_retracted_reqs): its largest value, a lower bound.",
            "short",
            [
                target(
                    "A",
                    f"{per_server(f'increase({PREEMPTED}{RANGE})')} or "
                    f"{per_server(f'max_over_time({RETRACTED_LAST}{RANGE})')}",
                    "{{instance}}",
                    instant=True,
                )
            ],
            thresholds=thresholds((None, "green"), (1, "red")),
        ),
        stat(
            "Finished requests",
            "Requests each server finished per second over the dashboard's time range "
            "(SGLang num_requests_total, vLLM request_success_total).",
            "reqps",
            [
                target(
                    "A",
                    f"sum by (instance) (rate({FINISHED}{RANGE}))",
                    "{{instance}}",
                    instant=True,
                )
            ],
            thresholds=thresholds((None, "blue")),
        ),
    ]


def latency_row() -> list[dict[str, Any]]:
    def quantiles(title: str, what: str, buckets: str, old: str | None = None) -> dict[str, Any]:
        return timeseries(
            title,
            f"{what} at p50, p90 and p99 per server, from its histogram's buckets over "
            "Grafana's rate interval (histogram_quantile, as the console's latency panel).",
            "s",
            targets(
                *((quantile(q, buckets, old), f"p{round(q * 100)} {{{{instance}}}}") for q in (0.5, 0.9, 0.99))
            ),
        )  # fmt: skip

    return [
        heatmap(
            "TTFT heatmap",
            "Time to first token: requests per second in each latency bucket, all selected "
            "servers together (pick servers of one kind: the two servers bucket differently).",
            heat(TTFT),
            "reqps",
        ),
        heatmap(
            "ITL heatmap",
            "Inter-token latency: gaps between output tokens per second in each latency "
            "bucket, all selected servers together.",
            heat(ITL, ITL_OLD),
            "suffix: gaps/s",
        ),
        quantiles("TTFT p50 / p90 / p99", "Time to first token", TTFT),
        quantiles("ITL p50 / p90 / p99", "Inter-token latency", ITL, ITL_OLD),
        quantiles("End-to-end p50 / p90 / p99", "End-to-end request latency", E2E),
    ]


def speculation_row() -> list[dict[str, Any]]:
    run = f"{{{HOST}}}"
    drafted = f"specmon_spec_draft_tokens_per_second{run}"
    accepted = f"specmon_spec_accepted_tokens_per_second{run}"
    return [
        timeseries(
            "Generation tok/s",
            "Generation throughput in the server's latest stats line, per run.",
            "suffix: tok/s",
            targets(
                (f"specmon_generation_tokens_per_second{run}{OF_MODEL}", "{{host}} {{run_id}}")
            ),
        ),
        timeseries(
            "Token flow: proposed, accepted, rejected",
            "Drafted tokens sent to verification, accepted and rejected per second. specmon's "
            "(every server, from the latest stats line and the launch's draft tokens) and, "
            "for vLLM, the server's own spec-decode counters.",
            "suffix: tok/s",
            targets(
                (f"{drafted}{OF_MODEL}", "proposed {{host}}"),
                (f"{accepted}{OF_MODEL}", "accepted {{host}}"),
                (f"({drafted} - {accepted}){OF_MODEL}", "rejected {{host}}"),
                (f"sum by (instance) (rate({VLLM_DRAFTED}{RATE}))", "proposed {{instance}}"),
                (f"sum by (instance) (rate({VLLM_ACCEPTED}{RATE}))", "accepted {{instance}}"),
                (
                    f"sum by (instance) (rate({VLLM_DRAFTED}{RATE})) - "
                    f"sum by (instance) (rate({VLLM_ACCEPTED}{RATE}))",
                    "rejected {{instance}}",
                ),
            ),
        ),
        timeseries(
            "Drafts per second",
            "Draft-verify cycles per second over all running requests (each request's cycle is "
            "one draft): specmon's from tok/s over accept length, and vLLM's counter.",
            "suffix: drafts/s",
            targets(
                (f"specmon_spec_drafts_per_second{run}{OF_MODEL}", "{{host}} {{run_id}}"),
                (f"sum by (instance) (rate({VLLM_DRAFTS}{RATE}))", "{{instance}}"),
            ),
        ),
        timeseries(
            "Accept length and rate",
            "Mean tokens a speculative cycle emits (accepted drafts and the bonus token), and "
            "the accepted share of drafted tokens, as the server's stats line says.",
            "suffix: tok/cycle",
            targets(
                (f"specmon_spec_accept_length{run}{OF_MODEL}", "{{host}} {{run_id}}"),
                (f"specmon_spec_accept_rate_ratio{run}{OF_MODEL}", "rate {{host}} {{run_id}}"),
            ),
            (12, 8),
            overrides=[unit_of("B", "percentunit")],
        ),
        bargauge(
            "Acceptance by position",
            "Share of single-request cycles that accepted each draft position, this run (the "
            "probe's counts).",
            targets(
                (
                    f"specmon_spec_position_acceptance_ratio{run}{OF_MODEL}",
                    "{{host}} {{run_id}} position {{position}}",
                )
            ),
            (12, 8),
            "vertical",
        ),
    ]


def requests_row() -> list[dict[str, Any]]:
    return [
        timeseries(
            "Requests running and queued",
            "Requests decoding and waiting in the server's latest stats line, per run.",
            "short",
            targets(
                (f"specmon_running_requests{{{HOST}}}{OF_MODEL}", "running {{host}} {{run_id}}"),
                (f"specmon_queued_requests{{{HOST}}}{OF_MODEL}", "queued {{host}} {{run_id}}"),
            ),
            (12, 7),
        ),
        timeseries(
            "KV cache usage",
            "Share of the KV cache in use in the server's latest stats line, per run.",
            "percentunit",
            targets((f"specmon_kv_cache_usage_ratio{{{HOST}}}{OF_MODEL}", "{{host}} {{run_id}}")),
            (12, 7),
            min=0,
            max=1,
        ),
    ]


def draft_verify_row() -> list[dict[str, Any]]:
    phase = f"specmon_spec_phase_seconds_bucket{{{HOST}}}"
    cycle = f"specmon_spec_cycle_seconds_bucket{{{HOST}}}"
    return [
        timeseries(
            "Per-cycle time, p50 and p99",
            "The probe's per-cycle draft, verify and extend time at p50 and p99, and the "
            "whole cycle's p50.",
            "s",
            targets(
                (
                    f"histogram_quantile(0.5, sum by (le, host, phase) (rate({phase}{RATE})))",
                    "p50 {{phase}} {{host}}",
                ),
                (
                    f"histogram_quantile(0.99, sum by (le, host, phase) (rate({phase}{RATE})))",
                    "p99 {{phase}} {{host}}",
                ),
                (
                    f"histogram_quantile(0.5, sum by (le, host) (rate({cycle}{RATE})))",
                    "p50 cycle {{host}}",
                ),
            ),
            (12, 8),
        ),
        timeseries(
            "Share of the cycle",
            "Mean draft, verify and extend time as a share of the whole cycle.",
            "percentunit",
            targets(
                (
                    f"sum by (host, phase) (rate(specmon_spec_phase_seconds_sum{{{HOST}}}{RATE})) "
                    "/ ignoring (phase) group_left sum by (host) "
                    f"(rate(specmon_spec_cycle_seconds_sum{{{HOST}}}{RATE}))",
                    "{{phase}} {{host}}",
                )
            ),
            (12, 8),
            custom={"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60},
        ),
    ]


def gpus_row() -> list[dict[str, Any]]:
    def gpu(expr: str) -> list[dict[str, Any]]:
        return targets((expr, "{{host}} gpu{{gpu}}"))

    return [
        rows_over_time(
            "status-history",
            "GPU utilisation",
            "One row per GPU, coloured by NVML utilisation: a heatmap over time.",
            "percentunit",
            gpu(f"specmon_gpu_utilization_ratio{{{GPU}}}"),
            (12, 9),
            "never",
            min=0,
            max=1,
            color={"mode": "continuous-GrYlRd"},
        ),
        rows_over_time(
            "status-history",
            "GPU memory used",
            "One row per GPU, coloured by the share of its memory in use.",
            "percentunit",
            gpu(
                f"specmon_gpu_memory_used_bytes{{{GPU}}} / specmon_gpu_memory_total_bytes{{{GPU}}}"
            ),
            (12, 9),
            "never",
            min=0,
            max=1,
            color={"mode": "continuous-BlPu"},
        ),
        timeseries(
            "GPU power",
            "Power draw per GPU (NVML).",
            "watt",
            gpu(f"specmon_gpu_power_watts{{{GPU}}}"),
            (8, 7),
        ),
        timeseries(
            "GPU temperature",
            "Temperature per GPU (NVML).",
            "celsius",
            gpu(f"specmon_gpu_temperature_celsius{{{GPU}}}"),
            (8, 7),
        ),
        timeseries(
            "GPU SM clock",
            "SM clock per GPU (NVML): a clock that drops under load is power or heat capping.",
            "hertz",
            gpu(f"specmon_gpu_sm_clock_hertz{{{GPU}}}"),
            (8, 7),
        ),
    ]


def errors_row() -> list[dict[str, Any]]:
    return [
        timeseries(
            "Server errors by category",
            "Error lines the server logged per rate interval, by category (oom, nccl, other).",
            "short",
            targets(
                (
                    f"sum by (host, category) (increase(specmon_server_errors_total{{{HOST}}}{RATE}))",
                    "{{category}} {{host}}",
                )
            ),
            (8, 7),
            custom={"drawStyle": "bars"},
        ),
        rows_over_time(
            "state-timeline",
            "Connection",
            "specmon's session to each host over time: connecting, connected, reconnecting, "
            "disconnected or closed.",
            "bool_yes_no",
            targets(
                (
                    f"max by (host, state) (specmon_connection_state{{{HOST}}} == 1)",
                    "{{host}} {{state}}",
                )
            ),
            (8, 7),
            "auto",
        ),
        timeseries(
            "Event lag and drops",
            "How far specmon runs behind each host (its latest sample's lag, seconds since its "
            "last event) and its event rates (applied, dropped by slow subscribers).",
            "s",
            targets(
                (f"specmon_event_lag_seconds{{{HOST}}}", "lag {{host}}"),
                (
                    f"time() - specmon_last_event_timestamp_seconds{{{HOST}}}",
                    "since last event {{host}}",
                ),
                (f"rate(specmon_events_dropped_total{{{HOST}}}{RATE})", "dropped/s {{host}}"),
                (f"rate(specmon_events_total{{{HOST}}}{RATE})", "events/s {{host}}"),
            ),
            (8, 7),
            overrides=[unit_of("C", "suffix: events/s"), unit_of("D", "suffix: events/s")],
        ),
    ]


ROWS = (
    ("Hosts and runs", hosts_row),
    ("SLO and saturation (the servers' /metrics)", slo_row),
    ("Latency (the servers' /metrics)", latency_row),
    ("Throughput and speculation", speculation_row),
    ("Requests and KV cache", requests_row),
    ("Draft vs verify", draft_verify_row),
    ("GPUs", gpus_row),
    ("Errors and specmon", errors_row),
)


def layout() -> list[dict[str, Any]]:
    """Rows and their panels, ids in order, each panel placed left to right, wrapping at
    Grafana's 24 columns."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, build in ROWS:
        panels.append(
            {
                "type": "row",
                "title": title,
                "id": len(panels) + 1,
                "collapsed": False,
                "panels": [],
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            }
        )
        y += 1
        x = line = 0
        for item in build():
            w, h = item["gridPos"]["w"], item["gridPos"]["h"]
            if x + w > 24:
                x, y, line = 0, y + line, 0
            item["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
            panels.append({"id": len(panels) + 1, **item})
            x, line = x + w, max(line, h)
        y += line
    return panels


# --- variables and annotations -------------------------------------------------------------

SERVERS = "sglang:num_running_reqs|vllm:num_requests_running"


def query_variable(name: str, label: str, query: str, sort: int = 1) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
        "sort": sort,
        "regex": "",
        "hide": 0,
        "options": [],
    }


def textbox(name: str, label: str, value: str, description: str) -> dict[str, Any]:
    return {
        "type": "textbox",
        "name": name,
        "label": label,
        "description": description,
        "query": value,
        "current": {"text": value, "value": value},
        "hide": 0,
        "options": [],
    }


def variables() -> list[dict[str, Any]]:
    servers = f'{{__name__=~"{SERVERS}"'
    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "refresh": 1,
            "regex": "",
            "hide": 0,
            "options": [],
        },
        query_variable("job", "Server job", f"label_values({servers}}}, job)"),
        query_variable("instance", "Server", f'label_values({servers}, job=~"$job"}}, instance)'),
        query_variable(
            "model",
            "Model",
            f'label_values({servers}, job=~"$job", instance=~"$instance"}}, model_name)',
        ),
        query_variable("host", "Host", "label_values(specmon_host_up, host)"),
        query_variable(
            "gpu", "GPU", 'label_values(specmon_gpu_utilization_ratio{host=~"$host"}, gpu)', 3
        ),
        textbox(
            "itl_slo_ms",
            "ITL p90 SLO (ms)",
            "50",
            "The inter-token latency target at p90, in ms, for the SLO tile.",
        ),
        textbox(
            "ttft_slo_ms",
            "TTFT p90 SLO (ms)",
            "2000",
            "The time-to-first-token target at p90, in ms, for the SLO tile.",
        ),
    ]


LAUNCHES = (
    f"1000 * (specmon_run_start_time_seconds{{{HOST}}} * on (host, run_id) group_left "
    f'(profile, model, spec_algorithm, spec_steps) specmon_run_info{{{HOST}, model=~"$model"}})'
)


def annotations() -> list[dict[str, Any]]:
    return [
        {
            "builtIn": 1,
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True,
            "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts",
            "target": {"limit": 100, "matchAny": False, "tags": [], "type": "dashboard"},
            "type": "dashboard",
        },
        {
            "name": "Launches",
            "datasource": DS,
            "enable": True,
            "hide": False,
            "iconColor": "purple",
            # The launch time is the series' value (ms): one mark per run, at its launch.
            "expr": LAUNCHES,
            "step": "60s",
            "useValueForTime": True,
            "titleFormat": "Launch on {{host}}: {{profile}}",
            "textFormat": "{{model}}, {{spec_algorithm}} {{spec_steps}} steps (run {{run_id}})",
            "tagKeys": "host,profile",
        },
    ]


def dashboard() -> dict[str, Any]:
    return {
        "__inputs": [],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.4.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        ],
        "title": "specmon: speculative decoding fleet",
        "uid": "specmon-fleet",
        "description": (
            "specmon export and the servers' own /metrics: latency and saturation, token flow, "
            "loading, acceptance, draft vs verify, GPUs, errors; launches as annotations"
        ),
        "tags": ["specmon", "speculative-decoding", "sglang", "vllm"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "15s",
        "schemaVersion": 39,
        "version": 2,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "",
        "annotations": {"list": annotations()},
        "links": [],
        "templating": {"list": variables()},
        "panels": layout(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print(f"{OUT}: {'up to date' if same else 'differs: run scripts/grafana_dashboard.py'}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
