# selscan: make run | run-ssd | test | test-all | bench | test-cuda | test-gpu | test-gpu-full | test-cuda-sanitize | bench-cuda | test-torch | wheel | hf-kernel | tf-op | wheel-tf | test-tf | ort-ops | test-onnx | clean
# Compilers and flags can be overridden: make test CC=clang CFLAGS="-O1 -g"
CC      ?= cc
CXX     ?= c++
NVCC    ?= nvcc
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -pedantic -Werror
LDLIBS  := -lm -lpthread
NVFLAGS ?= -O3 -arch=sm_90 -std=c++17
BUILD   := build
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1)
# arm64 (the NEON path): a cross compiler and qemu's user-mode emulator, where installed
ARM64_CC  ?= aarch64-linux-gnu-gcc
ARM64_RUN ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
HAVE_ARM64 := $(shell command -v $(ARM64_CC) >/dev/null 2>&1 && command -v $(firstword $(ARM64_RUN)) >/dev/null 2>&1 && echo 1)

.PHONY: run run-ssd test bench clean test-cuda bench-cuda tf-op test-tf
.DEFAULT_GOAL := run

$(BUILD):
	mkdir -p $(BUILD)

# ---- examples ---------------------------------------------------------------------------------
$(BUILD)/quickstart: examples/quickstart.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(BUILD)/ssd_quickstart: examples/ssd_quickstart.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# make run-ssd: examples/ssd_quickstart.c, Mamba-2's SSD scan of one layer (forward + backward, checked)
run-ssd: $(BUILD)/ssd_quickstart
	./$(BUILD)/ssd_quickstart

run: $(BUILD)/quickstart
	./$(BUILD)/quickstart
	@if [ -n "$(HAVE_NVCC)" ] && nvidia-smi -L >/dev/null 2>&1; then $(MAKE) --no-print-directory $(BUILD)/cuda_quickstart && ./$(BUILD)/cuda_quickstart; fi

# ---- tests (section owned by tests/) ----------------------------------------------------------
# make test (the quick loop: at most 3 min of CPU on 2 cores, bench/RESULTS.md "Test loop"): every
# tests/test_*.c (CUDA ones excluded) built and run, tests/test_api, tests/test_conv, tests/test_ssd and
# tests/test_norm again with SELSCAN_CPU=portable (test_conv and test_norm with avx2 too: SELSCAN_CPU
# never raises the path, so on a CPU without it that run repeats a lower one).
# make test-all (what CI runs): make test's suites, the build checks (tests/build_checks.sh: every
# compiler and language mode, the README snippet; with nvcc where it exists), the
# CUDA tests and quickstart compiled first (a build step, no test counted) and the CUDA suites run
# (without a GPU they count only their host-side validation checks and print "skipped: no GPU" for
# the GPU matrix), every suite again under AddressSanitizer + UBSan on a smaller random matrix
# (SELSCAN_TEST_QUICK=1), and the suites for arm64 under qemu-user where the cross tools exist.
# tests/run.sh sums the "N passed, N failed" lines into the last line of the output and fails when
# anything failed. Suites that #define SELSCAN_IMPLEMENTATION build alone; the others link one
# shared object (tests/selscan_impl.c). SELSCAN_TEST_SEED=n changes the random problems; TEST_JOBS
# the parallel builds.
TEST_SRCS       := $(sort $(filter-out %cuda%,$(wildcard tests/test_*.c)))
TEST_STANDALONE := $(shell grep -l 'define SELSCAN_IMPLEMENTATION' $(TEST_SRCS) /dev/null 2>/dev/null)
TEST_BINS       := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
TEST_SAN_BINS   := $(patsubst tests/%.c,$(BUILD)/tests-san/%,$(TEST_SRCS))
TEST_CFLAGS     ?= -std=gnu11 -O2 -Wall -Wextra  # no -g: debug info is ~16 % of the quick loop's compile time (TEST_CFLAGS+=-g to debug)
TEST_SANFLAGS   ?= -std=gnu11 -O0 -g -Wall -Wextra -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TEST_JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
TEST_SAN_ENV    := SELSCAN_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
.PHONY: test-build test-build-quick test-all
# the CUDA programs' compile: a build step before the suites run (a compile is no passed test; a
# failed one stops make test-all with its log, like a failed C build)
TEST_CUDA_BUILD := if $(MAKE) --no-print-directory -j2 $(BUILD)/test_cuda $(BUILD)/test_cuda_cl $(BUILD)/test_cuda_conv $(BUILD)/test_cuda_ssd $(BUILD)/test_cuda_norm $(BUILD)/cuda_quickstart >$(BUILD)/cuda-build.log 2>&1; \
    then echo 'build: nvcc compiled test_cuda, test_cuda_cl, test_cuda_conv, test_cuda_ssd, test_cuda_norm and cuda_quickstart'; \
    else cat $(BUILD)/cuda-build.log; echo 'build: nvcc failed (log above: $(BUILD)/cuda-build.log)'; exit 1; fi
