"""A campaign's list made in line ranges, each by its own job (scheduling.campaigns.make): the plan, each
range's own checkpoint, the campaign made only when its last range is done, a range killed mid-way, a
pause or cancel that lands in the middle of a batch, a second run of one range, and (PostgreSQL) two
ranges made at the same time by two connections over numbers they share. The jobs are called here
directly; tests/integration/test_campaigns.py runs them on a real worker with two processes."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.db.models import F

from scheduling.campaigns import make as make_module
from scheduling.campaigns.make import campaign_make
from scheduling.models import Campaign, CampaignError, CampaignRange, CampaignUpload, Message
from tests.factories import recipient
from tests.scheduling.campaigns.test_campaigns import post, worker_killed_on_the_second_batch

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(monkeypatch):
    """The range jobs the campaign's job publishes, as (campaign id, range index), instead of the broker."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(
        "scheduling.campaigns.service.campaign_range_enqueue", lambda cid, index: calls.append((cid, index))
    )
    return calls


@pytest.fixture
def three_ranges(settings):
    settings.CAMPAIGN_MAKE_RANGES = 3
    settings.CAMPAIGN_RANGE_MIN_ROWS = 4
    settings.CAMPAIGN_BATCH_SIZE = 3


def people(numbers: list[str]) -> list[dict]:
    return [{"phone": n, "first_name": "A", "code": str(i)} for i, n in enumerate(numbers)]


def accepted(api, numbers: list[str]) -> Campaign:
    resp = post(api, recipients=people(numbers))
    assert resp.status_code == 202, resp.content
    return Campaign.objects.get(public_id=resp.json()["id"])


def ranges_of(campaign: Campaign) -> list[tuple[int, int | None, int, bool]]:
    return list(
        CampaignRange.objects.filter(campaign=campaign)
        .order_by("index")
        .values_list("first", "end", "position", "done")
    )


def one_message_each(campaign: Campaign, numbers: set[str]) -> None:
    made = list(Message.objects.filter(campaign=campaign).values_list("to", flat=True))
    assert sorted(made) == sorted(numbers), "one message per distinct number, none twice"


def test_a_list_is_made_in_ranges_each_by_its_own_job(api, three_ranges, published):
    # 14 items (a JSON item's line is its position): a bad number at 3, and 12 repeats 1's number (another
    # range).
    numbers = [recipient(i) for i in range(14)]
    numbers[2] = "not a number"
    numbers[11] = numbers[0]
    campaign = accepted(api, numbers)
    report = campaign_make(campaign.pk)
    # 14 records cut into 3 ranges of at least 4: [0, 4), [4, 9), [9, end).
    assert ranges_of(campaign) == [(0, 4, 4, True), (4, 9, 4, False), (9, None, 9, False)]
    assert published == [(campaign.pk, 1), (campaign.pk, 2)], "a job for each other range"
    assert (report.range_index, report.made, report.rejected, report.range_done) == (0, 3, 1, True)
    campaign.refresh_from_db()
    assert (campaign.status, campaign.recipients_total, campaign.messages_made) == ("creating", 4, 3)

    last = campaign_make(campaign.pk, 2)  # ranges run in any order
    assert (last.made, last.duplicates, last.range_done, last.finished) == (4, 1, True, False)
    campaign.refresh_from_db()
    assert campaign.status == "creating", "not made while a range is still open"
    assert CampaignUpload.objects.filter(campaign=campaign).exists()

    middle = campaign_make(campaign.pk, 1)
    assert (middle.made, middle.finished) == (5, True)
    campaign.refresh_from_db()
    assert (campaign.status, campaign.made_at is not None) == ("active", True)
    assert (campaign.recipients_total, campaign.messages_made, campaign.lines_read) == (14, 12, 14)
    assert (campaign.rows_rejected, campaign.duplicates_skipped) == (1, 1)
    assert list(
        CampaignError.objects.filter(campaign=campaign).order_by("line").values_list("line", "code")
    ) == [
        (3, "invalid_number"),
        (12, "duplicate"),
    ]
    one_message_each(campaign, {n for n in numbers if n.startswith("+")})
    assert not CampaignUpload.objects.filter(campaign=campaign).exists()
    assert campaign_make(campaign.pk, 1).stopped == "active", "a redelivered range job after the end"


def test_a_small_list_stays_one_range_and_its_job_publishes_nothing(api, settings, published):
    settings.CAMPAIGN_RANGE_MIN_ROWS = 50
    campaign = accepted(api, [recipient(i) for i in range(60)])
    report = campaign_make(campaign.pk)
    assert ranges_of(campaign) == [(0, None, 60, True)] and published == []
    assert (report.made, report.finished) == (60, True)


