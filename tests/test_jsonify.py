"""``jsonify.dumps`` and ``dumps_spaced`` (msgspec) write the very text ``json.dumps`` wrote
(issue 9, item 2): compact, and with json's default separators.

``group_metadata.value_json`` is the compact text and ``offsetlake decode`` prints the spaced
one for group records: neither may change by a byte when the encoder does. The oracle is the standard library, never the code under test: every code point, the
shapes decoded records take, and every group record value of real broker-written segments
(the public corpus, golden scenarios A and D) and of histories the project generates.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pipelines.decode import OK, decode_record
from pipelines.decode.consumer_protocol import ASSIGNMENT, SUBSCRIPTION
from pipelines.decode.formats import FieldSpec, embedded_struct, record_formats
from pipelines.decode.jsonify import dumps, dumps_spaced, jsonable
from pipelines.demo import generate_cluster
from pipelines.sources.record_batches.arrow_reader import read_arrow
from tests.conftest import corpus_path


def _compact(value: object) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))


def _spaced(value: object) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False)


PAIRS = pytest.mark.parametrize(("encode", "oracle"), [(dumps, _compact), (dumps_spaced, _spaced)],
                                ids=["compact", "spaced"])


@PAIRS
def test_every_code_point_is_written_as_json_writes_it(encode, oracle) -> None:
    text = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    assert encode({text: [text, ", ", ": "]}) == oracle({text: [text, ", ", ": "]})
    for c in range(0x80):  # one by one too: the short escapes (\n, \t, ...) and \u00XX ones
        assert encode({chr(c): chr(c)}) == oracle({chr(c): chr(c)}), hex(c)


@pytest.mark.parametrize("value", [
    {"a": None, "b": True, "c": False, "d": 0, "e": -1},
    {"min": -(2**63), "max": 2**63 - 1, "u64": 2**64 - 1, "big": 2**70, "neg": -(2**70)},
    {"bytes": b"\x00\xff\xfe", "empty": b"", "ba": bytearray(b"ab"), "mv": memoryview(b"xyz")},
    {"_unknown_tagged_fields": {0: b"\x01", 7: b""}, "_tags_written_at_default": [1, 2]},
    {"nested": [{"t": (1, 2)}, [], {}, [[None]]], "s": "ünïcødé \"q\" \\ /"},
    [1, "two", None, (b"3",)],
    "lone \ud800 surrogate",  # msgspec refuses it: json writes it
])
@PAIRS
def test_shapes_of_decoded_records(value: object, encode, oracle) -> None:
    assert encode(value) == oracle(value)


def _field_types(fields: tuple[FieldSpec, ...]) -> set[str]:
    types = set()
    for f in fields:
        types.add(f.type.removeprefix("[]"))
        types |= _field_types(f.fields)
    return types


def test_no_record_format_has_a_float_field() -> None:
    """msgspec writes floats unlike json (``1e16`` for ``1e+16``, NaN as null): dumps is
    exact only while decoded records hold none. A format that gains one fails here."""
    types = set()
    for fmt in record_formats().values():
        types |= _field_types(fmt.key_fields) | _field_types(fmt.value.fields)
    for name in (SUBSCRIPTION, ASSIGNMENT):
        types |= _field_types(embedded_struct(name)[1])
    assert types <= {"int8", "int16", "uint16", "int32", "int64", "bool", "string", "bytes",
                     "uuid", "struct"}, types
    assert {"int32", "string", "bytes", "uuid", "struct"} <= types  # the walk saw the formats


def _group_values(path: Path) -> list[object]:
    values = []
    for batch in read_arrow(path, cluster_id="c"):
        for key, value in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                              strict=True):
            rec = decode_record(key, value)
            if rec.decode_status == OK and rec.record_type not in (0, 1):
                values.append(rec.value)
    return values


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("jsonify")
    generate_cluster(base / "heavy", scale=1, group_heavy=20, live=False)
    return base / "heavy"


def _assert_same_text(values: list[object], min_values: int) -> None:
    assert len(values) >= min_values
    for value in values:
        assert dumps(value) == _compact(value)
        assert dumps_spaced(value) == _spaced(value)


def test_generated_group_records(generated: Path) -> None:
    values = _group_values(generated)
    _assert_same_text(values, 1000)
    assert any(isinstance(m.get("subscription"), dict) for v in values  # decoded member blobs
               for m in v.get("members") or ())


@pytest.mark.parametrize("where", ["public", "golden/scenario-a", "golden/scenario-d"])
def test_real_group_records(where: str) -> None:
    root = corpus_path(*where.split("/"))
    values = _group_values(root)
    _assert_same_text(values, 50)
    assert any(isinstance(x, bytes) for v in values for x in _leaves(v)), "no bytes seen"


def _leaves(value: object):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value