# the commands both targets run: the native suites, test_api on the portable path
TEST_QUICK_CMDS := $(foreach b,$(TEST_BINS),./$(b)) "SELSCAN_CPU=portable ./$(BUILD)/tests/test_api" \
    "SELSCAN_CPU=avx2 ./$(BUILD)/tests/test_conv" "SELSCAN_CPU=portable ./$(BUILD)/tests/test_conv" \
    "SELSCAN_CPU=portable ./$(BUILD)/tests/test_ssd" "SELSCAN_CPU=avx2 ./$(BUILD)/tests/test_norm" \
    "SELSCAN_CPU=portable ./$(BUILD)/tests/test_norm" ./$(BUILD)/ssd_quickstart
TEST_BUILD_CHECKS = "CC='$(CC)' CXX='$(CXX)' NVCC='$(1)' BUILD='$(BUILD)' bash tests/build_checks.sh"

$(BUILD)/tests/selscan_impl.o: tests/selscan_impl.c selscan.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) -I. -c $< -o $@

$(BUILD)/tests/%: tests/%.c tests/common.h tests/tol_lowp.h selscan.h $(BUILD)/tests/selscan_impl.o
	$(CC) $(TEST_CFLAGS) -I. $< $(if $(filter $<,$(TEST_STANDALONE)),,$(BUILD)/tests/selscan_impl.o) -o $@ $(LDLIBS)

$(BUILD)/tests-san/selscan_impl.o: tests/selscan_impl.c selscan.h
	@mkdir -p $(@D)
	$(CC) $(TEST_SANFLAGS) -I. -c $< -o $@

$(BUILD)/tests-san/%: tests/%.c tests/common.h tests/tol_lowp.h selscan.h $(BUILD)/tests-san/selscan_impl.o
	$(CC) $(TEST_SANFLAGS) -I. $< $(if $(filter $<,$(TEST_STANDALONE)),,$(BUILD)/tests-san/selscan_impl.o) -o $@ $(LDLIBS)

# The same suites for arm64 (NEON and portable paths), run under qemu-user by make test-all where
# $(ARM64_CC) and qemu-aarch64 are installed (.ci/run installs them): gcc contracts a * b + c
# into fused operations there, which the x86 builds never do.
ARM64_BINS := $(patsubst tests/%.c,$(BUILD)/arm64/%,$(TEST_SRCS))
$(BUILD)/arm64/selscan_impl.o: tests/selscan_impl.c selscan.h
	@mkdir -p $(@D)
	$(ARM64_CC) $(TEST_CFLAGS) -I. -c $< -o $@

$(BUILD)/arm64/%: tests/%.c tests/common.h tests/tol_lowp.h selscan.h $(BUILD)/arm64/selscan_impl.o
	$(ARM64_CC) $(TEST_CFLAGS) -I. $< $(if $(filter $<,$(TEST_STANDALONE)),,$(BUILD)/arm64/selscan_impl.o) -o $@ $(LDLIBS)

# test_fast_pcache and test_fast_portable are tests/test_fast.c built with other macros
$(foreach d,tests tests-san arm64,$(BUILD)/$(d)/test_fast_pcache $(BUILD)/$(d)/test_fast_portable): tests/test_fast.c

test-build-quick: $(TEST_BINS) $(BUILD)/ssd_quickstart

test-build: $(TEST_BINS) $(BUILD)/ssd_quickstart $(TEST_SAN_BINS) $(if $(HAVE_ARM64),$(ARM64_BINS))

test:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-build-quick
	@bash tests/run.sh $(TEST_QUICK_CMDS)

test-all:
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) test-build
	@$(if $(HAVE_NVCC),$(TEST_CUDA_BUILD))
	@bash tests/run.sh $(TEST_QUICK_CMDS) $(call TEST_BUILD_CHECKS,$(NVCC)) \
	    $(if $(HAVE_NVCC),./$(BUILD)/test_cuda ./$(BUILD)/test_cuda_cl ./$(BUILD)/test_cuda_conv ./$(BUILD)/test_cuda_ssd ./$(BUILD)/test_cuda_norm) \
	    $(foreach b,$(TEST_SAN_BINS),"$(TEST_SAN_ENV) ./$(b)") \
	    $(if $(HAVE_ARM64),$(foreach b,$(ARM64_BINS),"$(ARM64_RUN) ./$(b)"),"echo 'skipped: arm64 suites (no $(ARM64_CC) or qemu-aarch64)'; echo '0 passed, 0 failed'")

