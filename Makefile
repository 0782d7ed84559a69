# Thin wrapper over CMake; the README's two commands are `make run` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc)
PORT       ?= 8080
DATA_DIR   ?= ./hpo-data
CMAKE_FLAGS ?=

.PHONY: deps deps-bench build build-asan build-tsan run test test-asan test-tsan bench clean

deps:
	@bash scripts/deps.sh

deps-bench:
	@bash scripts/deps.sh --bench

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

build-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPO_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)

build-tsan:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPO_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS)

run: deps build
	@bash scripts/run.sh $(BUILD) $(PORT) $(DATA_DIR)

test: deps build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# The sanitizer suites leave out the tests labelled nosan: they run no C
# code of ours (the lint checks, the PyTorch peer's own test), so a
# sanitizer has nothing to instrument there and the plain suite runs them.
test-asan: deps build-asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) -LE nosan $(CTEST_ARGS)

# ThreadSanitizer: tests/tsan.supp names the uninstrumented libraries whose
# own threads TSan cannot follow.
test-tsan: deps build-tsan
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) -LE nosan $(CTEST_ARGS)

bench: deps-bench build
	@bash tests/bench/run_all.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
