# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.vevo-installed
DEMO_BASE ?= runs/demo
# an earlier demo is kept: the first of runs/demo, runs/demo-2, runs/demo-3, ... that does not exist yet
ifeq ($(origin DEMO_OUT), undefined)
DEMO_OUT := $(shell d='$(DEMO_BASE)'; n=1; while [ -e "$$d" ]; do n=$$((n + 1)); d='$(DEMO_BASE)'-$$n; done; echo "$$d")
endif

.PHONY: test test-vllm demo install bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# CPU machines: install the CPU torch wheel first so nothing pulls a CUDA build.
	@if ! command -v nvidia-smi >/dev/null 2>&1; then $(PY) -m pip install -q torch==2.13.0; fi
	$(PY) -m pip install -q -e '.[dev]'
	@# the fast sampler's C++ decode step, built once here rather than in the first run (the Python step where it cannot)
	@$(PY) -c 'from proposer.backends import native_step; native_step.load()'
	@touch $(STAMP)

install: $(STAMP)

# -X faulthandler: a crash after the last test (at the interpreter's exit) still prints every thread's stack
test: $(STAMP)
	$(PY) -X faulthandler -m pytest -q

test-vllm:
	scripts/vllm_ci.sh

demo: $(STAMP)
	@if [ -e '$(DEMO_OUT)' ]; then \
		echo "make demo: $(DEMO_OUT) already exists; remove it or give another DEMO_OUT=" >&2; exit 2; fi
	@if [ '$(DEMO_OUT)' != '$(DEMO_BASE)' ]; then \
		echo "make demo: writing to $(DEMO_OUT) ($(DEMO_BASE) holds an earlier demo, kept)"; fi
	$(VENV)/bin/vevo problems list --suite pbe
	@# the same problems and seed, untrained and VPO-trained, then one overlaid plot; both sample G = 8 per prompt
	@# (the trained proposer's default train.group), and VPO takes a step after every iteration (the default)
	$(VENV)/bin/vevo run --suite pbe --proposer tiny --iterations 120 --islands 2 --answers 4 --group 8 \
		--seed 0 --train none --out $(DEMO_OUT)/none
	$(VENV)/bin/vevo run --suite pbe --proposer tiny --iterations 120 --islands 2 --answers 4 --group 8 \
		--seed 0 --train vpo --out $(DEMO_OUT)/vpo
	$(VENV)/bin/vevo curves none=$(DEMO_OUT)/none vpo=$(DEMO_OUT)/vpo --out $(DEMO_OUT)/curves.png --csv
	$(VENV)/bin/vevo report none=$(DEMO_OUT)/none vpo=$(DEMO_OUT)/vpo --out $(DEMO_OUT)/report
	@echo "open $(DEMO_OUT)/curves.png and $(DEMO_OUT)/report/index.html; live view: $(VENV)/bin/vevo ui none=$(DEMO_OUT)/none vpo=$(DEMO_OUT)/vpo"

bench: $(STAMP)
	$(PY) bench/perf/eval_throughput.py

# build litter only: runs/ holds your campaigns (the README's --out runs/mine) and is never removed by make
clean:
	rm -rf .pytest_cache
	@echo "make clean: removed .pytest_cache; runs/ (your campaigns) is kept"