# ---- CPU benchmark ----------------------------------------------------------------------------
# make bench: examples/cpu_threads.c (the part API on a pthreads pool, checked bitwise against 1
# thread), then bench/bench_cpu.c, the fast CPU path on 1 and all threads (pthreads over the part API)
# against the scalar reference on 1 thread, forward and backward, f32 and bf16. Built with the
# plain CFLAGS (no -march): the vector path is picked at run time. BENCH_THREADS (default: all
# cores), BENCH_FILTER (a case name substring), SELSCAN_BENCH_QUICK=1 (one run per figure).
BENCH_THREADS ?= $(shell nproc 2>/dev/null || echo 2)
BENCH_FILTER  ?=
$(BUILD)/bench_cpu: bench/bench_cpu.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(BUILD)/cpu_threads: examples/cpu_threads.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

bench: $(BUILD)/bench_cpu $(BUILD)/cpu_threads
	./$(BUILD)/cpu_threads
	./$(BUILD)/bench_cpu $(BENCH_THREADS) $(BENCH_FILTER)

# make bench-conv: bench/bench_conv.c, the causal conv1d's fast CPU path (1 and BENCH_THREADS
# threads) against its reference, with the bytes-moved floor of each call (bench/NOTES.md CONV-CPU-v1)
.PHONY: bench-conv
$(BUILD)/bench_conv: bench/bench_conv.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

bench-conv: $(BUILD)/bench_conv
	./$(BUILD)/bench_conv $(BENCH_THREADS)

# make bench-norm: bench/bench_norm.c, the gated norm's CPU entries (one thread) on Mamba-2 130m's
# norm, with the traffic's floor (bench/NOTES.md SSD-torch-v5; bench/bench_norm.py: through PyTorch)
.PHONY: bench-norm
$(BUILD)/bench_norm: bench/bench_norm.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

bench-norm: $(BUILD)/bench_norm
	./$(BUILD)/bench_norm


# ---- CUDA -------------------------------------------------------------------------------------
# cuda-build compiles every CUDA binary without running one (for CI machines with nvcc, no GPU).
# test-cuda runs the GPU suite (prints "skipped: no GPU" and exits 0 without a device).
CUDA_BINS := $(BUILD)/test_cuda $(BUILD)/test_cuda_cl $(BUILD)/test_cuda_conv $(BUILD)/test_cuda_ssd $(BUILD)/test_cuda_norm $(BUILD)/bench_cuda $(BUILD)/cuda_quickstart
.PHONY: cuda-build
cuda-build: $(CUDA_BINS)

# The CUDA programs: the CPU side (reference, fast path) compiled once by the C compiler, the
# CUDA TU with SELSCAN_VALIDATION_ONLY (validation + kernels only: a third less nvcc time).
$(BUILD)/selscan_cpu.o: selscan.h | $(BUILD)
	$(CC) -O2 -x c -DSELSCAN_IMPLEMENTATION -c $< -o $@

$(BUILD)/test_cuda: tests/test_cuda.cu tests/cuda_check.h tests/tol_lowp.h selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

# the same suite with SELSCAN_CUDA_CHANNELS_LAST=1: channels-last cases through the fast kernels
$(BUILD)/test_cuda_cl: tests/test_cuda.cu tests/cuda_check.h tests/tol_lowp.h selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -DSELSCAN_CUDA_CHANNELS_LAST=1 -I. $< $(BUILD)/selscan_cpu.o -o $@

# the causal conv1d's kernels (selscan_cuda.cuh >>conv) against the CPU reference
$(BUILD)/test_cuda_conv: tests/test_cuda_conv.cu tests/cuda_check.h tests/tol_lowp.h selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

# Mamba-2's SSD kernels (selscan_cuda.cuh >>ssd-cuda) against the CPU reference
$(BUILD)/test_cuda_ssd: tests/test_cuda_ssd.cu tests/cuda_check.h tests/tol_lowp.h selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

# the gated RMS norm's kernels (selscan_cuda.cuh >>norm-cuda) against the CPU reference
$(BUILD)/test_cuda_norm: tests/test_cuda_norm.cu tests/cuda_check.h tests/tol_lowp.h selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

# the benchmark with the channels-last instantiations (SELSCAN_BENCH_LAYOUT=bld runs them)
$(BUILD)/bench_cuda: bench/bench_cuda.cu selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -DSELSCAN_CUDA_CHANNELS_LAST=1 -I. $< $(BUILD)/selscan_cpu.o -o $@

# the CUDA SSD forward's walk against its chunks on the same problems (bench/bench_ssd_forms.cu)
$(BUILD)/bench_ssd_forms: bench/bench_ssd_forms.cu selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

