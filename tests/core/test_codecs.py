"""Value codecs: integers as themselves, strings as big-endian UTF-8 prefixes."""

from __future__ import annotations

import pickle
import unicodedata

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ldpflow.core import codecs

# -- integers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [1, 8, 33, 63, 64])
def test_integer_codec_round_trips_the_extremes(bits):
    codec = codecs.IntegerCodec(bits=bits)
    values = np.array([0, 2**bits - 1], dtype=np.uint64)
    codes = codec.encode(values)
    assert codes.dtype == np.uint64
    np.testing.assert_array_equal(codec.decode(codes), values)


@pytest.mark.parametrize("bits", [0, 65])
def test_integer_codec_bits_out_of_range_is_named(bits):
    with pytest.raises(ValueError, match=rf"bits must be .*got {bits}"):
        codecs.IntegerCodec(bits=bits)


@pytest.mark.parametrize("bits", [8, 63])
def test_integer_codec_refuses_a_value_of_2_to_the_bits(bits):
    message = rf"values must lie in \[0, 2\*\*{bits}\), got {2**bits} at position 1"
    with pytest.raises(ValueError, match=message):
        codecs.IntegerCodec(bits=bits).encode(np.array([1, 2**bits], dtype=np.uint64))


def test_integer_codec_refuses_negative_and_fractional_values():
    codec = codecs.IntegerCodec(bits=16)
    with pytest.raises(ValueError, match="got -1 at position 0"):
        codec.encode([-1, 3])
    with pytest.raises(TypeError, match="values must be integers, got 1.5 at position 1"):
        codec.encode([1.0, 1.5])


def test_invalid_integers_gives_countable_reasons():
    rows, reasons = codecs.invalid_integers(np.array([3, 256, -1, 255]), 8)
    assert rows.tolist() == [1, 2]
    assert reasons == ["value outside [0, 2**8)"] * 2
    rows, reasons = codecs.invalid_integers(np.array([1.0, 2.5, 300.0]), 8)
    assert rows.tolist() == [1, 2]
    assert reasons == ["value is not an integer", "value outside [0, 2**8)"]
    rows, reasons = codecs.invalid_integers(np.array([2**70, "x", 5], dtype=object), 64)
    assert rows.tolist() == [0, 1]
    assert reasons == ["value outside [0, 2**64)", "value is not an integer"]


def test_check_unsigned_accepts_python_ints_up_to_2_to_the_64():
    out = codecs.check_unsigned(np.array([2**64 - 1, 0], dtype=object), 64)
    assert out.dtype == np.uint64 and int(out[0]) == 2**64 - 1


# -- strings ----------------------------------------------------------------------------------


def test_string_codec_layout_is_big_endian_zero_padded():
    codec = codecs.StringCodec(bits=32)
    assert codec.encode(["ab"]).tolist() == [0x61620000]
    assert codec.encode(["abcd", ""]).tolist() == [0x61626364, 0]


