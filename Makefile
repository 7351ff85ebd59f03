# selscan: make run | test | bench | test-cuda | bench-cuda | tf-op | test-tf | clean
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

.PHONY: run test bench clean test-cuda bench-cuda tf-op test-tf
.DEFAULT_GOAL := run

$(BUILD):
	mkdir -p $(BUILD)

# ---- examples ---------------------------------------------------------------------------------
$(BUILD)/quickstart: examples/quickstart.c selscan.h | $(BUILD)
	$(CC) -std=c99 $(WARN) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

run: $(BUILD)/quickstart
	./$(BUILD)/quickstart

# ---- tests (section owned by tests/) ----------------------------------------------------------

# ---- CPU benchmark ----------------------------------------------------------------------------

# ---- CUDA -------------------------------------------------------------------------------------

# ---- TensorFlow op ----------------------------------------------------------------------------

clean:
	rm -rf $(BUILD)