$(BUILD)/cuda_quickstart: examples/cuda_quickstart.cu selscan_cuda.cuh $(BUILD)/selscan_cpu.o | $(BUILD)
	$(NVCC) $(NVFLAGS) -DSELSCAN_VALIDATION_ONLY -I. $< $(BUILD)/selscan_cpu.o -o $@

test-cuda: $(BUILD)/test_cuda $(BUILD)/test_cuda_cl $(BUILD)/test_cuda_conv $(BUILD)/test_cuda_ssd $(BUILD)/test_cuda_norm
	./$(BUILD)/test_cuda
	./$(BUILD)/test_cuda_cl
	./$(BUILD)/test_cuda_conv
	./$(BUILD)/test_cuda_ssd
	./$(BUILD)/test_cuda_norm

bench-cuda: $(BUILD)/bench_cuda
	./$(BUILD)/bench_cuda

# test-gpu: the GPU gate, one sitting on a one-GPU machine (<= 8 min with its builds): the C CUDA
# suites' quick matrix and compute-sanitizer memcheck over it, the torch package's CUDA tests (not
# those marked gpu_full), the framework fuzz on CUDA, TF's gpu_check; one grand total last.
# test-gpu-full PART=1|2|3: the exhaustive runs, each under 10 min. tests/gpu_gate.sh says what each
# runs and needs (TORCH_PY: a Python with a CUDA torch, pytest, pytest-xdist; nothing downloaded).
.PHONY: test-gpu test-gpu-full
test-gpu:
	@bash tests/gpu_gate.sh quick

test-gpu-full:
	@bash tests/gpu_gate.sh full $(PART)

# test-cuda-sanitize: the CUDA suites' quick matrix (SELSCAN_TEST_QUICK=1: every kernel and pass,
# small) under compute-sanitizer's memcheck (with leak check), racecheck, initcheck and
# synccheck: twenty runs (test_cuda, test_cuda_cl, test_cuda_conv, test_cuda_ssd, test_cuda_norm), side by side with make -j; a line per run with its error count, logs in
# $(BUILD)/sanitize/; fails when a tool reports an error. Needs a GPU (minutes).
SANITIZER       ?= compute-sanitizer
SANITIZE_TOOLS  := memcheck racecheck initcheck synccheck
SANITIZE_RUNS   := $(foreach t,$(SANITIZE_TOOLS),$(foreach b,test_cuda test_cuda_cl test_cuda_conv test_cuda_ssd test_cuda_norm,sanitize-$(t)-$(b)))
SANITIZE_FLAGS_memcheck := --leak-check full
.PHONY: test-cuda-sanitize $(SANITIZE_RUNS)
test-cuda-sanitize: $(SANITIZE_RUNS)
	@echo "test-cuda-sanitize: no errors ($(words $(SANITIZE_RUNS)) runs)"

$(SANITIZE_RUNS): sanitize-%: $(BUILD)/test_cuda $(BUILD)/test_cuda_cl $(BUILD)/test_cuda_conv $(BUILD)/test_cuda_ssd $(BUILD)/test_cuda_norm
	@mkdir -p $(BUILD)/sanitize
	@t=$(word 1,$(subst -, ,$*)); b=$(word 2,$(subst -, ,$*)); log=$(BUILD)/sanitize/$*.log; \
	SELSCAN_TEST_QUICK=1 $(SANITIZER) --tool $$t $(SANITIZE_FLAGS_$(word 1,$(subst -, ,$*))) --error-exitcode 99 ./$(BUILD)/$$b >$$log 2>&1; rc=$$?; \
	printf '%-10s %-13s %s; suite: %s (exit %d)\n' $$t $$b "$$(grep -E '(ERROR|RACECHECK) SUMMARY' $$log | tail -1 | sed 's/^=* *//')" \
	    "$$(grep -E '^[0-9]+ passed, [0-9]+ failed$$' $$log | tail -1)" $$rc; [ $$rc -eq 0 ]


