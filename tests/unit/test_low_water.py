"""ReceiveLowWater: a socket's receive mark never asks for more than the frame still lacks."""

from __future__ import annotations

import socket

from hypothesis import given
from hypothesis import strategies as st

from klamm.broker.low_water import LARGEST, SMALLEST, ReceiveLowWater


class RecordingSocket:
    def __init__(self) -> None:
        self.marks: list[int] = []

    def setsockopt(self, level: int, option: int, value: int) -> None:
        assert (level, option) == (socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        self.marks.append(value)


@given(st.lists(st.integers(min_value=0, max_value=4 * LARGEST), max_size=30))
def test_the_mark_never_exceeds_what_is_lacking_and_is_set_only_when_it_changes(lacking: list[int]) -> None:
    sock = RecordingSocket()
    water = ReceiveLowWater(sock)  # type: ignore[arg-type]
    mark = 1
    for value in lacking:
        calls = len(sock.marks)
        water.expect(value)
        if len(sock.marks) > calls:
            assert sock.marks[-1] != mark
            mark = sock.marks[-1]
        assert mark == 1 or SMALLEST <= mark <= min(value, LARGEST)


def test_a_frame_read_to_its_end_sets_the_mark_once_and_resets_it() -> None:
    sock = RecordingSocket()
    water = ReceiveLowWater(sock)  # type: ignore[arg-type]
    for lacking in (3 * LARGEST, 2 * LARGEST, LARGEST, 300_000, SMALLEST - 1, 0, 0, 10):
        water.expect(lacking)
    assert sock.marks == [LARGEST, 300_000, 1]


def test_a_closed_socket_is_left_to_the_transport() -> None:
    sock = socket.socket()
    sock.close()
    water = ReceiveLowWater(sock)
    water.expect(LARGEST)  # no exception: the transport reports the closed socket
    water.expect(0)
