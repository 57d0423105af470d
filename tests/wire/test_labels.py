"""``ldpflow.wire.labels``: label files read and refused, and the dictionary's version."""

from __future__ import annotations

import json
import pathlib

import pytest

from ldpflow.wire.labels import (
    LabelsError,
    ValueLabels,
    canonical_bytes,
    load_value_labels,
    parse_value_labels,
)

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "testvectors"


def test_csv_labels_with_commas_quotes_and_newlines_read_back_whole():
    data = ('value,label\r\n0,"red, bright"\r\n1,"say ""hi"""\r\n2,"two\nlines"\r\n'
            "5,café\r\n").encode()
    labels = parse_value_labels(data, "l.csv")
    assert labels.labels == {0: "red, bright", 1: 'say "hi"', 2: "two\nlines", 5: "café"}
    assert labels.label(5) == "café" and labels.label(3) == "3"  # unlabelled: the integer
    assert labels.value_of('say "hi"') == 1
    with pytest.raises(KeyError):
        labels.value_of("nope")
    # no header, a byte-order mark: the same labels
    bare = "\ufeff0,red\n1,green\n".encode()
    assert parse_value_labels(bare, "l.csv").labels == {0: "red", 1: "green"}


def test_json_labels_as_an_object_or_an_array():
    assert parse_value_labels(b'{"3": "x", "0": "y"}', "l.json").labels == {0: "y", 3: "x"}
    assert parse_value_labels(b'["a", null, "c"]', "l.json").labels == {0: "a", 2: "c"}


@pytest.mark.parametrize("data,fmt,message", [
    (b"0,a\n0,b\n", "csv", "value 0 is labelled twice"),
    (b'{"1": "a", "1": "b"}', "json", "value 1 is labelled twice"),
    (b"-1,a\n", "csv", "value -1 is negative"),
    (b"x,a\n", "csv", 'the value "x" is not an integer'),
    (b"1.5,a\n", "csv", 'the value "1.5" is not an integer'),
    (b"0,a,b\n", "csv", "line 1: 3 fields, expected 2"),
    (b"0,a\n1,\n", "csv", "the label of value 1 is empty"),
    (b"0,a\n1,   \n", "csv", "the label of value 1 is empty"),
    ("0,a\n1,\u3000\u2028\x85\n".encode(), "csv", "the label of value 1 is empty"),
    (b"0,same\n1,same\n", "csv", "values 0 and 1 have the same label"),
    ("0,caf\u00e9\n1,cafe\u0301\n".encode(), "csv", "equal after NFC normalisation"),
    (b"0,caf\xe9\n", "csv", "not UTF-8 (byte 0xe9 at offset 5)"),
    (b'{"0": 3}', "json", "the label of value 0 must be a string"),
    (b'{"0": "a"', "json", "not valid JSON"),
    (b'"a"', "json", "a JSON label file is an object"),
    (b"", "csv", "no labels"),
    (b'0,"open\n', "csv", "not valid CSV"),
])
def test_a_bad_label_file_is_refused_in_one_line(data, fmt, message):
    with pytest.raises(LabelsError) as info:
        parse_value_labels(data, "labels.file", fmt)
    text = str(info.value)
    assert message in text and text.startswith("labels.file") and "\n" not in text


def test_labels_outside_the_domain_or_more_than_it_are_refused(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("0,a\n1,b\n9,c\n", encoding="utf-8")
    assert load_value_labels(str(path), 10).labels[9] == "c"
    with pytest.raises(LabelsError, match=r"value 9 is outside \[0, 8\)"):
        load_value_labels(str(path), 8)
    with pytest.raises(LabelsError, match="3 labels for the domain of 2 values"):
        load_value_labels(str(path), 2)
    with pytest.raises(LabelsError, match="cannot read"):
        load_value_labels(str(tmp_path / "missing.csv"))


def test_the_version_is_the_content_hash_of_the_shared_vectors():
    cases = json.loads((VECTORS / "value_labels.json").read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 6
    versions = set()
    for case in cases:
        labels = ValueLabels.from_pairs([(v, label) for v, label in case["pairs"]])
        assert canonical_bytes(labels.labels).decode("utf-8") == case["canonical"], case["case"]
        assert labels.version == case["version"], case["case"]
        assert [[label, labels.value_of(label)] for _, label in sorted(case["pairs"])] == \
            case["encode"]
        # the order of the pairs does not matter; one changed character does
        assert ValueLabels.from_pairs(reversed([tuple(p) for p in case["pairs"]])).version \
            == labels.version
        changed = dict(labels.labels)
        first = min(changed)
        changed[first] += "."
        assert ValueLabels(changed).version != labels.version
        versions.add(labels.version)
    assert len(versions) == len(cases)


def test_the_run_block_records_the_dictionary_and_is_checked_against_its_version():
    labels = ValueLabels({0: "a", 3: "b"}, "l.csv")
    block = labels.run_block()
    assert block == {"version": labels.version, "file": "l.csv", "count": 2,
                     "labels": {"0": "a", "3": "b"}}
    assert ValueLabels.from_run_block(json.loads(json.dumps(block))).labels == labels.labels
    tampered = {**block, "labels": {"0": "a", "3": "c"}}
    with pytest.raises(LabelsError, match="not to the version it records"):
        ValueLabels.from_run_block(tampered)


def test_a_remote_label_file_is_read_through_the_given_reader(tmp_path):
    seen = []

    def read(path):
        seen.append(path)
        return b"0,a\n1,b\n"

    assert load_value_labels("gs://bucket/l.csv", 4, read=read).labels == {0: "a", 1: "b"}
    assert seen == ["gs://bucket/l.csv"]
    local = tmp_path / "l.json"
    local.write_text('{"2": "c"}', encoding="utf-8")
    assert load_value_labels(f"file://{local}", read=read).labels == {2: "c"}  # local
    assert seen == ["gs://bucket/l.csv"]


def test_white_space_is_unicodes_white_space_as_in_the_js_client():
    import unicodedata

    from ldpflow.wire.labels import WHITE_SPACE

    # U+001C..U+001F are spaces to str.isspace, not to Unicode; U+FEFF is no space
    assert parse_value_labels("0,\x1c\n1,\ufeff\n".encode(), "l").labels == {
        0: "\x1c", 1: "\ufeff"}
    assert all(unicodedata.category(c) in ("Zs", "Zl", "Zp", "Cc") for c in WHITE_SPACE)
    assert len(WHITE_SPACE) == 25  # Unicode 15's White_Space property
