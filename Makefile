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

# The type check runs beside the tests (its report printed after them); the tests run on TEST_WORKERS
# pytest-xdist workers (a file, or a group of files sharing a heavy resource, per worker: tests/conftest.py).
# TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 3
test: $(STAMP)
	@set +e; $(BIN)/python -m mypy > $(VENV)/mypy.log 2>&1 & mypy_pid=$$!; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); tests_rc=$$?; \
	wait $$mypy_pid; mypy_rc=$$?; echo "--- mypy (strict, src/infermeter) ---"; cat $(VENV)/mypy.log; \
	if [ $$tests_rc -ne 0 ]; then exit $$tests_rc; fi; exit $$mypy_rc

# the twin's hot modules compiled with mypyc (setup.py), in .fast/: PYTHONPATH=.fast puts it first
fast: $(STAMP)
	rm -rf .fast build/mypyc
	mkdir -p .fast
	cp -r src/infermeter .fast/
	find .fast -name __pycache__ -prune -exec rm -rf {} +
	INFERMETER_MYPYC=1 $(BIN)/python setup.py -q build_ext --build-lib .fast --build-temp build/mypyc

clean:
	rm -rf $(VENV) .fast results build *.egg-info
