"""Coverage-guided fuzzing of klamm's decoders with atheris (libFuzzer for Python): `make fuzz`.

    .venv/bin/python tests/fuzz/atheris_main.py [libFuzzer flags] [corpus dirs]
    .venv/bin/python tests/fuzz/atheris_main.py .cache/fuzz/crash-...   # replay one input

Every input goes through tests/fuzz/harness.py `one_input`. klamm and kio (the request codecs) are
instrumented, so libFuzzer sees which branches an input reaches and keeps the inputs that reach new ones.
An exception out of the harness is a crash, an input running past -timeout a hang: libFuzzer writes the
input to its -artifact_prefix and stops. Seed it with tests/fuzz/corpus, and give it a scratch directory
first (libFuzzer adds the inputs it finds to the first directory it is given), as `make fuzz` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `tests.fuzz.harness`

with atheris.instrument_imports(include=["klamm", "kio"]):
    from tests.fuzz.harness import one_input


def test_one_input(data: bytes) -> None:
    one_input(data)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
