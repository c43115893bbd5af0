"""Reading /metrics in tests: the real endpoint, parsed with prometheus-client's own text parser."""

from __future__ import annotations

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "metrics-test-token-0123456789"


def scrape(client: Client | None = None, token: str = TOKEN) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} from GET /metrics."""
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content[:200]
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict, name: str, **labels) -> float:
    """One sample's value (0 when the series does not exist yet: a counter nobody incremented)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def family_names(client: Client | None = None, token: str = TOKEN) -> set[str]:
    """Every sample name a scrape announces, including families without samples yet (``# TYPE``)."""
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.add(family.name + ("_total" if family.type == "counter" else ""))
        names |= {s.name for s in family.samples}
    return names
