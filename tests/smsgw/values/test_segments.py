"""Tests for smsgw.values.segments. Expected counts are worked out by hand in the comments."""

from __future__ import annotations

import pytest

from smsgw.values.segments import GSM7_BASIC_TABLE, GSM7_EXTENSION_TABLE, Encoding, SegmentInfo, analyze


def info(encoding: Encoding, segments: int, units: int) -> SegmentInfo:
    return SegmentInfo(encoding=encoding, segments=segments, units=units)


GSM = Encoding.GSM7
UCS = Encoding.UCS2


def test_empty_body():
    assert analyze("") == info(GSM, 0, 0)


def test_enum_values():
    assert Encoding.GSM7 == "GSM-7"
    assert Encoding.UCS2 == "UCS-2"


# --- GSM-7 lengths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "segments"),
    [
        (1, 1),
        (160, 1),  # fits a single segment
        (161, 2),  # concatenated: 153 + 8
        (306, 2),  # 153 + 153
        (307, 3),  # 153 + 153 + 1
        (459, 3),  # 3 * 153
        (460, 4),
    ],
)
def test_gsm7_lengths(length, segments):
    assert analyze("a" * length) == info(GSM, segments, length)


# --- UCS-2 lengths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "segments"),
    [
        (1, 1),
        (70, 1),  # fits a single segment
        (71, 2),  # concatenated: 67 + 4
        (134, 2),  # 67 + 67
        (135, 3),  # 67 + 67 + 1
    ],
)
def test_ucs2_lengths(length, segments):
    assert analyze("я" * length) == info(UCS, segments, length)


def test_one_non_gsm_char_switches_whole_body_to_ucs2():
    # 159 'a' fit GSM-7 in one segment, but one Cyrillic letter makes all 160 chars UCS-2: 67+67+26.
    assert analyze("a" * 159 + "я") == info(UCS, 3, 160)


# --- extension table --------------------------------------------------------------------------------


def test_extension_chars_cost_two_septets():
    assert analyze("€") == info(GSM, 1, 2)
    assert analyze("€" * 80) == info(GSM, 1, 160)  # exactly 160 septets
    # 81 euros = 162 septets -> concatenated. 153 is odd, so each segment takes 76 pairs (152 septets):
    # 76 + 5 euros -> 2 segments.
    assert analyze("€" * 81) == info(GSM, 2, 162)


def test_all_extension_characters():
    body = "^{}\\[~]|€\f"
    assert analyze(body) == info(GSM, 1, 20)


def test_escape_pair_not_split_at_153_boundary():
    # 152 'a' + '€' + 152 'a' = 306 septets. Dividing would give 2 segments, but the euro would occupy
    # septets 153-154 of the first segment; it moves to segment 2 (152 used in segment 1). Segment 2:
    # euro (2) + 151 'a' = 153; the last 'a' needs segment 3.
    assert analyze("a" * 152 + "€" + "a" * 152) == info(GSM, 3, 306)


def test_escape_pair_that_fits_exactly_stays():
    # 151 'a' + '€' fills segment 1 to exactly 153; then 153 'a' fill segment 2: 2 segments, 306 septets.
    assert analyze("a" * 151 + "€" + "a" * 153) == info(GSM, 2, 306)


def test_escape_pair_short_message_is_not_concatenated():
    # 152 'a' + '€' + 6 'a' = 160 septets: single segment, no boundary at 153 applies.
    assert analyze("a" * 152 + "€" + "a" * 6) == info(GSM, 1, 160)
    # One more septet -> concatenated: segment 1 = 152 'a' (euro moves), segment 2 = euro + 7 'a'.
    assert analyze("a" * 152 + "€" + "a" * 7) == info(GSM, 2, 161)


# --- UCS-2 surrogate pairs --------------------------------------------------------------------------