# ---- PyTorch package --------------------------------------------------------------------------
# test-torch: a venv $(TORCH_VENV) with torch from PyPI (the CUDA build: ~2 min and ~5 GB with its
# nvidia-* wheels, which `import torch` needs), pytest and ninja, unless TORCH_PY names a Python
# that imports torch; then `make wheel` against that torch (CUDA kernels too where nvcc exists, for
# TORCH_CUDA_ARCH_LIST, default the visible GPU's, else 9.0; SELSCAN_TORCH_CPU_ONLY=1 to skip them) and the wheel installed with
# no compiler on the PATH, then pytest
# (GPU tests skip without a GPU). TORCH_TEST_PINS (transformers, einops, timm: the model
# integration tests; kernels: the hf-kernel route's) are installed beside pytest, then TORCH_TEST_PEERS with --no-deps (their pins
# are old) and without mamba_ssm's CUDA build (its Python files: what use_in_mamba_ssm() runs
# on; mambavision: what use_in_mambavision() runs). Ends with pytest's "N passed, N skipped" line.
TORCH_VENV ?= $(BUILD)/torch-venv
TORCH_TEST_PINS ?= transformers==5.25.0 einops timm kernels==0.19.1
TORCH_TEST_PEERS ?= mamba-ssm==2.3.2.post1 mambavision==1.2.0
TORCH_PYTHON = $(or $(TORCH_PY),$(abspath $(TORCH_VENV))/bin/python)
.PHONY: test-torch torch-install
torch-install:
	@py="$(TORCH_PYTHON)"; \
	if ! "$$py" -c 'import torch' >/dev/null 2>&1; then \
	  echo "test-torch: installing torch into $(TORCH_VENV)"; \
	  python3 -m venv $(TORCH_VENV) && py="$(abspath $(TORCH_VENV))/bin/python" && \
	  "$$py" -m pip install -q --upgrade pip setuptools && \
	  "$$py" -m pip install -q torch numpy || exit 1; \
	fi; \
	"$$py" -m pip install -q pytest ninja wheel packaging $(TORCH_TEST_PINS) && \
	MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE "$$py" -m pip install -q --no-deps --no-build-isolation \
	  $(TORCH_TEST_PEERS) && \
	$(MAKE) --no-print-directory wheel TORCH_PY="$$py" WHEEL_CUDA_ARCHS="$${TORCH_CUDA_ARCH_LIST:-}" && \
	whl=$$(ls -t dist/selscan_torch-*.whl | head -1) && \
	echo "test-torch: installing $$whl with no compiler on the PATH" && \
	PATH="$$(dirname "$$py")" CC=false CXX=false "$$py" -m pip install -q --no-deps --force-reinstall "$$whl"

# wheel: a binary wheel of the PyTorch package into dist/, built with TORCH_PY's torch (default: the
# test-torch venv's, else python3's; 2.11 or later). It installs with no compiler (pip install dist/selscan_torch-*.whl)
# into an environment with torch 2.11 or later and Python 3.10 or later (PyTorch's and Python's stable
# ABIs; its requirement says so, and its import names an older torch): CPU kernels for every vector path and, where nvcc
# and a CUDA torch are, CUDA kernels for WHEEL_CUDA_ARCHS (T4 / Turing to Blackwell, PTX of the newest;
# empty: setup.py's default, the visible GPU's, else 9.0).
WHEEL_CUDA_ARCHS ?= 7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX
.PHONY: wheel
wheel:
	@py="$(TORCH_PYTHON)"; if [ -z "$(TORCH_PY)" ] && [ ! -x "$$py" ]; then py=$$(command -v python3); \
	  echo "wheel: no $(TORCH_VENV) (make test-torch makes it) and no TORCH_PY: building with $$py"; fi; \
	mkdir -p dist && t0=$$(date +%s) && \
	rm -rf bindings/torch/build/lib.* bindings/torch/build/bdist.* && \
	echo "wheel: building selscan_torch against $$("$$py" -c 'import torch; print(torch.__version__)') ($$(if [ "$${SELSCAN_TORCH_CPU_ONLY:-0}" = 1 ]; then echo 'CPU kernels only: SELSCAN_TORCH_CPU_ONLY=1'; else echo 'CUDA archs $(or $(WHEEL_CUDA_ARCHS),the visible GPU'"'"'s / 9.0) where nvcc is'; fi))" && \
	PATH="$$(dirname "$$py"):$$PATH" MAX_JOBS="$${MAX_JOBS:-$$(nproc)}" $(if $(WHEEL_CUDA_ARCHS),TORCH_CUDA_ARCH_LIST="$(WHEEL_CUDA_ARCHS)") \
	  "$$py" -m pip wheel -q --no-build-isolation --no-deps ./bindings/torch -w dist && \
	whl=$$(ls -t dist/selscan_torch-*.whl | head -1) && \
	echo "wheel: $$whl, $$(awk "BEGIN { printf \"%.1f\", $$(stat -c %s "$$whl") / 1048576 }") MB, built in $$(( $$(date +%s) - t0 )) s"

test-torch: torch-install
	@cd bindings/torch/tests && "$(TORCH_PYTHON)" -m pytest -q -p no:cacheprovider .

