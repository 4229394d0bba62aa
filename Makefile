# Two commands a fresh machine needs: `make demo` and `make test`.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-stress venv bench docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/dlsched demo

# pytest exits 5 when it collected nothing: that is a failure here, never a silent pass.
# Workers (pytest-xdist): most tests wait on real processes, so more workers than cores keep both busy; a file's
# tests stay on one worker (--dist loadfile: all Ray tests are one file, tests/conftest.py), handed out in
# collection order (--no-loadscope-reorder: tests/conftest.py puts the longest files first). TEST_WORKERS=0 runs
# in one process.
TEST_WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests
test: $(STAMP)
	$(PYTEST); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests" >&2; exit 1; fi; exit $$rc

# docs/cli.md is generated from the CLI itself; tests/test_docs.py fails when it is stale.
docs: $(STAMP)
	$(BIN)/python -m dlsched.cli_reference > docs/cli.md

# The suite 3 times under CPU load (two busy loops: a busy 2-core CI machine); fails if any run fails.
# The busy loops are this target's children, killed by PID on every exit path.
STRESS_RUNS ?= 3
test-stress: $(STAMP)
	@$(BIN)/python -c 'while True: pass' & b1=$$!; \
	 $(BIN)/python -c 'while True: pass' & b2=$$!; \
	 trap 'kill $$b1 $$b2 2>/dev/null' EXIT INT TERM; \
	 fails=0; \
	 for i in $$(seq 1 $(STRESS_RUNS)); do \
	   echo "== stress run $$i/$(STRESS_RUNS) (2 busy loops: $$b1 $$b2)"; \
	   $(PYTEST); rc=$$?; \
	   if [ $$rc -ne 0 ]; then echo "== stress run $$i failed (pytest exit $$rc)" >&2; fails=$$((fails + 1)); fi; \
	 done; \
	 echo "== $$(( $(STRESS_RUNS) - fails ))/$(STRESS_RUNS) runs passed under load"; \
	 [ $$fails -eq 0 ]

bench: $(STAMP)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info report demo-report ensemble-report