def test_emoji_message():
    assert analyze("Hi 😀") == info(UCS, 1, 5)  # 3 + surrogate pair
    assert analyze("😀" * 35) == info(UCS, 1, 70)
    # 36 emoji = 72 units -> concatenated; 67 is odd, so 33 emoji (66 units) per segment: 33 + 3.
    assert analyze("😀" * 36) == info(UCS, 2, 72)


def test_surrogate_pair_not_split_at_67_boundary():
    # 66 + 2 + 66 = 134 units: dividing gives 2, but the emoji would straddle units 67-68, so it moves:
    # segment 1 = 66, segment 2 = 2 + 65 = 67, segment 3 = 1.
    assert analyze("я" * 66 + "😀" + "я" * 66) == info(UCS, 3, 134)


def test_bmp_non_gsm_symbols_count_one_unit():
    assert analyze("✓") == info(UCS, 1, 1)
    assert analyze("中文") == info(UCS, 1, 2)


# --- the GSM 03.38 table ----------------------------------------------------------------------------


def test_table_shape_and_known_positions():
    assert len(GSM7_BASIC_TABLE) == 128
    assert GSM7_BASIC_TABLE[0x00] == "@"
    assert GSM7_BASIC_TABLE[0x02] == "$"
    assert GSM7_BASIC_TABLE[0x09] == "Ç"
    assert GSM7_BASIC_TABLE[0x0A] == "\n"
    assert GSM7_BASIC_TABLE[0x0D] == "\r"
    assert GSM7_BASIC_TABLE[0x10] == "Δ"
    assert GSM7_BASIC_TABLE[0x1B] == "\x1b"
    assert GSM7_BASIC_TABLE[0x1F] == "É"
    assert GSM7_BASIC_TABLE[0x24] == "¤"
    assert GSM7_BASIC_TABLE[0x40] == "¡"
    assert GSM7_BASIC_TABLE[0x41] == "A"
    assert GSM7_BASIC_TABLE[0x5F] == "§"
    assert GSM7_BASIC_TABLE[0x60] == "¿"
    assert GSM7_BASIC_TABLE[0x61] == "a"
    assert GSM7_BASIC_TABLE[0x7F] == "à"
    assert len(set(GSM7_BASIC_TABLE)) == 128
    assert set(GSM7_EXTENSION_TABLE) == set("\f^{}\\[~]|€")
    assert not set(GSM7_BASIC_TABLE) & set(GSM7_EXTENSION_TABLE)


@pytest.mark.parametrize(
    "char",
    [*"@£$¥èéùìòÇØøÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCZÄÖÑÜ§¿abczäöñüà", "\n", "\r"],
)
def test_basic_characters_are_one_septet(char):
    assert analyze(char) == info(GSM, 1, 1)


@pytest.mark.parametrize(
    "char",
    [
        "ç",  # only capital Ç (0x09) is in the basic table
        "`",
        "á",
        "í",
        "ó",
        "ú",
        "â",
        "ê",
        "õ",
        "ã",
        "È",
        "À",
        "Ì",
        "\t",
        "\x1b",  # a literal ESC is not a character of the alphabet
        "\u00a0",  # no-break space
        "\u2019",  # typographic apostrophe
        "\u201c",  # typographic quote
        "\u2013",  # en dash
        "\u2026",  # ellipsis
    ],
)
def test_non_gsm_characters_force_ucs2(char):
    result = analyze("abc" + char)
    assert result.encoding is UCS
    assert result.units == 4


def test_mixed_gsm_message():
    body = "Your code is 1234. Cost: €5 {promo} [ok] ~50% off | ^_^ @home"
    # Extension characters: € { } [ ] ~ | ^ ^ = 9, each costing one extra septet.
    ext = sum(body.count(c) for c in "€{}[]~|^")
    assert ext == 9
    assert analyze(body) == info(GSM, 1, len(body) + 9)


def test_segment_info_is_frozen():
    result = analyze("hi")
    with pytest.raises(AttributeError):
        result.segments = 5  # type: ignore[misc]
