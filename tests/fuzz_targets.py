"""Coverage-guided fuzz targets (atheris, libFuzzer) for the readers of untrusted files.

    python tests/fuzz_targets.py jsonl  [libFuzzer flags] [CORPUS_DIR ...]
    python tests/fuzz_targets.py import [libFuzzer flags] [CORPUS_DIR ...]

``jsonl``: the session reader and validator (``promem extract``'s input, the service's sessions): every line
becomes a session or an :class:`~promem_fast.errors.InputError`, and either can be written as UTF-8 (a reject
record, a log line). ``import``: the store export reader (``promem import``) against a real store file; any
exception other than an InputError naming the line is a crash. The suite runs a short smoke of each
(``tests/test_fuzz_readers.py``); ``make fuzz`` runs them longer.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["promem_fast"]):
    from promem_fast.config import EngineConfig
    from promem_fast.errors import InputError
    from promem_fast.io import parse_lines
    from promem_fast.store import MemoryStore
    from promem_fast.persistence.exchange import import_store


def _writable(error: InputError) -> None:
    """An error must be printable and storable as a reject record: a crash here is a crash of the reader."""
    str(error).encode("utf-8")
    json.dumps(error.to_dict(), ensure_ascii=False).encode("utf-8")


def jsonl_target(data: bytes) -> None:
    lines = ((number, raw + b"\n") for number, raw in enumerate(data.split(b"\n"), start=1))
    for item in parse_lines(lines, "fuzz.jsonl", max_turn_chars=2000):
        if isinstance(item, InputError):
            _writable(item)
        else:
            json.dumps(item.to_dict(), ensure_ascii=False).encode("utf-8")


class _Rollback(Exception):
    """Leaves each input's transaction without a trace, so every input meets the same store."""


class ImportTarget:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="promem-fuzz-"))
        self.input = self.folder / "export.jsonl"
        self.store = MemoryStore(self.folder / "store.db", EngineConfig.profile("scripted"), update_judge="off")

    def __call__(self, data: bytes) -> None:
        self.input.write_bytes(data)
        try:
            with self.store.db.transaction() as db:
                try:
                    import_store(db, self.input, self.store.check_dim)
                except InputError as error:
                    assert error.line is not None, error
                    _writable(error)
                raise _Rollback
        except _Rollback:
            pass


TARGETS = {"jsonl": jsonl_target, "import": ImportTarget}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags] [CORPUS_DIR ...]")
    name = argv.pop(1)
    target = TARGETS[name]() if name == "import" else TARGETS[name]
    atheris.Setup(argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
