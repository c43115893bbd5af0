"""``python -m bench sdk`` measures what it names: every variant's requests reach the sandbox (a real HTTP
server in its own process) and are answered with a Message SID, the adapter's variant through the
adapter's own call."""

from __future__ import annotations

import pytest

from bench.scenarios.sdk import sdk


# The stock client variant is the SDK as shipped, which still passes aiohttp its deprecated BasicAuth.
@pytest.mark.filterwarnings("ignore:.*(BasicAuth|'auth' parameter).*:DeprecationWarning")
def test_every_variant_is_answered_by_the_sandbox_for_each_request():
    out = sdk(requests=30, in_flight=5, rounds=2, latency_ms=0, pools=[2], warmup=5)

    names = {
        "adapter",
        "messages_create_async",
        "http_client",
        "messages_create_async_stock_client",
        "adapter_no_keepalive",
        "adapter_pool_2",
    }
    assert set(out["runs"]) == names == set(out["summary"])
    for name, runs in out["runs"].items():
        assert [r["accepted"] for r in runs] == [30, 30], name
    # Each variant's warm-up and measured requests, every round, all reached the sandbox.
    assert out["sandbox_submissions"] == len(names) * 2 * (5 + 30)
