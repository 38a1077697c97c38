"""`vgpu_scheduler_webhook_cert_*`: the serving certificate's expiry and its reloads, so an alert
fires before a rotation that never reached the server lets the webhook's certificate expire."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_scheduler.server.tls import ReloadingCertificate

EXPIRY = "vgpu_scheduler_webhook_cert_expiry_timestamp_seconds"
RELOADS = "vgpu_scheduler_webhook_cert_reloads"
FAILURES = "vgpu_scheduler_webhook_cert_reload_failures"


class CertCollector(Collector):
    """Reads the live ReloadingCertificate per scrape (plain attributes: safe from any thread)."""

    def __init__(self, cert: ReloadingCertificate) -> None:
        self.cert = cert

    def collect(self) -> Iterator[Metric]:
        details = self.cert.details
        if details is not None:
            yield GaugeMetricFamily(
                EXPIRY,
                "notAfter of the certificate the main server presents to new connections, unix seconds",
                value=details.expiry_timestamp,
            )
        yield CounterMetricFamily(
            RELOADS, "certificate pairs loaded from --cert_file/--key_file, the first one included",
            value=self.cert.reloads,
        )
        yield CounterMetricFamily(
            FAILURES,
            "changed certificate files that did not load (the previous pair kept serving)",
            value=self.cert.failures,
        )
