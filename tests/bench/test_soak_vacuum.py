"""``bench soak``'s stand-in for autovacuum (the timed run itself is ``python -m bench soak``)."""

import pytest
from django.db import connection

from bench.scenarios.soak import VacuumStandIn

pytestmark = pytest.mark.django_db(transaction=True)


def test_it_vacuums_only_when_the_server_does_not():
    if connection.vendor != "postgresql":
        with VacuumStandIn(0.05) as vacuum:
            pass
        assert vacuum.report() == {"server_autovacuum": "n/a", "stand_in": "none", "runs": 0, "seconds": 0.0}
        return
    with connection.cursor() as cur:
        cur.execute("SHOW autovacuum")
        server = cur.fetchone()[0]
    with VacuumStandIn(0.05) as vacuum:
        ran = vacuum.wait_for_runs(2, timeout=60 if server == "off" else 0)
    report = vacuum.report()
    assert report["server_autovacuum"] == server
    if server == "off":
        assert ran and report["stand_in"] == "VACUUM (ANALYZE) every 0.05 s" and report["runs"] >= 2
    else:
        assert not ran and report["stand_in"] == "none" and report["runs"] == 0
    with VacuumStandIn(0) as never:
        pass
    assert never.report()["stand_in"] == "none"
