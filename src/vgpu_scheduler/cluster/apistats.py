"""Kubernetes API requests as the transport saw them, for the vgpu_scheduler_api_* metrics.

`verb` is the HTTP method, as in client-go's rest_client_requests_total (`GET` covers get and
list), with `WATCH` for a watch stream; `code` is the HTTP status, or `<error>` when no answer
came (connection refused, timeout), client-go's word for it. Durations are from sending the
request to reading the whole answer, without the client-side rate limiter's wait, which is its
own histogram (with a low --kube-qps, HAMi's 5 for instance, it is where slow binds wait).
Watch streams count once when they open and have no duration (they last minutes by design).
"""

from __future__ import annotations

from vgpu_scheduler.cluster.instruments import CounterVec, Histogram, HistogramVec

NO_ANSWER = "<error>"
WATCH = "WATCH"


class ApiStats:
    __slots__ = ("duration", "rate_limiter_wait", "requests")

    def __init__(self) -> None:
        self.requests = CounterVec(("verb", "code"))
        self.duration = HistogramVec(("verb",))
        self.rate_limiter_wait = Histogram()

    def record(self, verb: str, code: int | None, seconds: float | None) -> None:
        """One request (`code` None: no answer); `seconds` None for a watch stream."""
        self.requests.inc((verb, NO_ANSWER if code is None else str(code)))
        if seconds is not None:
            self.duration.labels(verb).observe(seconds)
