# tts-knee: `make demo` shows it, `make test` proves it. Both bootstrap .venv by themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TARGET ?= piper

.PHONY: install test test-unit typecheck docs demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[piper,grpc,asr,test]'
	$(PY) -m pip install -q --no-deps 'Resemblyzer==0.1.4'  # its speaker encoder's weights only (audio.speaker): no torch
	touch $(STAMP)

# The suite in two passes: first every test that does not time the client to the millisecond,
# on two workers (a file's tests on one worker, sharing its servers), then those that do
# (marked `alone`: against the simulator's log, tight tolerances) with the machine to themselves.
# Both passes always run; pytest's "no tests ran" (5) in a pass is not a failure. For one pass
# or one file: PYTEST_ARGS='tests/integration/test_sim.py'.
PYTEST := $(PY) -m pytest -q -rs --durations=25
test: $(STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(MYPY)
	$(DOCS_BUILD)
	@status=0; \
	$(PYTEST) -n 2 --dist loadfile -m 'not alone' $(PYTEST_ARGS) || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	$(PYTEST) -m alone $(PYTEST_ARGS) || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	exit $$status

# The type checker (pyproject's [tool.mypy]) over the installed package tts_knee and the
# benchmarks (bench/). mypy has no package-dir mapping: build/mypy/tts_knee/ links to the folders
# that are the package's parts, and mypy checks the package there (its messages name those links:
# open them as the files they are).
PARTS := analysis audio collectors configs dashboard locustfiles runformat testbed
MYPY_TREE := build/mypy/tts_knee
MYPY = mkdir -p $(MYPY_TREE) \
	&& for f in tts_knee/*.py; do ln -sfn ../../../$$f $(MYPY_TREE)/; done \
	&& for d in $(PARTS); do ln -sfn ../../../$$d $(MYPY_TREE)/$$d; done \
	&& $(VENV)/bin/mypy
typecheck: $(STAMP)
	$(MYPY)

# The unit tests alone (tests/unit/: in-process, no server started), in about a minute.
test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# The manual (docs/, mkdocs): its option and field references made from runformat first; --strict
# fails on a broken link, a missing page or an unknown anchor.
DOCS_BUILD := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
docs: $(STAMP)
	$(PY) -c "from tts_knee.runformat.options import reference; print(reference(), end='')" > docs/options.md
	$(PY) -c "from tts_knee.runformat.check import reference; print(reference(), end='')" > docs/fields.md
	$(DOCS_BUILD)
	@echo "the manual: site/index.html"

demo: $(STAMP)
	$(PY) -m tts_knee.testbed.demo --target $(TARGET)

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache build/mypy site
