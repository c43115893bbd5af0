"""The alert rules and the Grafana dashboard name only series the gateway exports (a renamed metric
would silently leave an alert that can never fire)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase

from smsgw.observability import events
from tests.metrics import TOKEN, family_names

pytestmark = pytest.mark.django_db

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAME = re.compile(r"\bsmsgw_[a-z_]+")


def exported(client) -> set[str]:
    names = family_names(client)  # state figures: announced on every scrape
    for obj in vars(events).values():  # event figures: present once something happened
        if isinstance(obj, MetricWrapperBase):
            base = obj._name
            kind = obj._type
            names |= (
                {base + "_total"} if kind == "counter" else {base + s for s in ("_bucket", "_count", "_sum")}
            )
    return names


def test_alert_rules_use_exported_series(client, settings):
    settings.METRICS_TOKEN = TOKEN
    used = set(NAME.findall((DEPLOY / "prometheus" / "alerts.yml").read_text()))
    assert used and used <= exported(client), used - exported(client)


def test_dashboard_queries_use_exported_series(client, settings):
    settings.METRICS_TOKEN = TOKEN
    dashboard = json.loads((DEPLOY / "grafana" / "smsgw.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {n for e in exprs for n in NAME.findall(e)}
    assert len(used) >= 15 and used <= exported(client), used - exported(client)
