# Two commands set up a fresh machine: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv fast clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	rm -rf results/demo
	$(BIN)/infermeter run --requests 200 --concurrency 16 --out results/demo

test: $(STAMP)
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the twin's hot modules compiled with mypyc (setup.py), in .fast/: PYTHONPATH=.fast puts it first
fast: $(STAMP)
	rm -rf .fast build/mypyc
	mkdir -p .fast
	cp -r src/infermeter .fast/
	find .fast -name __pycache__ -prune -exec rm -rf {} +
	INFERMETER_MYPYC=1 $(BIN)/python setup.py -q build_ext --build-lib .fast --build-temp build/mypyc

clean:
	rm -rf $(VENV) .fast results build *.egg-info