def test_a_range_killed_mid_way_resumes_from_its_own_checkpoint(api, three_ranges, published, monkeypatch):
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    campaign_make(campaign.pk)
    campaign_make(campaign.pk, 2)
    real_birth = worker_killed_on_the_second_batch(monkeypatch)
    with pytest.raises(SystemExit):
        campaign_make(campaign.pk, 1)
    # Range 1 committed its first batch (3 rows of 5); the other ranges are done.
    assert ranges_of(campaign) == [(0, 4, 4, True), (4, 9, 7, False), (9, None, 14, True)]
    campaign.refresh_from_db()
    assert (campaign.status, campaign.recipients_total, campaign.messages_made) == ("creating", 12, 12)
    monkeypatch.setattr(make_module, "messages_birth", real_birth)
    published.clear()
    # The redelivered task (here the campaign's own job, as a stale re-publish would run it).
    report = campaign_make(campaign.pk)
    assert published == [] and (report.range_index, report.made, report.finished) == (1, 2, True)
    campaign.refresh_from_db()
    assert (campaign.status, campaign.recipients_total, campaign.messages_made) == ("active", 14, 14)
    assert campaign.duplicates_skipped == 0 and not CampaignError.objects.filter(campaign=campaign).exists()
    one_message_each(campaign, set(numbers))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("halt", ["paused", "cancelled"])
def test_a_pause_or_cancel_committed_during_a_batch_rolls_that_batch_back(
    api, three_ranges, published, monkeypatch, halt
):
    """The batch read the status as `creating`; then another connection pauses (or cancels) the campaign
    and commits before the batch ends. The batch's last statement finds nothing to update and the whole
    batch rolls back: nothing is made after the pause or cancel committed."""
    if connection.vendor != "postgresql":
        pytest.skip("a second connection committing mid-transaction: PostgreSQL")
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    campaign_make(campaign.pk)
    real_birth = make_module.messages_birth

    def halted_meanwhile(rows, **kwargs):
        def other_connection() -> None:
            try:
                Campaign.objects.filter(pk=campaign.pk).update(status=halt)
            finally:
                connection.close()

        thread = threading.Thread(target=other_connection)
        thread.start()
        thread.join(30)
        return real_birth(rows, **kwargs)

    monkeypatch.setattr(make_module, "messages_birth", halted_meanwhile)
    report = campaign_make(campaign.pk, 1)
    assert (report.stopped, report.made, report.batches) == (halt, 0, 0)
    assert ranges_of(campaign)[1] == (4, 9, 4, False), "the range's checkpoint did not move"
    assert Message.objects.filter(campaign=campaign).count() == 4, "only range 0's rows"
    campaign.refresh_from_db()
    assert (campaign.recipients_total, campaign.messages_made) == (4, 4)
    # A paused campaign keeps its list for the resume; a cancelled one's is deleted.
    assert CampaignUpload.objects.filter(campaign=campaign).exists() == (halt == "paused")


def test_a_range_whose_campaign_is_paused_makes_nothing_and_keeps_the_list(api, three_ranges, published):
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    campaign_make(campaign.pk)
    Campaign.objects.filter(pk=campaign.pk).update(status="paused")
    report = campaign_make(campaign.pk, 1)
    assert (report.stopped, report.made) == ("paused", 0)
    assert ranges_of(campaign)[1] == (4, 9, 4, False)
    assert CampaignUpload.objects.filter(campaign=campaign).exists()


def test_resume_publishes_only_the_unfinished_ranges(api, three_ranges, published):
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    campaign_make(campaign.pk)  # range 0 done; 1 and 2 published
    campaign_make(campaign.pk, 2)
    assert api.post(f"/v1/campaigns/{campaign.public_id}/pause").status_code == 200
    assert campaign_make(campaign.pk, 1).stopped == "paused"
    assert api.post(f"/v1/campaigns/{campaign.public_id}/resume").json()["status"] == "creating"
    published.clear()
    report = campaign_make(campaign.pk)  # the job the resume publishes
    assert published == [] and report.range_index == 1 and report.finished
    campaign.refresh_from_db()
    assert (campaign.status, campaign.messages_made) == ("active", 14)
    one_message_each(campaign, set(numbers))


