# Two commands for a new user (see README):
#   make demo   set up .venv, generate the synthetic dataset, train + evaluate the demo model
#   make test   set up .venv (pinned versions, every optional extra) and run the test suite
# and one for CI (.ci/run): make test-min, the suite with the lowest versions setup.py claims (and the
# oldest BoxMOT the tracker environment supports).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev,all
MIN_PYTHON ?= python3.10
MIN_VENV ?= .venv-min
DEMO_CONFIG ?= configs/Demo/resnet18_circle.yml
DEMO_OUT ?= output/demo

.PHONY: demo test test-min setup setup-min references clean

# Where torch + torchvision come from (tools/torch_wheels.py; README, "Install size"):
#   TORCH_BUILD=auto     (default) an NVIDIA GPU answers GPU_PROBE: the package index's CUDA build;
#                        none does (Linux): PyTorch's CPU wheels from TORCH_CPU_INDEX_URL, or, when
#                        that index does not answer within TORCH_INDEX_TIMEOUT seconds, the package
#                        index's build (one line says so)
#   TORCH_BUILD=default  the package index's build, nothing probed or contacted (what CI runs)
#   TORCH_BUILD=cpu      the CPU wheels or an error
#   TORCH_INDEX_URL=URL  this index, whatever the rest says
# The CPU wheels' +cpu versions satisfy the pins, so the project's install keeps them. The choice
# is made once per environment: `make clean` before changing it.
TORCH_BUILD ?= auto
TORCH_INDEX_URL ?=
TORCH_CPU_INDEX_URL ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_TIMEOUT ?= 5
GPU_PROBE ?= nvidia-smi -L
# $(call install_torch,venv python,requirements file)
install_torch = $(1) tools/torch_wheels.py --python $(1) --requirements $(2) --build "$(TORCH_BUILD)" \
	--index-url "$(TORCH_INDEX_URL)" --cpu-index-url "$(TORCH_CPU_INDEX_URL)" \
	--timeout "$(TORCH_INDEX_TIMEOUT)" --gpu-probe "$(GPU_PROBE)"

$(VENV)/.torch: requirements/ci.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(call install_torch,$(PY),requirements/ci.txt)
	touch $@

$(VENV)/.installed: setup.py requirements/ci.txt $(VENV)/.torch
	$(PY) -m pip install -c requirements/ci.txt -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

# --resume: a second `make demo` finds the finished run (nothing to train) and tests it again;
# without it, train.py refuses to start a new run over an existing one.
demo: setup
	$(PY) tools/train.py --config-file $(DEMO_CONFIG) --resume OUTPUT_DIR $(DEMO_OUT)
	$(PY) tools/test.py --run $(DEMO_OUT) --rerank --visualize 5

# Test processes (pytest-xdist): each test runs whole in one of them, so a test's own subprocesses
# (torchrun jobs, loader workers, signals to its process group) are unaffected; 2 halves CI's time
# on its 2 cores. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup references
	$(PY) -m pytest -q -n $(TEST_WORKERS)

# Source distributions of other toolkits, from the package index, whose own code some tests run as the
# reference (tests/_references.py; never installed or imported as packages): torchreid's evaluation.
REFERENCES ?= .cache/references
REFERENCE_SDISTS ?= torchreid==0.2.5
REFERENCE_PY ?= $(PY)
$(REFERENCES)/.fetched: Makefile
	$(REFERENCE_PY) -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d $(REFERENCES) \
		$(REFERENCE_SDISTS)
	touch $@

references: $(REFERENCES)/.fetched

# The minimum versions (requirements/min.txt as constraints: pip fails if setup.py asks for more).
$(MIN_VENV)/.installed: setup.py requirements/min.txt
	$(MIN_PYTHON) -m venv $(MIN_VENV)
	$(call install_torch,$(MIN_VENV)/bin/python,requirements/min.txt)
	$(MIN_VENV)/bin/python -m pip install -c requirements/min.txt -e ".[dev]"
	touch $@

setup-min: $(MIN_VENV)/.installed

# Every test without the `slow` mark, then the slow tests of the code that leans on the newest
# APIs of its libraries (engine: optimizer, grad scaler, checkpoints, DDP; .pt2 export:
# torch.export, also of a ViT with camera ids, whose token slices torch 2.6 exports differently;
# data and evaluation: numpy/scipy/OpenCV/h5py; uda: scikit-learn; plots: matplotlib). The other
# slow tests (tool subprocesses, ResNet50/MGN forwards, fast-reid files, big indexes, the two-node
# torchrun jobs of tests/engine/test_multi_node.py) run in `make test` only, which keeps CI well
# inside its time.
# The tracker environment's tests (tests/tracking: scoring, each tracker's settings files, every tracker run
# motion-only and with features) run here against the OLDEST BoxMOT supported (MIN_BOXMOT, as
# $REID_BOXMOT_VERSION: "oldest" is reid/tracking/boxmot_compat.py's OLDEST), while `make test` runs them
# against the newest, the default: both ends of the supported range without a third lane (about 2 min here).
MIN_SLOW_TESTS ?= tests/engine tests/data tests/evaluation tests/uda tests/visualization tests/export/test_writer.py \
	tests/export/test_writer_camera_ids.py tests/tracking/test_scoring.py tests/tracking/test_tracker_options.py \
	tests/tracking/test_tracker_runs.py
MIN_BOXMOT ?= oldest
test-min: setup-min
	$(MAKE) references REFERENCE_PY=$(MIN_VENV)/bin/python
	REID_BOXMOT_VERSION=$(MIN_BOXMOT) $(MIN_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) -m "not slow"
	REID_BOXMOT_VERSION=$(MIN_BOXMOT) $(MIN_VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) -m slow $(MIN_SLOW_TESTS) \
		--ignore=tests/engine/test_multi_node.py

clean:
	rm -rf $(VENV) $(MIN_VENV) output .pytest_cache $(REFERENCES)
