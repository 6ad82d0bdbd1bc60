"""klamm.protocol.java_utf8 and klamm.spark.header_keys: header keys as Java's String(bytes, UTF_8) makes them."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.protocol import java_utf8
from klamm.protocol.records import NewRecord, build_batch, decode_batch
from klamm.spark.header_keys import java_strings

# (bytes, UTF-8 of the Java string) as `new String(bytes, UTF_8).getBytes(UTF_8)` gives them on OpenJDK 17.0.15
JAVA = [
    ("eda080", "efbfbd"),  # an encoded surrogate: one U+FFFD (Python's "replace" puts three)
    ("eda0", "efbfbd"),
    ("ed9fbf", "ed9fbf"),
    ("edbfbf", "efbfbd"),
    ("c080", "efbfbdefbfbd"),
    ("c1bf", "efbfbdefbfbd"),
    ("c2", "efbfbd"),
    ("c241", "efbfbd41"),
    ("e0", "efbfbd"),
    ("e080", "efbfbdefbfbd"),
    ("e0a0", "efbfbd"),
    ("e08080", "efbfbdefbfbdefbfbd"),
    ("e282", "efbfbd"),
    ("e28228", "efbfbd28"),
    ("e22841", "efbfbd2841"),
    ("f0", "efbfbd"),
    ("f090", "efbfbd"),
    ("f09080", "efbfbd"),
    ("f0908041", "efbfbd41"),
    ("f0908080", "f0908080"),
    ("f0808080", "efbfbdefbfbdefbfbdefbfbd"),
    ("f48fbfbf", "f48fbfbf"),
    ("f4908080", "efbfbdefbfbdefbfbdefbfbd"),
    ("f5808080", "efbfbdefbfbdefbfbdefbfbd"),
    ("f8", "efbfbd"),
    ("ff41", "efbfbd41"),
    ("80", "efbfbd"),
    ("bfbf", "efbfbdefbfbd"),
    ("f09f9880", "f09f9880"),
    ("e282ac", "e282ac"),
    ("41e282", "41efbfbd"),
    ("f09041", "efbfbd41"),
    ("f041", "efbfbd41"),
    ("f190808041", "f190808041"),
]
UTF8_EDGES = [0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0,
              0xF1, 0xF3, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF]
keys = st.one_of(st.binary(max_size=12), st.lists(st.sampled_from(UTF8_EDGES), max_size=12).map(bytes),
                 st.text(max_size=6).map(str.encode))


def test_malformed_bytes_become_what_java_makes_of_them() -> None:
    for data, java in JAVA:
        assert java_utf8.decode(bytes.fromhex(data)).encode().hex() == java, data
    column = java_strings(pa.array([bytes.fromhex(data) for data, _ in JAVA], pa.binary()))
    assert [text.encode().hex() for text in column.to_pylist()] == [java for _, java in JAVA]
    # decode_batch, the record-by-record path, too
    buf = build_batch([NewRecord(b"k", b"v", [(bytes.fromhex(data), None) for data, _ in JAVA])])
    assert [k.encode().hex() for k, _ in decode_batch(buf, 0)[1][0].headers] == [java for _, java in JAVA]


@settings(max_examples=500, deadline=None)
@given(st.lists(keys, max_size=40), st.integers(0, 3))
def test_a_column_of_keys_decodes_as_each_key_alone(data: list[bytes], skip: int) -> None:
    column = pa.array([b"\xff"] * skip + data, pa.binary()).slice(skip)  # an Arrow offset into the buffers
    assert java_strings(column).to_pylist() == [java_utf8.decode(key) for key in data]
    assert java_strings(column).validate(full=True) is None


@given(st.text())
def test_utf8_is_taken_as_it_is(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    try:
        expected = data.decode("utf-8")
    except UnicodeDecodeError:  # a surrogate: not UTF-8
        assert "\ufffd" in java_utf8.decode(data)
        return
    assert java_utf8.decode(data) == expected
