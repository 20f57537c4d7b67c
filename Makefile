# `make run`, `make test` and `make check` do all the set-up on a fresh machine.
# bash, for `set -o pipefail` in the mypy recipe.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
MLAB := $(VENV)/bin/mlab
PLUGINS := $(sort $(dir $(wildcard plugins/*/*/pyproject.toml)))
LITE_TASKS := lite/digits lite/diabetes lite/wine
DEMO_DIR ?= runs/demo
# mypy cannot map setuptools' package-dir (core/ is mlab.core): it reads them through links here (see pyproject).
MYPY_PATH_DIR := build/mypy-path
STRESS_CPUS ?= 4
STRESS_RUNS ?= 1
TEST_WORKERS ?= 2
# pip's own output in `make setup`; `make run` clears it, to show each package as pip collects it
PIP_QUIET ?= -q

.PHONY: setup run test test-fast test-shared check lint mypy stress-test stress-tools bench clean browser sandbox-tools \
	gpu-check cgroup2-check cli-agents

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(wildcard plugins/*/*/pyproject.toml) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_QUIET) --upgrade pip setuptools wheel
	# The CPU build; an unpinned torch would pull several GB of CUDA packages.
	$(PY) -m pip install $(PIP_QUIET) torch==2.13.0
	# ray: so the two-node cluster test runs rather than skips (Ray needs no torch: the CPU build above stays);
	# train (TRL, no torch of its own either): so the README's training example runs.
	$(PY) -m pip install $(PIP_QUIET) -e '.[test,report,ray,inspect,train]' $(addprefix -e ,$(PLUGINS))
	# The task pack's light extras, so the tests of its image and language-model tasks run too.
	$(PY) -m pip install $(PIP_QUIET) -e 'plugins/tasks/mlagentbench[vision,text]'
	# Program agents' programs from their registries (pinned in each plugin's [agent] extra), so their tests run.
	$(PY) -m pip install $(PIP_QUIET) -e 'plugins/agents/smolagents[agent]' -e 'plugins/agents/miniswe[agent]'
	touch $@

# Prints progress only, a line as each install stage starts and one per package pip collects, builds and installs
# (a fresh set-up takes minutes, a stage under load once 889 s): pip's and setuptools' whole output goes to
# SETUP_LOG, shown when the set-up fails.
run: SETUP_LOG ?= build/setup.log
run:
	@mkdir -p $(dir $(SETUP_LOG))
	@echo "setting up $(VENV) (log: $(SETUP_LOG))"
	@set -o pipefail; start=$$(date +%s); \
	$(MAKE) --no-print-directory setup PIP_QUIET=--progress-bar=off 2>&1 | tee $(SETUP_LOG) | \
	while IFS= read -r line; do \
		case "$$line" in \
			*"pip install"*|*" -m venv "*) line="$${line#$(PY) -m }";; \
			"Collecting "*) line="  collecting $${line#Collecting }";; \
			"  Building wheel for "*": started") line="$${line%: started}"; \
				line="  building wheel for $${line#  Building wheel for }"; line="$${line% (*)}";; \
			"Installing collected packages: "*) line="  installing $${line#Installing collected packages: }";; \
			*) continue;; \
		esac; echo "  $$(( $$(date +%s) - start )) s: $${line:0:88}"; \
	done || { tail -n 30 $(SETUP_LOG); echo "set-up failed; the whole log: $(SETUP_LOG)"; exit 1; }
	@echo "set-up done"
	@rm -rf $(DEMO_DIR)
	@for task in $(LITE_TASKS); do \
		echo "== $$task: baseline, then the baseline agent in $(DEMO_DIR)/$$(basename $$task)"; \
		$(MLAB) baseline $$task --runs 1 && \
		$(MLAB) run --task $$task --agent baseline --run-dir $(DEMO_DIR)/$$(basename $$task) || exit 1; \
	done
	@$(MLAB) eval $(DEMO_DIR)/*

# Every tier: fast, slow (training, whole bench loops, browser, Ray, sandbox stress), shared_data (which skips
# with a reason when ../shared/data is absent) and timing, on half again as many pytest-xdist workers as
# TEST_WORKERS, as test-fast's (docker, Ray, litellm and timing cases grouped on one worker each:
# tests/conftest.py). The timing cases time code beside the other workers' cases (their own CPU load only fills
# cores those leave idle). Two quiet cores, 2026-12-04: 943 s on a fresh clone (1,057 s with its set-up), the
# machine 95% busy; a machine half as fast took 2,101-2,188 s. The slowest cases are listed at the end, and the
# machine's busy share: what to look at first when the suite outgrows its time.
test: setup browser sandbox-tools cli-agents
	$(PY) -m pytest -q -p no:cacheprovider -n $$(( $(TEST_WORKERS) * 3 / 2 )) --dist loadgroup --durations=25

# The quick tier for the edit-test loop, on half again as many pytest-xdist workers as TEST_WORKERS: about a fifth
# of its time waits on sandboxes and sleeps (two quiet cores, 2026-12-04: 54 s, 1,315 cases; 117-124 s on a machine
# half as fast; cases over ~2 s are in the slow tier).
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -n $$(( $(TEST_WORKERS) * 3 / 2 )) --dist loadgroup -m "not slow and not shared_data"

# Only the tier that needs ../shared/data (the original competitions' files).
test-shared: setup
	$(PY) -m pytest -q -p no:cacheprovider -m shared_data

# Lint and type check, as configured in pyproject.toml ([tool.ruff], [tool.mypy]); .pre-commit-config.yaml runs the same.
# Both run even when the first finds something; the target fails if either did.
check: setup
	@status=0; $(MAKE) --no-print-directory lint || status=1; $(MAKE) --no-print-directory mypy || status=1; exit $$status

lint: setup
	$(VENV)/bin/ruff check .

mypy: setup
	@mkdir -p $(MYPY_PATH_DIR)/mlab
	@ln -sfn ../../../core $(MYPY_PATH_DIR)/mlab/core
	@ln -sfn ../../../cli $(MYPY_PATH_DIR)/mlab/cli
	@# A plugin missing from [tool.mypy]'s mypy_path and packages would go unchecked without a word.
	@for dir in $(patsubst %/,%,$(PLUGINS)); do \
		grep -q "/$$dir\"" pyproject.toml || { echo "pyproject.toml [tool.mypy] mypy_path lacks $$dir"; exit 1; }; \
		for init in $$dir/*/__init__.py; do pkg=$$(basename $$(dirname $$init)); \
			grep -q "\"$$pkg\"" pyproject.toml || { echo "pyproject.toml [tool.mypy] packages lacks $$pkg"; exit 1; }; \
		done; \
	done
	@# Paths through the links are shown as the files' own (build/mypy-path/mlab/core/x.py is core/x.py).
	set -o pipefail; $(VENV)/bin/mypy | sed 's#$(MYPY_PATH_DIR)/mlab/##'

