# tts-knee: `make demo` shows it, `make test` proves it. Both bootstrap .venv by themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TARGET ?= piper

.PHONY: install test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[piper,grpc,test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) -m tts_knee.testbed.demo --target $(TARGET)

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) runs .pytest_cache
