#!/usr/bin/env bash
# The package as a user gets it: `python -m build` makes the sdist and, from it, the wheel (native core
# compiled); the wheel goes into a fresh virtual environment and runs from an empty folder, so only what the
# wheel carries (the C++ extension, the data files, the `promem` script) can be used: `promem --help` and a
# scripted extraction of the shipped sample sessions.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf dist
"$PY" -m build --outdir dist . >/dev/null
ls dist/promem_fast-*.tar.gz dist/promem_fast-*.whl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q dist/promem_fast-*.whl 2>&1 | grep -v "^WARNING: Location" || true
"$work/venv/bin/python" -c "import promem_fast" 
cd "$work"
"$work/venv/bin/promem" --help >/dev/null
sessions=$("$work/venv/bin/python" -c "from importlib.resources import files; print(files('promem_fast') / 'data' / 'demo_sessions.jsonl')")
case "$sessions" in "$work"/venv/*) ;; *) echo "sample sessions not read from the installed wheel: $sessions"; exit 1 ;; esac
"$work/venv/bin/promem" extract "$sessions" -o graphs.jsonl --profile scripted --no-timings >extract.log 2>&1 \
    || { cat extract.log; exit 1; }
"$work/venv/bin/python" - <<'PY'
import json
from promem_fast import _native  # the compiled core shipped in the wheel
graphs = [json.loads(line) for line in open("graphs.jsonl", encoding="utf-8")]
assert len(graphs) == 4 and all(g["nodes"] for g in graphs), [len(g["nodes"]) for g in graphs]
assert _native.__file__.startswith(__import__("sys").prefix), _native.__file__
print(f"wheel check: promem --help and a scripted extraction of {len(graphs)} sessions "
      f"({sum(len(g['nodes']) for g in graphs)} nodes) from the installed wheel")
PY
