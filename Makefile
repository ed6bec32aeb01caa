PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint clean kube-env

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all]'
	touch $(STAMP)

run: venv
	$(BIN)/trimtab demo

test: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) built from Go modules
# into $$TRIMTAB_KUBE_CACHE (default ~/.cache/trimtab-kube/<release>); see docs/kubernetes.md
kube-env:
	bash tools/kube-env/build.sh

clean:
	rm -rf $(VENV) trimtab-report
