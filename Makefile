# The two commands of the README: `make demo` and `make test`.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=

.PHONY: deps configure build demo test test-slow bench-sim install clean

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

# What CI runs (.ci/run): every test but those labelled slow (long training runs
# that repeat a faster test's claim at scale); `make test-slow` runs those.
test: build
	cd $(BUILD) && ctest -LE slow --output-on-failure -j$(JOBS) --timeout 900

test-slow: build
	cd $(BUILD) && ctest -L slow --output-on-failure -j$(JOBS) --timeout 3600

# The weft binary and `import weft` where Debian's /usr/bin/python3 finds them
# (/usr/local/bin, /usr/local/lib/python3/dist-packages); docs/python.md.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# How fast the schedulers and the simulator run (tools/sim_bench.cc), not a
# training bench: that is `weft bench` (`make demo` runs a short one).
bench-sim: build
	$(BUILD)/tools/bench_sim

clean:
	rm -rf $(BUILD)

# Fuzzing and sanitizers (docs/limits.md): builds of the libraries without
# LibTorch, each in a folder of its own, so the build above is unaffected.
# `make fuzz` fuzzes every parser for FUZZ_SECONDS each (clang's libFuzzer,
# with AddressSanitizer and UndefinedBehaviorSanitizer); `make check-sanitize`
# runs the libraries' tests under both sanitizers (g++). Either fails on any
# crash, leak, sanitizer report, hang or unbounded growth.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 15
SANITIZE_BUILD ?= build-sanitize
NO_LIBTORCH = -DWEFT_RUNTIME=OFF -DWEFT_BENCH=OFF
SANITIZERS = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

.PHONY: fuzz check-sanitize

fuzz: | deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
	  $(NO_LIBTORCH) -DWEFT_FUZZ=ON -DWEFT_FUZZ_SECONDS=$(FUZZ_SECONDS) \
	  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link $(SANITIZERS)" $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target fuzz_targets
	cd $(FUZZ_BUILD) && ctest -L fuzz --output-on-failure -j$(JOBS)

check-sanitize: | deps
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(NO_LIBTORCH) \
	  -DCMAKE_CXX_FLAGS="$(SANITIZERS)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZERS)" $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_BUILD) -j$(JOBS)
	cd $(SANITIZE_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -LE slow --output-on-failure -j$(JOBS) --timeout 900