@pytest.mark.parametrize("bits", [8, 40, 64])
def test_string_codec_round_trips_short_strings(bits):
    codec = codecs.StringCodec(bits=bits)
    words = [w for w in ["", "a", "é", "€", "hello", "abcdefgh"]
             if len(w.encode()) <= bits // 8]
    assert codec.decode(codec.encode(words)) == words


@given(st.text(max_size=8).filter(lambda s: len(s.encode()) <= 8 and "\x00" not in s))
def test_string_codec_round_trip_property(text):
    codec = codecs.StringCodec(bits=64)
    assert codec.decode(codec.encode([text]), errors="strict") == [text]


@given(st.lists(st.integers(1, 255), min_size=1, max_size=8), st.integers(1, 8))
def test_string_codec_prefixes_are_byte_prefixes(byte_list, cut):
    codec = codecs.StringCodec(bits=64)
    raw = bytes(byte_list)
    cut = min(cut, len(raw))
    whole, head = codec.encode([raw, raw[:cut]])
    shift = np.uint64(64 - 8 * cut)
    assert whole >> shift == head >> shift


def test_string_codec_preserves_bytewise_order():
    codec = codecs.StringCodec(bits=64)
    words = ["b", "ab", "a", "abc", "zz", "é", "B"]
    codes = codec.encode(words)
    by_code = [w for _, w in sorted(zip(codes.tolist(), words, strict=True))]
    assert by_code == sorted(words, key=lambda w: w.encode())


def test_string_codec_refuses_long_strings_by_default():
    codec = codecs.StringCodec(bits=32)
    message = r"at most 4 UTF-8 bytes \(bits=32\), got b'hello' \(5 bytes\) at position 1"
    with pytest.raises(ValueError, match=message):
        codec.encode(["ok", "hello"])


def test_string_codec_truncates_at_a_character_boundary_when_asked():
    codec = codecs.StringCodec(bits=32)
    assert codec.decode(codec.encode(["hello"], truncate=True)) == ["hell"]
    # "abé€": 'é' is 2 bytes (3..4), '€' 3 bytes; 4 bytes keep "abé", 3 bytes keep "ab".
    assert codec.decode(codec.encode(["abé€"], truncate=True), errors="strict") == ["abé"]
    three = codecs.StringCodec(bits=24)
    assert three.decode(three.encode(["abé"], truncate=True), errors="strict") == ["ab"]


def test_string_codec_refuses_nul_anywhere():
    for text in ("ab\x00", "a\x00b"):
        with pytest.raises(ValueError, match="must not hold a NUL character"):
            codecs.StringCodec(bits=64).encode([text])


def test_string_codec_invalid_rows_gives_countable_reasons():
    codec = codecs.StringCodec(bits=16)
    rows, reasons = codec.invalid_rows(["ab", "abc", 7, "a\x00", b"xy"])
    assert rows.tolist() == [1, 2, 3]
    assert reasons == [
        "string longer than 2 UTF-8 bytes",
        "not a string",
        "string holds a NUL character",
    ]
    rows, _ = codec.invalid_rows(["abc"], truncate=True)
    assert rows.size == 0


def test_string_codec_rejects_non_strings_and_single_strings():
    codec = codecs.StringCodec(bits=16)
    with pytest.raises(TypeError, match="must be str, got int at position 0"):
        codec.encode([3])
    with pytest.raises(TypeError, match="got a single string"):
        codec.encode("ab")


def test_string_codec_bits_must_be_a_multiple_of_8():
    with pytest.raises(ValueError, match="multiple of 8, got 12"):
        codecs.StringCodec(bits=12)


def test_string_codec_decodes_invalid_utf8_with_replacement_or_raises():
    codec = codecs.StringCodec(bits=16)
    code = np.array([0xFF41], dtype=np.uint64)
    assert codec.decode(code) == ["\ufffdA"]
    with pytest.raises(UnicodeDecodeError):
        codec.decode(code, errors="strict")


def test_string_codec_decode_refuses_codes_out_of_range():
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 2\*\*16\)"):
        codecs.StringCodec(bits=16).decode([2**16])


def test_string_codec_handles_empty_batches():
    codec = codecs.StringCodec(bits=64)
    assert codec.encode([]).shape == (0,)
    assert codec.decode(np.zeros(0, dtype=np.uint64)) == []


# -- both -------------------------------------------------------------------------------------


def test_make_codec_by_name():
    assert codecs.make_codec("string", bits=64) == codecs.StringCodec(bits=64)
    assert codecs.make_codec("int", bits=20) == codecs.IntegerCodec(bits=20)
    with pytest.raises(ValueError, match=r"codec must be one of \['int', 'string'\], got 'x'"):
        codecs.make_codec("x", bits=8)


def test_codecs_are_frozen_and_picklable():
    codec = codecs.StringCodec(bits=64)
    assert pickle.loads(pickle.dumps(codec)) == codec
    with pytest.raises(AttributeError):
        codec.bits = 8  # type: ignore[misc]


def test_wide_python_ints_are_not_rounded_through_floats():
    from ldpflow.core.validation import check_values

    values = [2**63 + 1, 5, 2**64 - 1]
    assert codecs.check_unsigned(values, 64).tolist() == values
    assert check_values(values, 2**64).tolist() == values
    with pytest.raises(ValueError, match=r"got 18446744073709551616 at position 0"):
        check_values([2**64, 1], 2**64)


# -- string ends and UTF-8 pruning ------------------------------------------------------------


