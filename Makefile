# Front door. `make` builds, `make test` builds and runs the test suite, `make replay` runs the
# main job on the bundled Azure 2023 conversation trace, `make deps` installs Debian packages.
BUILD ?= build
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
DEB_PACKAGES = cmake g++ libcli11-dev libfmt-dev libeigen3-dev doctest-dev libfccp-dev nlohmann-json3-dev python3

HEADERS = /usr/include/CLI/CLI.hpp /usr/include/fmt/format.h /usr/include/eigen3/Eigen/Dense \
          /usr/include/doctest/doctest.h /usr/include/libfccp/csv.h /usr/include/nlohmann/json.hpp

.PHONY: all deps build test replay clean test-asan fuzz profile bench

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

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

replay: build
	./$(BUILD)/kvsim replay traces/azure/AzureLLMInferenceTrace_conv_2023.csv --out kvsim-out

clean:
	rm -rf $(BUILD) build-asan kvsim-out
