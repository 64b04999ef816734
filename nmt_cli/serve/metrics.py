"""What ``GET /metrics`` reports, in Prometheus's text format (prometheus_client).

One registry per server, not the library's global one, so that several servers in one process
(the tests) keep their counts apart.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

disable_created_metrics()  # the *_created series (a timestamp per counter) only add noise here

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class ServerMetrics:
    """Counters and gauges, labelled by model (its language pair) where they concern one."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("nmt_requests", "HTTP translation requests by outcome", ["status"], registry=r)
        self.responses = Counter(
            "nmt_http_responses", "HTTP responses of every route, by route and status code", ["route", "code"], registry=r
        )
        self.in_flight = Gauge("nmt_requests_in_flight", "translation requests being answered", registry=r)
        self.latency = Histogram(
            "nmt_request_latency_seconds", "time from a request's arrival to its answer", buckets=LATENCY_BUCKETS, registry=r
        )
        self.sentences = Counter("nmt_sentences", "sentences translated, by outcome", ["model", "status"], registry=r)
        self.queue_length = Gauge("nmt_queue_sentences", "sentences waiting to join the batch", ["model"], registry=r)
        self.running = Gauge("nmt_batch_sentences", "sentences in the running batch", ["model"], registry=r)
        self.occupancy = Gauge(
            "nmt_batch_occupancy", "the running batch's source tokens over the token budget", ["model"], registry=r
        )
        self.steps = Counter("nmt_decoder_steps", "decoder steps run", ["model"], registry=r)
        self.step_sentences = Histogram(
            "nmt_step_batch_sentences", "sentences per decoder step", ["model"], buckets=BATCH_BUCKETS, registry=r
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
