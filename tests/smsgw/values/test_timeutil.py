"""Tests for smsgw.values.timeutil. Expected instants are hand-computed from the tz rules:

* America/New_York: EST -05:00 / EDT -04:00; DST 2nd Sunday of March 02:00 -> 03:00 (2026-03-08),
  ends 1st Sunday of November 02:00 -> 01:00 (2026-11-01).
* Europe/Berlin: CET +01:00 / CEST +02:00; changes at 01:00 UTC on the last Sunday of March
  (2026-03-29, 02:00 -> 03:00 local) and October (2026-10-25, 03:00 -> 02:00 local).
* Australia/Lord_Howe: standard +10:30, DST +11:00 (a 30-minute shift); DST starts 1st Sunday of
  October at 02:00 -> 02:30 (2026-10-04) and ends 1st Sunday of April at 02:00 -> 01:30 (2026-04-05).
* Asia/Kolkata: +05:30 all year.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from smsgw.values.timeutil import (
    DstAdjustment,
    DstPolicy,
    ResolvedTime,
    TimeResolutionError,
    check_window,
    parse_timezone,
    resolve_local,
    resolve_send_at,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- parse_timezone ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "UTC",
        "America/New_York",
        "Europe/Berlin",
        "Australia/Lord_Howe",
        "Asia/Kolkata",
        "Etc/GMT+5",
        "America/Argentina/Buenos_Aires",
        "America/Port-au-Prince",
    ],
)
def test_parse_timezone_accepts_iana_names(name):
    assert parse_timezone(name).key == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "Mars/Olympus",
        "../etc",
        "../../etc/passwd",
        "/etc/localtime",
        "America/../Europe/Berlin",
        "America/New_York/",
        "America",  # a directory in the database, not a zone
        "localtime",
        "posixrules",
        "Factory",
        "posix/America/New_York",
        "right/UTC",
        "America/New York",
        " UTC",
        "utc",
        "Europe/Berlin\x00",
        "+02:00",
        "A" * 200,
    ],
)
def test_parse_timezone_rejects_invalid(name):
    with pytest.raises(TimeResolutionError) as info:
        parse_timezone(name)
    assert info.value.field == "timezone"
    assert "timezone" in str(info.value)


def test_parse_timezone_rejects_non_string():
    with pytest.raises(TimeResolutionError) as info:
        parse_timezone(None)  # type: ignore[arg-type]
    assert info.value.field == "timezone"


def test_error_is_value_error_with_field_and_message():
    err = TimeResolutionError("send_at", "boom")
    assert isinstance(err, ValueError)
    assert err.field == "send_at"
    assert err.message == "boom"
    assert str(err) == "boom"
    with pytest.raises(ValueError):
        TimeResolutionError("nonsense", "x")


# --- resolve_local: DST gaps ------------------------------------------------------------------------


def test_new_york_gap_moves_forward_by_one_hour():
    r = resolve_local(datetime(2026, 3, 8, 2, 30), "America/New_York")
    # 02:30 read with the pre-transition offset EST -05:00 = 07:30Z, which is 03:30 EDT.
    assert r.due_at == utc(2026, 3, 8, 7, 30)
    assert r.due_at.tzinfo is UTC
    assert r.local_time == datetime(2026, 3, 8, 2, 30)
    assert r.timezone == "America/New_York"
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.adjustment_seconds == 3600
    assert r.describe() == (
        "02:30 does not exist in America/New_York on 2026-03-08 (DST gap); "
        "moved forward 3600 s to 03:30 local"
    )


@pytest.mark.parametrize("policy", [DstPolicy.EARLIER, DstPolicy.LATER])
def test_gap_ignores_ambiguity_policy(policy):
    r = resolve_local(datetime(2026, 3, 8, 2, 0), "America/New_York", policy)
    assert r.due_at == utc(2026, 3, 8, 7, 0)  # 02:00 EST -> 03:00 EDT
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.adjustment_seconds == 3600


def test_new_york_gap_edges_are_not_shifted():
    before = resolve_local(datetime(2026, 3, 8, 1, 59, 59), "America/New_York")
    assert before.due_at == utc(2026, 3, 8, 6, 59, 59)  # EST
    assert before.adjustment is DstAdjustment.NONE
    after = resolve_local(datetime(2026, 3, 8, 3, 0), "America/New_York")
    assert after.due_at == utc(2026, 3, 8, 7, 0)  # EDT
    assert after.adjustment is DstAdjustment.NONE
    assert after.adjustment_seconds == 0


def test_berlin_gap():
    r = resolve_local(datetime(2026, 3, 29, 2, 30), "Europe/Berlin")
    assert r.due_at == utc(2026, 3, 29, 1, 30)  # 02:30 CET (+01:00) = 01:30Z = 03:30 CEST
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.adjustment_seconds == 3600
    assert "moved forward 3600 s to 03:30 local" in r.describe()


def test_lord_howe_thirty_minute_gap():
    # Gap 02:00-02:30 local on 2026-10-04. 02:15 shifted forward by the 30-minute gap is 02:45 LHDT
    # (+11:00) = 15:45Z on the 3rd; equivalently 02:15 at the old offset +10:30 = 15:45Z.
    r = resolve_local(datetime(2026, 10, 4, 2, 15), "Australia/Lord_Howe")
    assert r.due_at == utc(2026, 10, 3, 15, 45)
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.adjustment_seconds == 1800
    assert r.describe() == (
        "02:15 does not exist in Australia/Lord_Howe on 2026-10-04 (DST gap); "
        "moved forward 1800 s to 02:45 local"
    )


def test_lord_howe_gap_boundaries():
    # 01:59 is still standard time (+10:30): 15:29Z; 02:30 is the first DST wall time (+11:00): 15:30Z.
    assert resolve_local(datetime(2026, 10, 4, 1, 59), "Australia/Lord_Howe").due_at == utc(
        2026, 10, 3, 15, 29
    )
    start = resolve_local(datetime(2026, 10, 4, 2, 30), "Australia/Lord_Howe")
    assert start.due_at == utc(2026, 10, 3, 15, 30)
    assert start.adjustment is DstAdjustment.NONE


def test_gap_with_seconds_and_fraction():
    r = resolve_local(datetime(2026, 3, 8, 2, 30, 15, 250000), "America/New_York")
    assert r.due_at == datetime(2026, 3, 8, 7, 30, 15, 250000, tzinfo=UTC)
    assert r.describe().startswith("02:30:15.250000 does not exist")
    assert r.describe().endswith("to 03:30:15.250000 local")


def test_whole_day_gap_is_a_clock_change_not_dst():
    # Samoa skipped 2011-12-30 entirely (-10:00 -> +14:00), a 24-hour gap.
    r = resolve_local(datetime(2011, 12, 30, 10, 0), "Pacific/Apia")
    # 10:00 at -10:00 = 20:00Z on the 30th, which is 10:00 on the 31st at +14:00.
    assert r.due_at == utc(2011, 12, 30, 20, 0)
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.adjustment_seconds == 86400
    assert r.describe() == (
        "10:00 does not exist in Pacific/Apia on 2011-12-30 (clock change gap); "
        "moved forward 86400 s to 2011-12-31 10:00 local"
    )


# --- resolve_local: ambiguous times -----------------------------------------------------------------


def test_new_york_overlap_first_by_default():
    r = resolve_local(datetime(2026, 11, 1, 1, 30), "America/New_York")
    assert r.due_at == utc(2026, 11, 1, 5, 30)  # 01:30 EDT (-04:00)
    assert r.adjustment is DstAdjustment.AMBIGUOUS_FIRST
    assert r.adjustment_seconds == 0
    assert r.local_time == datetime(2026, 11, 1, 1, 30)
    assert r.describe() == (
        "01:30 occurs twice in America/New_York on 2026-11-01 (DST fall-back); "
        "using the first occurrence (UTC-04:00) = 2026-11-01T05:30:00Z"
    )


def test_new_york_overlap_second_on_request():
    r = resolve_local(datetime(2026, 11, 1, 1, 30), "America/New_York", DstPolicy.LATER)
    assert r.due_at == utc(2026, 11, 1, 6, 30)  # 01:30 EST (-05:00)
    assert r.adjustment is DstAdjustment.AMBIGUOUS_SECOND
    assert r.adjustment_seconds == 0
    assert "second occurrence (UTC-05:00) = 2026-11-01T06:30:00Z" in r.describe()


def test_policy_accepts_plain_strings():
    r = resolve_local(datetime(2026, 11, 1, 1, 30), "America/New_York", "later")
    assert r.due_at == utc(2026, 11, 1, 6, 30)


def test_local_time_with_fold_one_is_treated_by_policy_not_fold():
    r = resolve_local(datetime(2026, 11, 1, 1, 30, fold=1), "America/New_York", DstPolicy.EARLIER)
    assert r.due_at == utc(2026, 11, 1, 5, 30)
    assert r.local_time is not None and r.local_time.fold == 0


def test_berlin_overlap():
    first = resolve_local(datetime(2026, 10, 25, 2, 30), "Europe/Berlin", DstPolicy.EARLIER)
    second = resolve_local(datetime(2026, 10, 25, 2, 30), "Europe/Berlin", DstPolicy.LATER)
    assert first.due_at == utc(2026, 10, 25, 0, 30)  # CEST +02:00
    assert second.due_at == utc(2026, 10, 25, 1, 30)  # CET +01:00
    assert first.adjustment is DstAdjustment.AMBIGUOUS_FIRST
    assert second.adjustment is DstAdjustment.AMBIGUOUS_SECOND


def test_lord_howe_thirty_minute_overlap():
    # DST ends 2026-04-05 02:00 LHDT -> 01:30 LHST, so 01:30-02:00 happens twice.
    first = resolve_local(datetime(2026, 4, 5, 1, 45), "Australia/Lord_Howe")
    second = resolve_local(datetime(2026, 4, 5, 1, 45), "Australia/Lord_Howe", DstPolicy.LATER)
    assert first.due_at == utc(2026, 4, 4, 14, 45)  # +11:00
    assert second.due_at == utc(2026, 4, 4, 15, 15)  # +10:30
    assert "(UTC+11:00)" in first.describe()
    assert "(UTC+10:30)" in second.describe()


def test_overlap_edges_are_not_ambiguous():
    # 00:59 on fall-back day is unambiguous EDT; 02:00 is unambiguous EST.
    early = resolve_local(datetime(2026, 11, 1, 0, 59), "America/New_York", DstPolicy.LATER)
    assert early.due_at == utc(2026, 11, 1, 4, 59)
    assert early.adjustment is DstAdjustment.NONE
    late = resolve_local(datetime(2026, 11, 1, 2, 0), "America/New_York")
    assert late.due_at == utc(2026, 11, 1, 7, 0)
    assert late.adjustment is DstAdjustment.NONE


# --- resolve_local: ordinary times and errors -------------------------------------------------------


def test_kolkata_has_no_dst():
    for month in (1, 3, 7, 11):
        r = resolve_local(datetime(2026, month, 8, 2, 30), "Asia/Kolkata", DstPolicy.LATER)
        assert r.due_at == utc(2026, month, 7, 21, 0)  # 02:30 - 05:30
        assert r.adjustment is DstAdjustment.NONE
        assert r.adjustment_seconds == 0


def test_ordinary_time_describe():
    r = resolve_local(datetime(2026, 7, 1, 9, 0), "America/New_York")
    assert r.due_at == utc(2026, 7, 1, 13, 0)
    assert r.describe() == "09:00 on 2026-07-01 in America/New_York = 2026-07-01T13:00:00Z"


def test_utc_zone():
    r = resolve_local(datetime(2026, 3, 8, 2, 30), "UTC")
    assert r.due_at == utc(2026, 3, 8, 2, 30)
    assert r.adjustment is DstAdjustment.NONE


def test_resolve_local_rejects_aware_datetime():
    with pytest.raises(TimeResolutionError) as info:
        resolve_local(utc(2026, 3, 8, 2, 30), "UTC")
    assert info.value.field == "send_at"


def test_resolve_local_rejects_unknown_zone():
    with pytest.raises(TimeResolutionError) as info:
        resolve_local(datetime(2026, 3, 8, 2, 30), "Mars/Olympus")
    assert info.value.field == "timezone" and info.value.code == "invalid_timezone"
    # The value given is not repeated (docs/api.md, "Bad input"): it is the caller's, and may be anything.
    assert "Mars" not in str(info.value) and "IANA" in str(info.value)


def test_resolve_local_rejects_bad_policy():
    with pytest.raises(TimeResolutionError) as info:
        resolve_local(datetime(2026, 3, 8, 2, 30), "UTC", "latest")  # type: ignore[arg-type]
    assert info.value.field == "dst_policy"
    assert "'earlier'" in str(info.value) and "'later'" in str(info.value)


def test_resolve_local_out_of_range():
    with pytest.raises(TimeResolutionError) as info:
        resolve_local(datetime(1, 1, 1, 0, 0), "Asia/Kolkata")
    assert info.value.field == "send_at"


# --- resolve_send_at --------------------------------------------------------------------------------


def test_send_at_with_offset_is_absolute():
    r = resolve_send_at("2026-12-01T09:00:00+05:30", None, DstPolicy.EARLIER, "UTC")
    assert r.due_at == utc(2026, 12, 1, 3, 30)
    assert r.local_time is None
    assert r.timezone == "+05:30"
    assert r.adjustment is DstAdjustment.NONE
    assert r.adjustment_seconds == 0
    assert r.describe() == "absolute instant 2026-12-01T03:30:00Z (given with UTC offset +05:30)"


def test_send_at_negative_and_basic_format_offsets():
    r = resolve_send_at("2026-12-01T09:00:00-0330", "", DstPolicy.EARLIER, "UTC")
    assert r.due_at == utc(2026, 12, 1, 12, 30)
    assert r.timezone == "-03:30"


def test_send_at_zero_offset_recorded_as_given():
    r = resolve_send_at("2026-12-01T09:00:00+00:00", None, DstPolicy.EARLIER, "Europe/Berlin")
    assert r.due_at == utc(2026, 12, 1, 9, 0)
    assert r.timezone == "+00:00"


@pytest.mark.parametrize("text", ["2026-12-01T09:00:00Z", "2026-12-01T09:00Z", "2026-12-01 09:00:00Z"])
def test_send_at_z_suffix(text):
    r = resolve_send_at(text, None, DstPolicy.EARLIER, "America/New_York")
    assert r.due_at == utc(2026, 12, 1, 9, 0)
    assert r.timezone == "UTC"
    assert r.local_time is None
    assert r.adjustment is DstAdjustment.NONE


def test_absolute_instant_in_dst_gap_is_not_adjusted():
    # 07:30Z is a real instant; the display zone is only recorded.
    r = resolve_send_at("2026-03-08T07:30:00Z", "America/New_York", DstPolicy.LATER, "UTC")
    assert r.due_at == utc(2026, 3, 8, 7, 30)
    assert r.timezone == "America/New_York"
    assert r.adjustment is DstAdjustment.NONE
    assert r.describe() == "absolute instant 2026-03-08T07:30:00Z (2026-03-08 03:30 in America/New_York)"


def test_absolute_instant_validates_display_zone():
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at("2026-12-01T09:00:00Z", "Mars/Olympus", DstPolicy.EARLIER, "UTC")
    assert info.value.field == "timezone"


def test_local_send_at_uses_given_zone():
    r = resolve_send_at("2026-03-08T02:30", "America/New_York", DstPolicy.EARLIER, "UTC")
    assert r.due_at == utc(2026, 3, 8, 7, 30)
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.local_time == datetime(2026, 3, 8, 2, 30)


@pytest.mark.parametrize("tz_name", [None, ""])
def test_local_send_at_falls_back_to_default_zone(tz_name):
    r = resolve_send_at("2026-10-25T02:30:00", tz_name, DstPolicy.LATER, "Europe/Berlin")
    assert r.timezone == "Europe/Berlin"
    assert r.due_at == utc(2026, 10, 25, 1, 30)
    assert r.adjustment is DstAdjustment.AMBIGUOUS_SECOND


def test_local_send_at_policy_none_means_earlier():
    r = resolve_send_at("2026-11-01T01:30", "America/New_York", None, "UTC")
    assert r.due_at == utc(2026, 11, 1, 5, 30)
    assert r.adjustment is DstAdjustment.AMBIGUOUS_FIRST


def test_local_send_at_policy_string():
    r = resolve_send_at("2026-11-01T01:30", "America/New_York", "later", "UTC")
    assert r.due_at == utc(2026, 11, 1, 6, 30)


def test_send_at_seconds_and_fractions():
    r = resolve_send_at("2026-12-01T09:00:05.123456", "Asia/Kolkata", DstPolicy.EARLIER, "UTC")
    assert r.due_at == datetime(2026, 12, 1, 3, 30, 5, 123456, tzinfo=UTC)
    assert r.local_time == datetime(2026, 12, 1, 9, 0, 5, 123456)
    r = resolve_send_at("2026-12-01T09:00:05.5+05:30", None, DstPolicy.EARLIER, "UTC")
    assert r.due_at == datetime(2026, 12, 1, 3, 30, 5, 500000, tzinfo=UTC)


def test_send_at_surrounding_whitespace_is_ignored():
    r = resolve_send_at("  2026-12-01T09:00:00Z\n", None, DstPolicy.EARLIER, "UTC")
    assert r.due_at == utc(2026, 12, 1, 9, 0)


@pytest.mark.parametrize("text", ["2026-12-01", "20261201", "2026-W49-2"])
def test_date_only_is_rejected(text):
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at(text, "UTC", DstPolicy.EARLIER, "UTC")
    assert info.value.field == "send_at"
    assert "needs a time of day" in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "tomorrow at 9",
        "2026-13-01T09:00",
        "2026-02-30T09:00",
        "2026-12-01T25:00",
        "2026-12-01T09:00:60",
        "09:00",
        "12/01/2026 09:00",
        "2026-12-01T09:00:00+25:00",
        "2026-12-01T09:00:00 America/New_York",
        "1764579600",
        "2026-12-01T09:00:00" + "0" * 100,
    ],
)
def test_garbage_send_at_is_rejected_with_format_hint(text):
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at(text, "UTC", DstPolicy.EARLIER, "UTC")
    assert info.value.field == "send_at"
    assert "ISO 8601" in str(info.value)


def test_non_string_send_at_is_rejected():
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at(1764579600, "UTC", DstPolicy.EARLIER, "UTC")  # type: ignore[arg-type]
    assert info.value.field == "send_at"


def test_send_at_unknown_zone():
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at("2026-12-01T09:00", "Mars/Olympus", DstPolicy.EARLIER, "UTC")
    assert info.value.field == "timezone"


def test_send_at_path_traversal_zone():
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at("2026-12-01T09:00", "../etc", DstPolicy.EARLIER, "UTC")
    assert info.value.field == "timezone"


def test_send_at_bad_policy():
    with pytest.raises(TimeResolutionError) as info:
        resolve_send_at("2026-12-01T09:00", "UTC", "second", "UTC")
    assert info.value.field == "dst_policy"


# --- ResolvedTime -----------------------------------------------------------------------------------


def test_resolved_time_is_frozen_and_validated():
    r = ResolvedTime(due_at=utc(2026, 1, 1, 0, 0), local_time=None, timezone="UTC")
    with pytest.raises(AttributeError):
        r.timezone = "Europe/Berlin"  # type: ignore[misc]
    with pytest.raises(ValueError):
        ResolvedTime(due_at=datetime(2026, 1, 1), local_time=None, timezone="UTC")
    with pytest.raises(ValueError):
        ResolvedTime(
            due_at=datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))), local_time=None, timezone="UTC"
        )
    with pytest.raises(ValueError):
        ResolvedTime(due_at=utc(2026, 1, 1), local_time=utc(2026, 1, 1), timezone="UTC")
    with pytest.raises(ValueError):
        ResolvedTime(
            due_at=utc(2026, 1, 1),
            local_time=datetime(2026, 1, 1),
            timezone="UTC",
            adjustment=DstAdjustment.AMBIGUOUS_FIRST,
            adjustment_seconds=60,
        )


def test_resolved_time_rebuilt_from_stored_strings():
    r = ResolvedTime(
        due_at=utc(2026, 3, 8, 7, 30),
        local_time=datetime(2026, 3, 8, 2, 30),
        timezone="America/New_York",
        adjustment="gap_shifted_forward",  # type: ignore[arg-type]
        adjustment_seconds=3600,
    )
    assert r.adjustment is DstAdjustment.GAP_SHIFTED
    assert r.describe().endswith("moved forward 3600 s to 03:30 local")
    with pytest.raises(ValueError):
        ResolvedTime(
            due_at=utc(2026, 1, 1),
            local_time=None,
            timezone="UTC",
            adjustment="sideways",  # type: ignore[arg-type]
        )


def test_enum_values_are_stable():
    assert [p.value for p in DstPolicy] == ["earlier", "later"]
    assert [a.value for a in DstAdjustment] == [
        "none",
        "gap_shifted_forward",
        "ambiguous_first",
        "ambiguous_second",
    ]


# --- check_window -----------------------------------------------------------------------------------

NOW = utc(2026, 6, 1, 12, 0)


def test_window_accepts_now_and_slightly_past():
    check_window(NOW, now=NOW, past_tolerance_seconds=60, max_ahead_days=365)
    check_window(utc(2026, 6, 1, 11, 59), now=NOW, past_tolerance_seconds=60, max_ahead_days=365)


def test_window_rejects_past_beyond_tolerance():
    with pytest.raises(TimeResolutionError) as info:
        check_window(utc(2026, 6, 1, 11, 58, 59), now=NOW, past_tolerance_seconds=60, max_ahead_days=365)
    assert info.value.field == "send_at"
    assert "is in the past" in str(info.value)
    assert "2026-06-01T11:58:59Z" in str(info.value)


def test_window_past_in_other_zone_compares_instants():
    # 14:00 at +02:00 is exactly NOW; 13:58 at +02:00 is two minutes ago.
    plus2 = timezone(timedelta(hours=2))
    check_window(
        datetime(2026, 6, 1, 14, 0, tzinfo=plus2), now=NOW, past_tolerance_seconds=0, max_ahead_days=1
    )
    with pytest.raises(TimeResolutionError):
        check_window(
            datetime(2026, 6, 1, 13, 58, tzinfo=plus2), now=NOW, past_tolerance_seconds=60, max_ahead_days=1
        )


def test_window_max_ahead_is_inclusive():
    check_window(utc(2027, 6, 1, 12, 0), now=NOW, past_tolerance_seconds=60, max_ahead_days=365)
    with pytest.raises(TimeResolutionError) as info:
        check_window(utc(2027, 6, 1, 12, 0, 1), now=NOW, past_tolerance_seconds=60, max_ahead_days=365)
    assert info.value.field == "send_at"
    assert "365 days" in str(info.value)


def test_window_requires_aware_datetimes():
    with pytest.raises(TypeError):
        check_window(datetime(2026, 6, 1, 12, 0), now=NOW, past_tolerance_seconds=60, max_ahead_days=1)
    with pytest.raises(TypeError):
        check_window(NOW, now=datetime(2026, 6, 1, 12, 0), past_tolerance_seconds=60, max_ahead_days=1)
