# Two commands a fresh machine needs: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv bench docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched demo

# pytest exits 5 when it collected nothing: that is a failure here, never a silent pass.
test: $(STAMP)
	$(BIN)/python -m pytest -q tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# docs/cli.md is generated from the CLI itself; tests/test_docs.py fails when it is stale.
docs: $(STAMP)
	$(BIN)/python -m dlsched.cli_reference > docs/cli.md

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info report demo-report
