"""manage.py metrics_serve: a worker-only host's event figures, from another process's increments (the
multiprocess files are the only channel), behind the same token."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from smsgw.observability import events
from tests.metrics import TOKEN
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def get(url, token=TOKEN):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read().decode()


@pytest.fixture
def server():
    env = {**os.environ, "SMSGW_METRICS_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "metrics_serve", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("metrics on "), line
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def rate_limited_total(text: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "smsgw_rate_limit_rejections_total":
                return s.value
    return 0.0


def test_serves_this_hosts_event_figures_from_other_processes_behind_the_token(server):
    status, text = wait_for(lambda: get(server), 10, "metrics_serve answering")
    assert status == 200
    assert "smsgw_messages{" not in text, "state figures come from the web's /metrics only"
    before = rate_limited_total(text)
    events.rate_limited()  # this test process: another process than the server
    assert rate_limited_total(get(server)[1]) == before + 1
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(server, token="wrong")
    assert refused.value.code == 401
