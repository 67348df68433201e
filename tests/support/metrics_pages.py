"""Prometheus text pages for the ``/metrics`` readers' tests, as prometheus_client renders a
server's families: ``# HELP``/``# TYPE`` then every series of the family, labels in the order
given (a server's order: tests vary it), histograms as ``_bucket``/``_count``/``_sum`` (and
``_created`` where the server has it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Labels = Sequence[tuple[str, str]]


def _labels(labels: Labels, *extra: tuple[str, str]) -> str:
    pairs = [*labels, *extra]
    return "{" + ",".join(f'{key}="{value}"' for key, value in pairs) + "}" if pairs else ""


def gauge(name: str, series: Iterable[tuple[Labels, float]]) -> str:
    lines = [f"# HELP {name} A gauge.", f"# TYPE {name} gauge"]
    lines += [f"{name}{_labels(labels)} {value}" for labels, value in series]
    return "\n".join(lines) + "\n"


def counter(name: str, series: Iterable[tuple[Labels, float]], created: bool = False) -> str:
    """``name`` without ``_total`` (the family), its samples with it."""
    lines = [f"# HELP {name} A counter.", f"# TYPE {name} counter"]
    for labels, value in series:
        lines.append(f"{name}_total{_labels(labels)} {value}")
        if created:
            lines.append(f"{name}_created{_labels(labels)} 1.7648e+09")
    return "\n".join(lines) + "\n"


def histogram(
    name: str,
    series: Iterable[tuple[Labels, Sequence[tuple[str, float]], float]],
    created: bool = False,
) -> str:
    """Each series: its labels, its cumulative ``(le, count)`` buckets (``+Inf`` last), its
    sum; ``_count`` is the ``+Inf`` bucket's."""
    lines = [f"# HELP {name} A histogram.", f"# TYPE {name} histogram"]
    for labels, buckets, total in series:
        for bound, count in buckets:
            lines.append(f"{name}_bucket{_labels(labels, ('le', bound))} {count}")
        lines.append(f"{name}_count{_labels(labels)} {buckets[-1][1]}")
        lines.append(f"{name}_sum{_labels(labels)} {total}")
        if created:
            lines.append(f"{name}_created{_labels(labels)} 1.7648e+09")
    return "\n".join(lines) + "\n"


def scaled(buckets: Sequence[tuple[str, float]], factor: float) -> list[tuple[str, float]]:
    """The same histogram with every count multiplied (a later, busier page)."""
    return [(bound, count * factor) for bound, count in buckets]
