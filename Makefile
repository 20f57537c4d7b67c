# `make run` and `make test` do all the set-up on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MLAB := $(VENV)/bin/mlab
PLUGINS := $(sort $(dir $(wildcard plugins/*/*/pyproject.toml)))
LITE_TASKS := lite/digits lite/diabetes lite/wine
DEMO_DIR ?= runs/demo

.PHONY: setup run test test-shared bench clean browser sandbox-tools

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(wildcard plugins/*/*/pyproject.toml) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	# The CPU build; an unpinned torch would pull several GB of CUDA packages.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,report]' $(addprefix -e ,$(PLUGINS))
	# The task pack's light extras, so the tests of its image and language-model tasks run too.
	$(PY) -m pip install -q -e 'plugins/tasks/mlagentbench[vision,text]'
	touch $@

run: setup
	rm -rf $(DEMO_DIR)
	for task in $(LITE_TASKS); do \
		$(MLAB) baseline $$task --runs 1 && \
		$(MLAB) run --task $$task --agent baseline --run-dir $(DEMO_DIR)/$$(basename $$task) || exit 1; \
	done
	$(MLAB) eval $(DEMO_DIR)/*

test: setup browser sandbox-tools
	$(PY) -m pytest -q -p no:cacheprovider

# Headless Chromium for the HTML report test; without it (not root, no apt) that test skips with a reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
		echo "chromium not installed: the HTML report browser test will be skipped"

# bubblewrap for the bwrap sandbox; without it (not root, no apt) its tests skip with a reason.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "bubblewrap not installed: the bwrap sandbox tests will be skipped"

bench: setup
	$(PY) benchmarks/list_plugins_time.py
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/agent_prompt_tokens.py
	$(PY) benchmarks/bench_parallel.py
	$(PY) benchmarks/bench_eval.py

clean:
	rm -rf $(VENV) runs