def test_a_second_run_of_a_range_stops_when_another_run_of_it_is_ahead(
    api, three_ranges, published, monkeypatch
):
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    campaign_make(campaign.pk)
    real_birth = make_module.messages_birth

    def another_run_commits_too(rows, **kwargs):
        # As if the other run of range 1 had committed these rows first (its checkpoint moved on).
        CampaignRange.objects.filter(campaign=campaign, index=1).update(position=F("position") + len(rows))
        return real_birth(rows, **kwargs)

    monkeypatch.setattr(make_module, "messages_birth", another_run_commits_too)
    report = campaign_make(campaign.pk, 1)
    assert (report.stopped, report.made) == ("superseded", 3)


def test_a_job_that_made_rows_before_ranges_existed_goes_on_from_its_checkpoint(api, three_ranges, published):
    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    # Made by a job from before ranges: its checkpoint on the campaign, and no ranges.
    Campaign.objects.filter(pk=campaign.pk).update(recipients_total=5)
    report = campaign_make(campaign.pk)
    assert ranges_of(campaign) == [(0, None, 14, True)] and published == []
    assert report.made == 9, "rows 6 to 14, as the old checkpoint said"
    assert set(Message.objects.filter(campaign=campaign).values_list("to", flat=True)) == set(numbers[5:])


def test_a_batch_failed_by_a_deadlock_is_made_again_whole(api, three_ranges, published, monkeypatch):
    from django.db import OperationalError
    from psycopg import errors

    numbers = [recipient(i) for i in range(14)]
    campaign = accepted(api, numbers)
    real_birth = make_module.messages_birth
    calls = {"n": 0}

    def deadlocked_once(rows, **kwargs):
        calls["n"] += 1
        made = real_birth(rows, **kwargs)
        if calls["n"] == 2:  # after its inserts, as PostgreSQL fails the waiting transaction
            raise OperationalError("deadlock detected") from errors.DeadlockDetected("deadlock detected")
        return made

    monkeypatch.setattr(make_module, "messages_birth", deadlocked_once)
    report = campaign_make(campaign.pk)
    assert (report.batches, report.made, report.duplicates) == (2, 4, 0), "the second batch made once, again"
    campaign.refresh_from_db()
    assert (campaign.recipients_total, campaign.messages_made, campaign.duplicates_skipped) == (4, 4, 0)
    assert not CampaignError.objects.filter(campaign=campaign).exists()


def test_any_other_database_error_ends_the_run_with_the_checkpoint_where_it_was(
    api, three_ranges, published, monkeypatch
):
    from django.db import OperationalError

    campaign = accepted(api, [recipient(i) for i in range(14)])

    def database_gone(rows, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(make_module, "messages_birth", database_gone)
    with pytest.raises(OperationalError):
        campaign_make(campaign.pk)
    assert ranges_of(campaign)[0] == (0, 4, 0, False)
    assert not Message.objects.filter(campaign=campaign).exists()


@pytest.mark.django_db(transaction=True)
def test_two_ranges_made_at_once_over_shared_numbers_make_each_number_once(api, settings, published):
    """Two connections make two ranges at the same moment; each range holds the other's numbers in the
    opposite order, so an insert can wait on the other's uncommitted keys (and, should the two wait on
    each other, PostgreSQL fails one batch, which is made again). Whatever the interleaving: one message
    per number, exact counts, and exactly one of the two runs marks the campaign made."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers: PostgreSQL")
    settings.CAMPAIGN_MAKE_RANGES, settings.CAMPAIGN_RANGE_MIN_ROWS, settings.CAMPAIGN_BATCH_SIZE = 2, 100, 50
    shared = [recipient(i) for i in range(200)]
    numbers = shared + shared[::-1]  # range 0 = the numbers up, range 1 = the same numbers down
    campaign = accepted(api, numbers)
    campaign_ranges = make_module.campaign_ranges(Campaign.objects.get(pk=campaign.pk))
    assert [(r.first, r.end) for r in campaign_ranges] == [(0, 200), (200, None)]
    start = threading.Barrier(2)
    reports: dict[int, make_module.MakeReport] = {}
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            start.wait(30)
            reports[index] = campaign_make(campaign.pk, index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sum(r.made for r in reports.values()) == 200
    assert sum(r.duplicates for r in reports.values()) == 200
    assert sum(r.finished for r in reports.values()) == 1, "exactly one of them made the campaign"
    campaign.refresh_from_db()
    assert (campaign.status, campaign.recipients_total, campaign.messages_made) == ("active", 400, 200)
    assert (campaign.duplicates_skipped, campaign.rows_rejected) == (200, 0)
    assert CampaignError.objects.filter(campaign=campaign, code="duplicate").count() == 200
    one_message_each(campaign, set(shared))