# hf-kernel: selscan as a Hugging Face `kernels` repository in $(HF_KERNEL_DIR) (under build/, which git
# ignores): noarch variants build/torch-cpu and build/torch-cuda of one pure-Python package that
# exposes selscan_torch's functions under mamba_ssm's / causal_conv1d's names, and layers for
# transformers' Mamba-1 and Mamba-2 kernel entry points, loaded by kernels.LocalLayerRepository (the recipe:
# bindings/torch/README.md "Through Hugging Face kernels"). Written by python3's standard library
# alone; where it is loaded, selscan_torch must be installed. Tested by make test-torch
# (bindings/torch/tests/test_hf_kernel.py; kernels is in TORCH_TEST_PINS).
HF_KERNEL_DIR ?= $(BUILD)/hf-kernel
.PHONY: hf-kernel
hf-kernel:
	@python3 bindings/torch/hf_kernel/generate.py $(HF_KERNEL_DIR)

# ---- TensorFlow op ----------------------------------------------------------------------------
# The package (CI: make test-tf): bindings/tf is a pip-installable Python package, selscan_tf,
# whose setup.py compiles the op against the installed TensorFlow (tf.sysconfig flags; GPU kernels
# when nvcc and a CUDA TensorFlow are there). test-tf: a virtual environment $(TF_VENV) with a CPU
# TensorFlow, scikit-learn, setuptools and wheel from PyPI (TF_PY=/path/to/python uses that one),
# `make wheel-tf` with it and the wheel installed with no compiler on the PATH, then bindings/tf/tests/run_all.sh: every
# tests/test_*.py (the op; hostile inputs; the MambaVision mixer against a float64 reference,
# serialization, XLA; the learning test) and the fuzz harness tests/fuzz_tf_ops.py (CI budget;
# TF_FUZZ_ARGS="--cases N --seed S" for more), ending on "TOTAL: N passed, M failed".
# tf-op: the op alone with the rules below, into $(BUILD)/tf_op/_selscan_tf_ops.so (development, and
# with nvcc it compiles the GPU TU against any TensorFlow: selscan_tf_gpu.cc (host compiler,
# GOOGLE_CUDA=1) and selscan_tf_kernels.cu (nvcc, no TensorFlow headers), for the same GPUs as
# setup.py; PYTHONPATH=bindings/tf/python then imports it). tf-gpu-check: the CUDA TU on a GPU.
TF_DIR      := bindings/tf
TF_VENV     ?= $(BUILD)/tf-venv
TF_OUT      := $(BUILD)/tf_op
TF_SO       := $(TF_OUT)/_selscan_tf_ops.so
TF_CXXFLAGS ?= -O2
TF_WARN     := -Wall -Wextra -Wno-maybe-uninitialized
TF_NVFLAGS  ?= -O3 -std=c++17 --threads 0 $(foreach a,75 80 86 89,-gencode arch=compute_$(a),code=sm_$(a)) -gencode arch=compute_90,code=[sm_90,compute_90]
TF_GPU      := $(if $(HAVE_NVCC),$(if $(wildcard selscan_cuda.cuh),1))
CUDA_HOME   ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null)))
ifdef TF_PY
TF_CFLAGS   := $(shell $(TF_PY) -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_compile_flags()))' 2>/dev/null)
TF_LFLAGS   := $(shell $(TF_PY) -c 'import tensorflow as tf; print(" ".join(tf.sysconfig.get_link_flags()))' 2>/dev/null)
endif
BIND_DIR    := bindings/common
TF_INC      = $(patsubst -I%,-isystem %,$(TF_CFLAGS)) -I. -I$(TF_DIR) -I$(BIND_DIR)
TF_OBJS     := $(TF_OUT)/selscan_tf.o $(if $(TF_GPU),$(TF_OUT)/selscan_tf_gpu.o $(TF_OUT)/selscan_tf_kernels.o)
TF_HDRS     := $(TF_DIR)/selscan_tf_common.h $(TF_DIR)/selscan_tf_layout.h $(BIND_DIR)/selscan_binding.h selscan.h $(TF_OUT)/tf_flags.txt
.PHONY: tf-flags-check tf-gpu-check

tf-op:
	@py="$$($(TF_DIR)/tf_python.sh --find $(TF_VENV))" && \
	$(MAKE) --no-print-directory $(TF_SO) TF_PY="$$py"

