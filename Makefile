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

# The short version of `weft bench`: cnn on 4 workers, 100Mbit links emulated
# when run as root (on loopback otherwise, as weft bench says), five strategies
# and PyTorch DDP, measured beside predicted. A few minutes on 2 cores.
DEMO_STRATEGIES ?= wfbp,dcredit,flsgd,dreamddp-opt,ps-interleaved
DEMO_STEPS ?= 50
demo: build
	$(BUILD)/weft bench --model cnn --workers 4 --bandwidths 100Mbit --strategies $(DEMO_STRATEGIES) \
	  --servers 1 --steps $(DEMO_STEPS) --warmup 5 --out $(BUILD)/demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

bench: build
	$(BUILD)/tools/bench_sim

clean:
	rm -rf $(BUILD)
