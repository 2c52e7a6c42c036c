# Two commands for a new user (see README):
#   make demo   set up .venv, generate the synthetic dataset, train + evaluate the demo model
#   make test   set up .venv and run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_CONFIG ?= configs/Demo/resnet18_circle.yml
DEMO_OUT ?= output/demo

.PHONY: demo test setup clean

$(VENV)/.installed: setup.py requirements/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c requirements/ci.txt -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# --resume: a second `make demo` finds the finished run (nothing to train) and tests it again;
# without it, train.py refuses to start a new run over an existing one.
demo: setup
	$(PY) tools/train.py --config-file $(DEMO_CONFIG) --resume OUTPUT_DIR $(DEMO_OUT)
	$(PY) tools/test.py --config-file $(DEMO_OUT)/config.yaml MODEL.WEIGHTS $(DEMO_OUT)/model_final.pth --rerank --visualize 5

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) output .pytest_cache
