"""`klamm` command line: `klamm serve` runs a broker in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import gc
import typing
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from klamm.cli import tools
from klamm.cli.collector import SlowCollectionFreezer

if typing.TYPE_CHECKING:  # the tools are clients: they must not pay for importing the broker
    from klamm.broker.broker import Broker
    from klamm.config.broker import BrokerConfig

log = logging.getLogger("klamm.cli")


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="klamm", description="A Kafka-compatible broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run a broker in the foreground")
    serve.add_argument("--config", type=Path, help="a server.properties file (Kafka's property names)")
    serve.add_argument("--override", action="append", type=_parse_override, default=[], metavar="KEY=VALUE",
                       help="set a property, over the config file (repeatable)")
    serve.add_argument("--event-loop", choices=("asyncio", "uvloop"), default=os.environ.get("KLAMM_EVENT_LOOP", "asyncio"),
                       help="asyncio's own loop sends fetches with os.sendfile (default); uvloop copies them")
    serve.add_argument("--log-level", default=os.environ.get("KLAMM_LOG_LEVEL", "INFO"))
    tools.add_parsers(commands)
    return parser


def load_config(config_path: Path | None, overrides: list[tuple[str, str]]) -> BrokerConfig:
    from klamm.config.broker import BrokerConfig
    from klamm.config.properties import load_properties

    props = load_properties(config_path) if config_path else {}
    props.update(dict(overrides))
    return BrokerConfig.from_properties(props)


# The GIL switch interval of `klamm serve` (CPython's default is 5 ms). A background thread running pure Python
# (the log cleaner) keeps the GIL after the event loop's thread gives it up for a syscall, and the loop then
# waits up to a whole interval to get it back, after every send/recv: end-to-end p99 at 1,000 records/s went
# from ~5 ms to 69-137 ms while the cleaner ran. At 0.5 ms it stays under 5 ms, with throughput unchanged
# (BENCHMARKS.md, latency). Only the `klamm serve` process sets it: the interval is process-wide, and a
# program embedding a Broker owns its own.
SWITCH_INTERVAL_S = 0.0005


async def serve(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    _freeze_startup_objects()
    freezer = SlowCollectionFreezer()
    freezer.install()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    loading = asyncio.ensure_future(_load_message_types(broker.supported_versions()))
    try:
        await stop.wait()
    finally:
        loading.cancel()
        await broker.stop()
        freezer.uninstall()


async def _load_message_types(versions: dict[int, tuple[int, int]]) -> None:
    """Make the message types of every version the broker serves, in a background thread, freezing them too.

    Otherwise the first request of each API version imports its kio classes on the loop: DeleteTopics' took
    9 ms in a latency run, a Kafka 4.0-removed version up to 77 ms. Each version's classes are frozen as soon as
    they are made: the thread's allocations bring on full collections, which hold the interpreter lock, and so the
    loop, while they walk every type made so far (15-40 ms, once or twice in a broker's first seconds)."""
    from klamm.broker.background import background_executor
    from klamm.protocol.api import load_message_types

    stopping = threading.Event()
    executor = background_executor("klamm-message-types")
    try:
        made = await asyncio.get_running_loop().run_in_executor(executor, load_message_types, versions,
                                                                stopping.is_set, gc.freeze)
    finally:
        stopping.set()  # cancelled: the thread stops at the next version, and the process need not wait for it
        executor.shutdown(wait=False)
    log.debug("message types of %d API versions made", made)


def _freeze_startup_objects() -> None:
    """Leave what start-up built (modules, configs, the metadata image, the logs) out of the cyclic collector's
    full passes: they live as long as the process, and scanning them made each full collection a pause of
    ~20 ms on the event loop (a p99.9 latency). Garbage is collected first so that none is frozen with them.
    Only the `klamm serve` process does this: an embedding program owns its own collector."""
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if tools.is_tool(args):
        return tools.run(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from klamm.broker.broker import Broker
    from klamm.config.errors import ConfigError
    from klamm.controller.meta_properties import MetaPropertiesError

    try:
        config = load_config(args.config, args.override)
        broker = Broker(config)
    except (ConfigError, OSError, ValueError) as exc:
        print(f"klamm: invalid configuration: {exc}", file=sys.stderr)
        return 2
    if args.event_loop == "uvloop":
        import uvloop

        runner = uvloop.run
    else:
        runner = asyncio.run
    try:
        runner(serve(broker))
    except MetaPropertiesError as exc:  # the config disagrees with the data (cluster.id, node.id)
        print(f"klamm: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the listener's port is taken
        print(f"klamm: cannot serve: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