test-tf:
	@py="$$($(TF_DIR)/tf_python.sh --install $(TF_VENV))" && case "$$py" in /*) ;; *) py="$$PWD/$$py" ;; esac && \
	{ "$$py" -c 'import sklearn, setuptools, wheel' 2>/dev/null || \
	  "$$py" -m pip install -q --disable-pip-version-check scikit-learn setuptools wheel; } && \
	$(MAKE) --no-print-directory wheel-tf TF_PY="$$py" && \
	whl=$$(ls -t dist/selscan_tf-*.whl | head -1) && \
	echo "test-tf: installing $$whl with no compiler on the PATH" && \
	PATH="$$(dirname "$$py")" CC=false CXX=false NVCC=false "$$py" -m pip install -q --disable-pip-version-check --no-deps \
	  --force-reinstall "$$whl" || exit 1; \
	$(TF_DIR)/tests/run_all.sh "$$py" $(BUILD)

# wheel-tf: a binary wheel of the TensorFlow package in dist/, built against TF_PY's TensorFlow (make
# tf-op's search: TF_PY, a python3 that imports tensorflow, $(TF_VENV)): the op for the CPU and, where
# nvcc and a CUDA TensorFlow are, its GPU kernels (setup.py: sm_75 ... sm_90 + PTX; SELSCAN_TF_CUDA,
# SELSCAN_TF_CUDA_ARCHS). It installs with no compiler into an environment with the same TensorFlow
# major.minor (the op uses TensorFlow's C++ ABI; the import names a mismatch).
.PHONY: wheel-tf
wheel-tf:
	@py="$$($(TF_DIR)/tf_python.sh --find $(TF_VENV))" && mkdir -p dist && t0=$$(date +%s) && \
	rm -rf $(TF_DIR)/build/lib.* $(TF_DIR)/build/bdist.* && \
	"$$py" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps ./$(TF_DIR) -w dist && \
	whl=$$(ls -t dist/selscan_tf-*.whl | head -1) && \
	echo "wheel-tf: $$whl, $$(awk "BEGIN { printf \"%.1f\", $$(stat -c %s "$$whl") / 1048576 }") MB, built in $$(( $$(date +%s) - t0 )) s"

$(TF_OUT):
	mkdir -p $(TF_OUT)

# Rebuilds when the TensorFlow (its flags) or the GPU choice changes.
$(TF_OUT)/tf_flags.txt: tf-flags-check | $(TF_OUT)
	@test -n "$(TF_CFLAGS)" || { echo "tf-op: no TensorFlow compile flags (run make tf-op / make test-tf)"; exit 1; }
	@echo '$(TF_CFLAGS) | $(TF_LFLAGS) | gpu=$(TF_GPU) $(CUDA_HOME)' | cmp -s - $@ || \
	echo '$(TF_CFLAGS) | $(TF_LFLAGS) | gpu=$(TF_GPU) $(CUDA_HOME)' > $@

$(TF_OUT)/selscan_tf.o: $(TF_DIR)/selscan_tf.cc $(TF_HDRS) | $(TF_OUT)
	$(CXX) $(TF_CXXFLAGS) $(TF_WARN) -fPIC -fvisibility=hidden $(TF_INC) -c $< -o $@

$(TF_OUT)/selscan_tf_gpu.o: $(TF_DIR)/selscan_tf_gpu.cc $(TF_HDRS) | $(TF_OUT)
	$(CXX) $(TF_CXXFLAGS) $(TF_WARN) -fPIC -fvisibility=hidden -DGOOGLE_CUDA=1 $(TF_INC) -isystem $(CUDA_HOME)/include -c $< -o $@

$(TF_OUT)/selscan_tf_kernels.o: $(TF_DIR)/selscan_tf_kernels.cu $(BIND_DIR)/selscan_binding.h selscan_cuda.cuh selscan.h | $(TF_OUT)
	$(NVCC) $(TF_NVFLAGS) -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -I. -I$(BIND_DIR) -c $< -o $@

# tf-gpu-check: runs the op's CUDA TU and stride mapping on a GPU against the CPU path (no TF needed).
$(TF_OUT)/gpu_check: $(TF_DIR)/gpu_check.cu $(TF_OUT)/selscan_tf_kernels.o $(TF_DIR)/selscan_tf_layout.h $(BIND_DIR)/selscan_binding.h selscan.h tests/tol_lowp.h | $(TF_OUT)
	$(NVCC) $(TF_NVFLAGS) -I. -I$(TF_DIR) -I$(BIND_DIR) $< $(TF_OUT)/selscan_tf_kernels.o -o $@

tf-gpu-check: $(TF_OUT)/gpu_check
	./$(TF_OUT)/gpu_check

$(TF_SO): $(TF_OBJS)
	$(CXX) -shared $(TF_OBJS) -o $@ $(TF_LFLAGS) $(if $(TF_GPU),-L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread)
	@echo "tf-op: built $@ ($(if $(TF_GPU),CPU + GPU kernels,CPU kernels only: no nvcc or no selscan_cuda.cuh))"


# ---- ONNX Runtime custom ops ------------------------------------------------------------------
# ort-ops: bindings/onnxruntime/selscan_ort.cc (SelectiveScan, SelectiveStateUpdate in the "selscan"
# domain) into $(BUILD)/ort/libselscan_ort.so with the C++ compiler alone: no ONNX Runtime headers or
# library at build time (bindings/onnxruntime/ort_abi.h declares the part of its stable C ABI the
# library uses; ONNX Runtime >= 1.17 hands over its API table when it loads the library). Load it
# with SessionOptions.register_custom_ops_library (selscan_torch builds the same library:
# selscan_torch.onnx.ort_library()). test-onnx: bindings/torch/tests/test_onnx.py in the torch venv
# of test-torch (selscan_torch installed there first when it is not yet; onnxruntime, onnx and
# onnxscript installed there, ORT_PINS to change them), twice: on the wheel's copy of the library,
# then on the standalone $(ORT_SO) (SELSCAN_ORT_LIBRARY, which ort_library() returns), so that
# both artifacts are tested.
ORT_DIR  := bindings/onnxruntime
ORT_SO   := $(BUILD)/ort/libselscan_ort.so
ORT_PINS ?= onnxruntime==1.32.0 onnx==1.23.2 onnxscript==0.7.2
.PHONY: ort-ops test-onnx
$(ORT_SO): $(ORT_DIR)/selscan_ort.cc $(ORT_DIR)/ort_abi.h selscan.h bindings/common/selscan_binding.h
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -O2 $(WARN) -fPIC -fvisibility=hidden -shared -I. -Ibindings/common -I$(ORT_DIR) $< -o $@ $(LDLIBS)

ort-ops: $(ORT_SO)

test-onnx: $(ORT_SO)
	@py="$(TORCH_PYTHON)"; \
	if ! (cd /tmp && "$$py" -c 'import selscan_torch.onnx' >/dev/null 2>&1); then $(MAKE) --no-print-directory torch-install || exit 1; fi; \
	"$$py" -m pip install -q $(ORT_PINS) && \
	cd bindings/torch/tests && \
	echo "test-onnx: on selscan_torch's library (selscan_torch.onnx.ort_library())" && \
	env -u SELSCAN_ORT_LIBRARY "$$py" -m pytest -q -p no:cacheprovider test_onnx.py && \
	echo "test-onnx: on the standalone library $(ORT_SO) (make ort-ops)" && \
	SELSCAN_ORT_LIBRARY="$(abspath $(ORT_SO))" "$$py" -m pytest -q -p no:cacheprovider test_onnx.py

clean:
	rm -rf $(BUILD)

# ---- fuzzing -----------------------------------------------------------------------------------
# make fuzz: tests/fuzz/fuzz_selscan.c (libFuzzer + ASan + UBSan, clang) for FUZZ_SECONDS (default
# 60), starting from the seed corpus tests/fuzz/corpus (copied into $(BUILD)/fuzz/corpus, where the
# inputs it finds accumulate); a failing input is written to $(BUILD)/fuzz/ (crash-*).
# make fuzz-ci: the CI run, reproducible: a fresh copy of the seed corpus, a fixed seed
# (FUZZ_CI_SEED) and a fixed number of inputs (FUZZ_CI_RUNS, ~2-3 min on 2 cores; capped at 10 min),
# so a red CI names an input any machine replays. Reproduce a finding:
# ./$(BUILD)/fuzz/fuzz_selscan $(BUILD)/fuzz/crash-...
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_CI_SEED ?= 1
FUZZ_CI_RUNS ?= 40000
FUZZ_FLAGS   ?= -std=gnu11 -g -O1 -Wall -Wextra -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
.PHONY: fuzz fuzz-ci
$(BUILD)/fuzz/fuzz_selscan: tests/fuzz/fuzz_selscan.c tests/tol_lowp.h selscan.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -I. $< -o $@ -lm

fuzz: $(BUILD)/fuzz/fuzz_selscan
	@mkdir -p $(BUILD)/fuzz/corpus && cp -n tests/fuzz/corpus/* $(BUILD)/fuzz/corpus/ 2>/dev/null || true
	./$(BUILD)/fuzz/fuzz_selscan -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=2048 \
	    -artifact_prefix=$(BUILD)/fuzz/ -print_final_stats=1 $(BUILD)/fuzz/corpus

fuzz-ci: $(BUILD)/fuzz/fuzz_selscan
	@rm -rf $(BUILD)/fuzz/ci-corpus && mkdir -p $(BUILD)/fuzz/ci-corpus && cp tests/fuzz/corpus/* $(BUILD)/fuzz/ci-corpus/
	./$(BUILD)/fuzz/fuzz_selscan -seed=$(FUZZ_CI_SEED) -runs=$(FUZZ_CI_RUNS) -max_total_time=600 -timeout=20 \
	    -rss_limit_mb=2048 -artifact_prefix=$(BUILD)/fuzz/ -print_final_stats=1 $(BUILD)/fuzz/ci-corpus