# `make test` while stress-ng loads every core (STRESS_CPUS workers), STRESS_RUNS times in a row; stops at the
# first failure and prints each run's wall time. One run takes over an hour on two cores, so three may outlast a
# session: each run's start and end go to STRESS_LEDGER with the commit (+changes when the tree differs from it),
# and the passes in a row at this commit are counted from it (a run cut off, with a start and no end, counts
# neither way; a failure starts the count again).
STRESS_LEDGER ?= build/stress-runs.tsv

stress-test: setup browser sandbox-tools stress-tools cli-agents
	@mkdir -p $(dir $(STRESS_LEDGER)); \
	rev=$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD || echo +changes); \
	stress-ng --cpu $(STRESS_CPUS) --timeout 4h --quiet & stress=$$!; \
	trap 'kill $$stress 2>/dev/null; wait $$stress 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	for run in $$(seq $(STRESS_RUNS)); do \
		start=$$(date +%s); \
		printf '%s\t%s\tstarted\t\n' "$$(date -u +%FT%TZ)" "$$rev" >> $(STRESS_LEDGER); \
		$(MAKE) --no-print-directory test; rc=$$?; \
		wall=$$(( $$(date +%s) - start )); \
		printf '%s\t%s\texit %s\t%ss\n' "$$(date -u +%FT%TZ)" "$$rev" $$rc $$wall >> $(STRESS_LEDGER); \
		echo "stress-test run $$run/$(STRESS_RUNS): make test exited $$rc after $${wall}s wall time" \
			"beside stress-ng --cpu $(STRESS_CPUS); passes in a row at $$rev: $$(awk -F'\t' -v rev=$$rev \
			'$$2 == rev && $$3 == "exit 0" { n++ } $$2 == rev && $$3 ~ /^exit [1-9]/ { n = 0 } END { print n + 0 }' \
			$(STRESS_LEDGER)) ($(STRESS_LEDGER))"; \
		[ $$rc = 0 ] || exit $$rc; \
	done

stress-tools:
	@command -v stress-ng >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; } || \
		{ echo "stress-ng is missing and cannot be installed here (needs root and apt-get)"; exit 1; }

# Headless Chromium for the HTML report test; without it (not root, no apt) that test skips with a reason.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
		echo "chromium not installed: the HTML report browser test will be skipped"

