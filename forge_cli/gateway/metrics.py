"""``GET /metrics``: Prometheus counters, histograms and gauges of one gateway."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("forge_gateway_requests", "Requests by endpoint and status", ["endpoint", "status"], registry=self.registry)
        self.tokens = Counter("forge_gateway_tokens", "Tokens by kind (prompt, output)", ["kind"], registry=self.registry)
        self.latency = Histogram(
            "forge_gateway_request_seconds", "Request latency by endpoint", ["endpoint"], registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.in_flight = Gauge("forge_gateway_in_flight", "Requests being served (queue depth)", registry=self.registry)
        self.prefix_reuse = Counter(
            "forge_gateway_prefix_reuse", "Prompts that reused an earlier completion's exact ids", registry=self.registry
        )
        self.parse_errors = Counter("forge_gateway_tool_parse_errors", "Tool calls that did not parse, by the tool format that read them",
                                    ["tool_format"], registry=self.registry)
        self.reasoning = Counter("forge_gateway_reasoning_outputs", "Outputs whose thinking the reasoning parser split off, by parser",
                                 ["parser"], registry=self.registry)

        self.history = Counter(
            "forge_gateway_prompt_history", "Recorded prompts by how their history matched what was sampled (first, exact, "
            "reused, drifted), per scaffold, tool format and model family", ["kind", "scaffold", "tool_format", "family"],
            registry=self.registry)

        self.thinking_restored = Counter(
            "forge_gateway_thinking_restored", "Assistant turns sent back without their thinking that got the sampled thinking back",
            registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
