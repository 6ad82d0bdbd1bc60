"""ReceiveLowWater: a socket's receive mark never asks for more than the frame still lacks."""

from __future__ import annotations

import socket

from hypothesis import given
from hypothesis import strategies as st

from klamm.broker.low_water import LARGEST, SMALLEST, ReceiveLowWater


class RecordingSocket:
    def __init__(self, buffer: int = 0) -> None:
        self.marks: list[int] = []
        self.buffers: list[int] = []
        self.buffer = buffer  # SO_RCVBUF as getsockopt reads it: twice what was set

    def getsockopt(self, level: int, option: int) -> int:
        assert (level, option) == (socket.SOL_SOCKET, socket.SO_RCVBUF)
        return self.buffer

    def setsockopt(self, level: int, option: int, value: int) -> None:
        assert level == socket.SOL_SOCKET and option in (socket.SO_RCVLOWAT, socket.SO_RCVBUF)
        if option == socket.SO_RCVBUF:
            self.buffers.append(value)
            self.buffer = 2 * value
        else:
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


def test_a_locked_buffer_is_grown_once_for_a_mark_it_cannot_hold_and_never_shrunk() -> None:
    sock = RecordingSocket(buffer=2 * 100 * 1024)  # socket.receive.buffer.bytes=102400, doubled by the kernel
    water = ReceiveLowWater(sock, locked=True)  # type: ignore[arg-type]
    for lacking in (90_000, 0, 600_000, 0, 3 * LARGEST, 200_000, 0):
        water.expect(lacking)
    assert sock.buffers == [LARGEST]
    assert sock.marks == [90_000, 1, 600_000, 1, LARGEST, 200_000, 1]


@given(st.lists(st.integers(min_value=0, max_value=4 * LARGEST), max_size=30))
def test_a_buffer_the_kernel_sizes_or_one_set_large_enough_is_never_set(lacking: list[int]) -> None:
    for sock, locked in ((RecordingSocket(), False), (RecordingSocket(buffer=4 * LARGEST), True)):
        water = ReceiveLowWater(sock, locked=locked)  # type: ignore[arg-type]
        for value in lacking:
            water.expect(value)
        assert sock.buffers == []
