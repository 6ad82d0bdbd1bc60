"""The fuzz harness (tests/fuzz/harness.py) over the frames real clients sent (tests/fuzz/corpus), bounded for CI.

Every captured frame must still decode as the request it was, and pass the whole harness (a regression
test of the decoders against real clients, and of the corpus itself). Then hypothesis mutates those
frames as a fuzzer would (bits flipped, bytes changed, cut short, length fields set to -1 or huge,
the frame size wrong, grafted onto or pipelined with another frame, fed in chunks) and the harness
must accept whatever comes out with one of klamm's documented refusals. KLAMM_FUZZ_EXAMPLES scales
the number of mutations per captured frame. Coverage-guided fuzzing for longer: `make fuzz`.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.protocol.connection import Request
from tests.fuzz.harness import authenticate, decode_stream, one_input, summary

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
FILES = sorted(CORPUS.glob("*.bin"))
FRAMES = {path.name: path.read_bytes() for path in FILES}
CAPTURED = re.compile(r"^(\d+)-v(\d+)-\d+\.bin$")
EXAMPLES = int(os.environ.get("KLAMM_FUZZ_EXAMPLES", "10"))

pytestmark = pytest.mark.timeout(300)


def test_the_corpus_holds_what_real_clients_send() -> None:
    """The capture covers the APIs and forms the harness is meant to start from (scripts/capture_fuzz_corpus.py)."""
    keys = {(int(m[1]), int(m[2])) for name in FRAMES if (m := CAPTURED.match(name))}
    apis = {key for key, _ in keys}
    assert {0, 1, 3, 8, 9, 10, 11, 12, 14, 17, 18, 19, 22, 24, 26, 29, 30, 32, 36, 51} <= apis
    assert {(0, v) for v in (1, 2)} <= keys  # message sets (magic 0 and 1) from kafka-python pinned to 0.10.1
    assert (17, 0) in keys and any(name.startswith("sasl-token-") for name in FRAMES)  # SaslHandshake v0, bare
    assert sum(len(frame) for frame in FRAMES.values()) < 2 * 1024 * 1024


@pytest.mark.parametrize("name", list(FRAMES))
def test_each_captured_frame_decodes_and_passes_the_harness(name: str) -> None:
    frame = FRAMES[name]
    if match := CAPTURED.match(name):
        requests = decode_stream(frame, len(frame))
        assert len(requests) == 1 and isinstance(requests[0], Request), requests
        request = requests[0]
        assert (request.api_key, request.api_version, request.size) == (int(match[1]), int(match[2]), len(frame) - 4)
        assert summary(decode_stream(frame, 1)) == summary(requests)  # one byte at a time
    one_input(frame)


def test_captured_plain_tokens_authenticate_in_the_harness() -> None:
    """The harness's listener knows the capture's users: bare PLAIN tokens get a session all the way through,
    so the fuzzer mutates from there rather than from a refusal."""
    tokens = [frame for name, frame in FRAMES.items() if name.startswith("sasl-token-") and frame.count(b"\0", 4) == 2]
    assert tokens
    assert all(authenticate(token, len(token), v0_mechanism="PLAIN") for token in tokens)


LENGTHS = [b"\xff\xff", b"\xff\xff\xff\xff", b"\x7f\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
           b"\x00",  # -1 as a compact (varint) length
           b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f"]  # huge varints


@st.composite
def mutated(draw: Any, seed: bytes) -> bytes:
    data = bytearray(seed)
    refit = True
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "byte", "cut", "length", "insert", "delete", "graft", "size"]))
        where = draw(st.integers(4, max(len(data) - 1, 4)))
        if where >= len(data):
            data += b"\0"
        elif kind == "flip":
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            data[where] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[where:]
        elif kind == "length":  # a length or count field set to -1 or to something huge
            value = draw(st.sampled_from(LENGTHS))
            data[where:where + len(value)] = value
        elif kind == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[where:where + draw(st.integers(1, 16))]
        elif kind == "graft":  # this frame's head on another frame's tail
            other = draw(st.sampled_from(list(FRAMES.values())))
            data[where:] = other[draw(st.integers(0, len(other))):]
        else:  # the frame size itself: the body is left as it is
            refit = False
            data[:4] = struct.pack(">i", draw(st.sampled_from([-1, 0, 7, 8, len(data) - 5, len(data) - 3, 2**31 - 1])))
    if refit and len(data) >= 4:
        data[:4] = struct.pack(">i", len(data) - 4)  # so the damage is decoded, not waited on
    for _ in range(draw(st.integers(0, 2))):  # pipelined with more frames (a handshake, then its tokens, ...)
        data += draw(st.sampled_from(list(FRAMES.values())))
    return bytes(data)


@pytest.mark.parametrize("name", list(FRAMES))
def test_mutated_frames_get_only_documented_refusals(name: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data(), chunk=st.integers(1, 64))
    def fuzz(data: Any, chunk: int) -> None:
        damaged = data.draw(mutated(FRAMES[name]))
        assert summary(decode_stream(damaged, chunk)) == summary(decode_stream(damaged, len(damaged) or 1))
        one_input(damaged)

    fuzz()


def test_atheris_finds_nothing_in_twenty_seconds(tmp_path: Path) -> None:
    """A short coverage-guided run (tests/fuzz/atheris_main.py) from the corpus, with a fixed seed; `make fuzz`
    runs it for longer. A crash or a hang (an input past 10 s) fails the test with the input's path."""
    pytest.importorskip("atheris")
    seconds = int(os.environ.get("KLAMM_ATHERIS_SECONDS", "20"))
    (tmp_path / "corpus").mkdir()
    run = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fuzz" / "atheris_main.py"), f"-max_total_time={seconds}",
         "-timeout=10", "-max_len=8192", "-seed=1", "-print_final_stats=1", f"-artifact_prefix={tmp_path}/",
         str(tmp_path / "corpus"), str(CORPUS)],
        capture_output=True, text=True, timeout=seconds + 120, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-6000:]
    assert "stat::number_of_executed_units" in run.stderr
