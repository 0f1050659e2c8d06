# The two commands of the README: `make demo` and `make test`.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: deps configure build demo test bench clean

deps:
	@scripts/install-deps.sh

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/weft plan --model gpt2 --workers 16 --bandwidth 1Gbit

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

bench: build
	$(BUILD)/bench/bench_sim

clean:
	rm -rf $(BUILD)
