"""The coordinator's own Prometheus metrics (beside the gRPC ones every service has and the leader
gauge): its config watches, read from the replica's :class:`~edgetune.control.configs.ConfigWatchHub`
when scraped (nothing is counted on the watch path).

- ``edgetune_coordinator_config_watches``: WatchConfig streams open on this replica (one per
  agent: a fleet's worth is normal; each holds a handler thread, no store connection).
- ``edgetune_coordinator_config_feed_reads_total``: reads of the store's config change feed by the
  replica's one reader. However many watches are open, one read serves them all: this grows with
  time and with published configs, not with the number of watches.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edgetune.control.configs import ConfigWatchHub


class _WatchCollector(Collector):
    """The hubs of this process's coordinators (a test may run several), summed at scrape time."""

    def __init__(self) -> None:
        self._hubs: weakref.WeakSet[ConfigWatchHub] = weakref.WeakSet()

    def track(self, hub: ConfigWatchHub) -> None:
        self._hubs.add(hub)

    def collect(self) -> Iterator[Metric]:
        hubs = list(self._hubs)
        yield GaugeMetricFamily("edgetune_coordinator_config_watches", "WatchConfig streams open on this replica.",
                                value=sum(h.watches for h in hubs))
        yield CounterMetricFamily("edgetune_coordinator_config_feed_reads",
                                  "Reads of the store's config change feed (one reader serves every watch).",
                                  value=sum(h.reads for h in hubs))


WATCHES = _WatchCollector()
REGISTRY.register(WATCHES)


def track(hub: ConfigWatchHub) -> None:
    """Export ``hub``'s open watches and feed reads (for as long as the hub lives)."""
    WATCHES.track(hub)