def _reference_valid_codes(num_bytes, controls):
    """Every code of a string of at most ``num_bytes`` bytes, by brute force (with
    ``controls=False`` only text: no control character but the whitespace 09-0D)."""
    valid = np.zeros(2 ** (8 * num_bytes), dtype=bool)
    for code in range(valid.size):
        raw = code.to_bytes(num_bytes, "big")
        text = raw.rstrip(b"\x00")
        if b"\x00" in text:
            continue
        try:
            decoded = text.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            continue
        if not controls and any(unicodedata.category(c) == "Cc" and c not in "\t\n\v\f\r"
                                for c in decoded):
            continue
        valid[code] = True
    return valid


@pytest.mark.parametrize("controls", [False, True])
def test_valid_prefixes_equal_the_brute_force_reference_on_16_bits(controls):
    codec = codecs.StringCodec(bits=16)
    valid = _reference_valid_codes(2, controls)
    for bits in range(1, 17):
        prefixes = np.arange(2**bits, dtype=np.uint64)
        expected = np.zeros(2**bits, dtype=bool)
        np.logical_or.at(expected, np.arange(2**16) >> (16 - bits), valid)
        np.testing.assert_array_equal(codec.valid_prefixes(prefixes, bits, controls=controls),
                                      expected, err_msg=f"prefix_bits={bits}")


def test_text_prefixes_refuse_the_control_strings_low_epsilon_noise_makes():
    codec = codecs.StringCodec(bits=64)
    noise = ["line\x03\x1c\u0216", "with\x0eq", "a\x7f", "b\u0085", "tab\there", "cr\r\n"]
    codes = codec.encode(noise)
    assert codec.valid_prefixes(codes, 64).tolist() == [False] * 4 + [True] * 2
    assert codec.valid_prefixes(codes, 64, controls=True).all()


def test_valid_prefixes_stop_at_the_end_of_a_string_and_check_utf8():
    codec = codecs.StringCodec(bits=64)
    words = codec.encode(["when", "the", "é", "日本", "€uro", "🙂", ""])
    for bits in (4, 8, 12, 20, 33, 64):
        assert codec.valid_prefixes(words >> np.uint64(64 - bits), bits).all()
    bad = {
        "when\x00\x1e": 0x7768656E_001E0000,  # a byte after the end of "when"
        "0xFF": 0xFF000000_00000000,  # never in UTF-8
        "lone continuation": 0x80000000_00000000,
        "overlong C0": 0xC0800000_00000000,
        "overlong E0 80": 0xE0808000_00000000,
        "surrogate ED A0": 0xEDA08000_00000000,
        "above U+10FFFF": 0xF4908080_00000000,
        "cut character": 0x61C30000_00000000,
    }
    codes = np.array(list(bad.values()), dtype=np.uint64)
    assert not codec.valid_prefixes(codes, 64).any()
    # A character that cannot fit before the end of the code is refused early.
    three = codecs.StringCodec(bits=24)
    assert three.valid_prefixes(np.array([0x61E2], dtype=np.uint64), 16).tolist() == [False]
    assert three.valid_prefixes(np.array([0xE2], dtype=np.uint64), 8).tolist() == [True]


def test_integer_codec_prunes_nothing():
    codec = codecs.IntegerCodec(bits=8)
    assert codec.valid_prefixes(np.arange(16, dtype=np.uint64), 4).all()


def test_fit_chooses_the_fewest_bytes_that_hold_the_coverage():
    words = ["a"] * 50 + ["bb"] * 30 + ["cccc"] * 19 + ["d" * 20]
    assert codecs.StringCodec.fit(words).bits == 32  # 99 of 100 hold at most 4 bytes
    assert codecs.StringCodec.fit(words, coverage=0.5).bits == 8
    assert codecs.StringCodec.fit(words, coverage=1.0).bits == 64  # capped at 8 bytes
    assert codecs.StringCodec.fit(words, max_bits=16).bits == 16
    assert codecs.StringCodec(bits=32).truncations(words) == 1
    with pytest.raises(ValueError, match="at least one string"):
        codecs.StringCodec.fit([])
    with pytest.raises(ValueError, match=r"coverage must be in \(0, 1\]"):
        codecs.StringCodec.fit(words, coverage=0)


def test_codec_is_inferred_from_text_only_when_unambiguous():
    assert codecs.infer_codec(["12", " 7 ", "0"]) == "int"
    assert codecs.infer_codec(["12", "seven"]) == "string"
    assert codecs.infer_codec(["-1"]) == "string"  # not a code of the integer codec
    assert codecs.infer_codec(["1.5"]) == "string"