# bubblewrap for the bwrap sandbox, and Docker's engine (Debian's docker.io) for the docker sandbox, whose tests
# start a daemon of their own; without them (not root, no apt) their tests skip with a reason (under CI=true the
# docker ones fail instead).
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "bubblewrap not installed: the bwrap sandbox tests will be skipped"
	@command -v dockerd >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null; } || \
		echo "docker.io not installed: the docker sandbox tests will be skipped (under CI=true, fail)"

# Real CLI agents from npm (Codex CLI, Claude Code) at the versions their plugins pin (NPM = "..." in each
# agent.py), into CLI_AGENTS_DIR, which their plugins look in (MLAB_CLI_AGENTS moves it); each is reinstalled only
# when its pin changes. Their programs run only inside a run's sandbox, with no network and their opt-outs set.
CLI_AGENTS_DIR ?= build/cli-agents
CLI_AGENTS := codex claude_code

cli-agents:
	@command -v npm >/dev/null 2>&1 || { echo "npm is missing: the CLI agents (Codex, Claude Code) need Node's npm"; exit 1; }
	@for name in $(CLI_AGENTS); do \
		pin=$$(sed -n 's/^NPM = "\(.*\)"$$/\1/p' plugins/agents/$$name/mlab_agent_$$name/agent.py); \
		[ -n "$$pin" ] || { echo "plugins/agents/$$name: no NPM pin"; exit 1; }; \
		[ "$$(cat $(CLI_AGENTS_DIR)/$$name/.installed 2>/dev/null)" = "$$pin" ] && continue; \
		echo "installing $$pin into $(CLI_AGENTS_DIR)/$$name"; \
		npm install --prefix $(CLI_AGENTS_DIR)/$$name --no-audit --no-fund --no-update-notifier --loglevel=error \
			"$$pin" >/dev/null || exit 1; \
		echo "$$pin" > $(CLI_AGENTS_DIR)/$$name/.installed; \
	done

bench: setup
	$(PY) benchmarks/list_plugins_time.py
	$(PY) benchmarks/cli_start.py
	$(PY) benchmarks/step_overhead.py
	$(PY) benchmarks/snapshot_scale.py
	$(PY) benchmarks/trace_write.py
	$(PY) benchmarks/sandbox_overhead.py
	$(PY) benchmarks/agent_prompt_tokens.py
	$(PY) benchmarks/bench_parallel.py
	$(PY) benchmarks/bench_eval.py
	$(PY) benchmarks/endpoint_connections.py

# On a machine with one NVIDIA GPU, from a fresh clone: a CUDA training step as agent code in each sandbox (local,
# bwrap, docker; those not available here are skipped), the cifar10 starter for one epoch and llama-inference's
# timing on a tiny model, then one table. benchmarks/gpu_check/check.py exits 0 passed, 1 failed, 3 no GPU (one
# line, nothing set up); make shows a non-zero code as "Error N" and itself exits 2. It sets up a venv of its own,
# GPU_VENV, over the machine's CUDA torch (--system-site-packages, never the CPU pin of `setup`). GPU_WHEELS=DIR:
# what such a machine lacks (pydantic, tenacity, setuptools) from that folder of wheels, offline, else from PyPI;
# DIR/debs/bubblewrap_*.deb is unpacked (not installed) when bwrap is missing. GPU_CHECK_ARGS: check.py's options
# (--device cpu: a dry run without a GPU; --log-dir DIR: every check's output).
GPU_VENV ?= build/gpu-venv
GPU_WHEELS ?=
GPU_CHECK_ARGS ?=

gpu-check:
	@PYTHON="$(PYTHON)" GPU_VENV="$(GPU_VENV)" GPU_WHEELS="$(GPU_WHEELS)" bash benchmarks/gpu_check/run.sh $(GPU_CHECK_ARGS)

# The cgroup tests on a VM whose only hierarchy is cgroup v2 (this project's machines are v1); see
# benchmarks/cgroup2_check/vm.py. QEMU, Debian's kernel (with 9p) and a static busybox come from apt.
cgroup2-check: setup
	@{ command -v qemu-system-x86_64 && command -v cpio && ls /boot/vmlinuz-*-amd64 | grep -v cloud && \
		test -x /bin/busybox && ! grep -q ld-linux /bin/busybox; } >/dev/null 2>&1 || { \
		[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-x86 \
			linux-image-amd64 busybox-static cpio >/dev/null; } || true
	$(PY) benchmarks/cgroup2_check/vm.py $(CGROUP2_CHECK_ARGS)

clean:
	rm -rf $(VENV) runs build/mypy-path build/mypy-cache build/ruff-cache
