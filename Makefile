# Front door. `make` builds, `make test` builds, checks the layers and runs the test suite, `make replay` runs the
# main job on the bundled Azure 2023 conversation trace, `make deps` installs Debian packages.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
DEB_PACKAGES = cmake g++ libcli11-dev libfmt-dev libeigen3-dev doctest-dev libfccp-dev nlohmann-json3-dev python3

HEADERS = /usr/include/CLI/CLI.hpp /usr/include/fmt/format.h /usr/include/eigen3/Eigen/Dense \
          /usr/include/doctest/doctest.h /usr/include/libfccp/csv.h /usr/include/nlohmann/json.hpp

.PHONY: all deps build test replay clean test-asan test-odr fuzz profile bench

all: build

deps:
	@missing=""; for h in $(HEADERS); do [ -e $$h ] || missing="$$missing $$h"; done; \
	command -v cmake >/dev/null || missing="$$missing cmake"; \
	if [ -n "$$missing" ]; then \
	  echo "kvsim: missing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES); \
	  else \
	    echo "kvsim: run as root: apt-get update && apt-get install -y $(DEB_PACKAGES)"; exit 1; \
	  fi; \
	fi

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# scripts/check-layers.sh first: the include graph follows the layer table (also a ctest, check_layers)
test: build
	scripts/check-layers.sh
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The main job: the bundled Azure 2023 conversation trace (19,366 requests) through a Llama-3.1-8B
# shaped cache (128K training context), 8 llama-server slots sharing one 64K-cell stream, real CPU attention kernels timed
# on sampled steps. Outputs (summary.json, occupancy.csv, requests.csv, bandwidth.csv, report.html)
# land in kvsim-out/; add --steps-csv to REPLAY_FLAGS for steps.csv (one row per llama_decode call, 61 MB).
REPLAY_FLAGS ?= --model llama-3.1-8b -c 65536 -np 8 -kvu
replay: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS) --target kvsim
	./$(BUILD)/kvsim replay traces/azure/AzureLLMInferenceTrace_conv_2023.csv $(REPLAY_FLAGS) --out kvsim-out

# A short replay under Nsight Systems (NVTX ranges in the kvsim domain; docs/profiling.md).
profile: build
	@command -v nsys >/dev/null || { echo "nsys not installed: skipping the profile (docs/profiling.md)"; exit 0; }; \
	nsys profile --trace=cuda,nvtx --force-overwrite=true -o $(BUILD)/kvsim-replay \
	  ./$(BUILD)/kvsim replay traces/ops/context_shift.csv --model tiny-llama -c 256 -np 2 -kvu && \
	nsys stats --report nvtx_sum $(BUILD)/kvsim-replay.nsys-rep && \
	echo "open $(BUILD)/kvsim-replay.nsys-rep in Nsight Systems"

# A short CPU attention sweep with the machine's measured limit (docs/benchmarks.md has the full one).
bench: build
	./$(BUILD)/kvbench sweep --ctx 1024,8192,32768 --kv-type f16,q8_0,q4_0 --model llama-3-8b --batch 1 --out kvbench-out

clean:
	rm -rf $(BUILD) build-asan build-fuzz kvsim-out kvbench-out

# ASan + UBSan build of the whole test suite (build-asan, no CUDA). ASAN_CTEST_FLAGS passes
# extra ctest arguments, e.g. ASAN_CTEST_FLAGS="-E test_cache_random" to skip a test too slow
# under ASan.
# The ODR check (cmake/odr_check.cmake): every layer compiled once more as LTO bytecode at -O0 and linked with
# -Werror=odr, so two types of one name cannot come back. In the main build folder (the layers are built there
# already), switched on for this check and off again: 2-4 minutes on the 2-core VM (measured 2026-12-02), run by CI
# (.ci/run) rather than by make test.
test-odr: build
	cmake -S . -B $(BUILD) -DKVSIM_ODR_CHECK=ON >/dev/null
	cd $(BUILD) && ctest --output-on-failure -R '^check_odr$$'; st=$$?; cmake -S .. -B . -DKVSIM_ODR_CHECK=OFF >/dev/null; exit $$st

ASAN_BUILD ?= build-asan
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DKVSIM_SANITIZE=ON -DKVSIM_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) $(ASAN_CTEST_FLAGS)

# libFuzzer harnesses (tests/fuzz), built with clang in build-fuzz and run FUZZ_SECONDS each.
# -O1 with asserts on: quicker to build, and lib/ asserts count as findings.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS  = fuzz_op_trace fuzz_azure fuzz_burstgpt fuzz_mooncake fuzz_op_replay
fuzz: deps
	@if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-rt-$$(clang++ -dumpversion | cut -d. -f1)-dev; \
	  else \
	    echo "kvsim: run as root: apt-get install -y clang libclang-rt-14-dev"; exit 1; \
	  fi; \
	fi
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DKVSIM_FUZZ=ON -DKVSIM_SANITIZE=ON -DKVSIM_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only"
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
