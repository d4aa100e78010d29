"""Names the multiprocess exposition (`--workers`) gives back: prometheus-client's multiprocess files merge
metrics by base name, so a gauge cannot share its name with a counter's `_total` there."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# prometheus-client's multiprocess files merge metrics by base name, so the gauge
# llm_gateway_state_degraded cannot share its name with the counter llm_gateway_state_degraded_total
# there: the workers write it under this name, and the exposition gives it back its own.
MP_GAUGE = "state_degraded_gauge"
MP_RENAMES = {f"llm_gateway_{MP_GAUGE}": "llm_gateway_state_degraded"}


class Renamed(Collector):
    """The multiprocess aggregate, with the names of `MP_RENAMES` put back."""

    def __init__(self, inner: Collector) -> None:
        self._inner = inner

    def collect(self) -> Iterable[Metric]:
        for family in self._inner.collect():
            name = MP_RENAMES.get(family.name)
            if name is None:
                yield family
                continue
            renamed = Metric(name, family.documentation, family.type)
            for sample in family.samples:
                renamed.add_sample(name + sample.name[len(family.name):], sample.labels, sample.value,
                                   sample.timestamp, sample.exemplar)
            yield renamed
