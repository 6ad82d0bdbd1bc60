"""Partition storage: segments, indexes, producer state, checkpoints and the log manager.

Imports only klamm.protocol and klamm.config; blocking file I/O, no asyncio.
"""

from klamm.storage.config import LogConfig
from klamm.storage.log import AppendResult, InvalidAppendOffset, Log, ReadResult
from klamm.storage.log_manager import LogManager

__all__ = ["AppendResult", "InvalidAppendOffset", "Log", "LogConfig", "LogManager", "ReadResult"]
