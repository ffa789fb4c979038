# Every target creates .venv and installs what it needs; run them on a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-llama llama-server lint typecheck unit unit-fast docs docs-ref readme-chart fuzz bench-trim bench-probes bench clean

$(PY):
	@echo "==> creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# pip prints each package as it goes: the first install takes a few minutes.
$(STAMP): $(PY) pyproject.toml
	@echo "==> installing contextwarden with the dev extra into $(VENV) (first run: a few minutes)"
	$(PY) -m pip install --progress-bar on -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "==> running the demo: a 300-turn coding-agent session, no network, no API key"
	$(PY) -m contextwarden demo
	@echo "==> the commands above run as printed from this directory; or first: source $(VENV)/bin/activate"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/ruff format --check src tests benchmarks tools

typecheck: $(STAMP)
	$(VENV)/bin/mypy

unit: $(STAMP)
	$(PY) -m pytest -q

# The fast tier: no property, fuzz, real-server, benchmark or docs tests (`make unit` runs them all).
unit-fast: $(STAMP)
	$(PY) -m pytest -q -m 'not slow'

# The documentation site (mkdocs.yml, docs/) into site/; warnings fail the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The README's picture: the demo report's utilization chart (Playwright with Debian's chromium).
readme-chart: $(STAMP)
	$(PY) tools/render_chart.py

# Rewrite the generated reference pages and benchmark tables (a test checks they are current).
docs-ref: $(STAMP)
	$(PY) tools/gen_docs.py

test: lint typecheck unit

# Property and fuzz tests with random seeds and FUZZ_SCALE times their budget (`make test` runs them
# derandomized). The log (with each failure's falsifying input) and the fuzz report go to fuzz-out/;
# failing inputs are kept in .hypothesis/ and tried first next time. Turn each into an @example or a
# regression test in the suite.
FUZZ_SCALE ?= 10
fuzz: $(STAMP)
	mkdir -p fuzz-out
	HYPOTHESIS_PROFILE=fuzz CONTEXTWARDEN_FUZZ_SCALE=$(FUZZ_SCALE) CONTEXTWARDEN_FUZZ_REPORT=fuzz-out/report.json \
	    $(PY) -m pytest -q -m 'hypothesis or fuzz' -p no:cacheprovider > fuzz-out/fuzz.log 2>&1; \
	    status=$$?; tail -n 25 fuzz-out/fuzz.log; echo "log: fuzz-out/fuzz.log"; exit $$status

# Builds llama-cpp-python's server once (cached in ~/.cache/contextwarden/llama-cpp, ~10 min on 2 cores).
llama-server:
	PYTHON=$(PYTHON) bash scripts/llama-server.sh build

# The scenarios against a real llama-cpp-python server (SmolLM2-135M, n_ctx 2048) at full size:
# sessions, the four integrations, the proxy (`make unit` runs a CI-sized subset when the build is
# cached). Counts land in bench-out/realserver.json.
test-llama: $(STAMP) llama-server
	CONTEXTWARDEN_LLAMA_SERVER=1 $(PY) -m pytest tests/realserver -q

# The whole suite: trim (with langchain, AutoGen and LlamaIndex peers), probes, locomo, stores ->
# bench-results/latest.{json,md,html}. The peers are installed here, not in the dev extra.
bench: $(STAMP)
	$(PY) -m pip install --quiet 'langchain-core==1.8.3' 'autogen-core==0.7.5' 'autogen-ext[openai]==0.7.5' \
	    'llama-index-core==0.14.25' psutil
	PYTHONPATH=. $(PY) -m benchmarks.suite --shared ../shared --out bench-results

# With ../shared/bench/peers_bench.py beside the checkout: every reference peer; without it: the floor
# peer on the built-in workload. Then the paired floor/contextwarden runs on the same workload.
bench-trim: $(STAMP)
	$(PY) -m pip install --quiet 'langchain-core==1.8.3' psutil
	mkdir -p bench-out
	$(PY) -m contextwarden bench trim --sizes 1000,5000 --window 128000,32000 --json bench-out/trim.json
	PYTHONPATH=. $(PY) -m benchmarks.trim_paired --sizes 5000 --window 128000,32000 --runs 3 \
	    --json bench-out/trim-paired.json

bench-probes: $(STAMP)
	mkdir -p bench-out
	$(PY) -m contextwarden bench probes --budgets 2000,3000,4000 --json bench-out/probes.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
