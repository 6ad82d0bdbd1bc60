"""Gauge families with a series per partition or per group partition, written straight to Prometheus text.

prometheus_client's generate_latest costs about 13 us a series (it validates and escapes every label name and
value, sample by sample): a broker of 3,000 partitions answered a scrape in 155 ms, all of it on the event loop.
A `SeriesGauge` formats each series as it is added, from a template made once per family: the text
generate_latest would give for the same family (label names sorted, values escaped, numbers in Go's float
format), at a few microseconds a series. The walks that fill them are steps (klamm.steps), so a scrape holds the
loop a slice at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.utils import floatToGoString

__all__ = ["SeriesGauge", "label_value", "number"]


def label_value(text: str) -> str:
    """A label value escaped as the text format wants it (backslash, double quote, newline)."""
    if "\\" in text or '"' in text or "\n" in text:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return text


def number(value: float) -> str:
    """Go's formatting of a float, as prometheus_client writes it; a small int (the usual offset) directly."""
    if type(value) is int and -1_000_000 < value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


class SeriesGauge:
    """A gauge family: HELP and TYPE once, then one line per series, in the order added (without labels: one
    series, the family's name alone)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.name = name
        help_text = documentation.replace("\\", "\\\\").replace("\n", "\\n")
        self.lines = [f"# HELP {name} {help_text}\n", f"# TYPE {name} gauge\n"]
        order = sorted(range(len(labels)), key=lambda i: labels[i])
        self._order = order
        names = ",".join(f'{labels[i]}="%s"' for i in order)
        self._template = f"{name}{{{names}}} %s\n" if labels else f"{name} %s\n"

    def add(self, values: Sequence[str], value: float) -> None:
        """One series: its label values in the order of the family's labels."""
        self.lines.append(self._template % (*(label_value(values[i]) for i in self._order), number(value)))

    def text(self) -> str:
        return "".join(self.lines)
