# airlock: `make demo` and `make test` are the two commands of the quick start.
# Both install what they need (Debian packages) and build first.

BUILD      ?= build
ASAN_BUILD ?= build-asan
PYTEST     ?= /usr/bin/python3 -m pytest
AIRLOCK     = $(BUILD)/src/cli/airlock
PREFIX     ?= /usr/local

.PHONY: all deps build install test unit integration asan demo bench clean check-src

all: build

deps:
	@scripts/deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) . >/dev/null

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# airlock into $(PREFIX)/bin, its helper programs into
# $(PREFIX)/libexec/airlock, the manual pages into $(PREFIX)/share/man/man1,
# the bash and zsh completion into $(PREFIX)/share/bash-completion/completions
# and $(PREFIX)/share/zsh/site-functions; all under $(DESTDIR) when it is set.
# PREFIX is set on the build directory each time (a new one takes effect on
# a build made for another; the same one changes nothing).
install: deps $(BUILD)/build.ninja
	meson configure $(BUILD) -Dprefix="$(PREFIX)" >/dev/null
	ninja -C $(BUILD)
	meson install -C $(BUILD) --no-rebuild $(if $(DESTDIR),--destdir "$(abspath $(DESTDIR))")

# Unit tests, the source check and the fuzz corpora (meson test), then the
# integration tests; then all of it again built with ASan and UBSan. Every
# stage runs whatever the others did; the last line adds them up.
test: build
	@PYTEST="$(PYTEST)" scripts/test.sh $(BUILD) $(ASAN_BUILD)

unit: build
	meson test -C $(BUILD) --print-errorlogs

integration: build
	AIRLOCK=$(abspath $(AIRLOCK)) $(PYTEST) -q tests/integration

$(ASAN_BUILD)/build.ninja:
	CC=clang meson setup $(ASAN_BUILD) . -Db_sanitize=address,undefined -Db_lundef=false \
		-Dbuildtype=debug >/dev/null

asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C $(ASAN_BUILD) --print-errorlogs
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		AIRLOCK=$(abspath $(ASAN_BUILD))/src/cli/airlock $(PYTEST) -q tests/integration

check-src:
	@scripts/checksrc.sh

demo: build
	@scripts/demo.sh $(abspath $(AIRLOCK))

bench: build
	@scripts/deps.sh --bench
	@bench/run.sh $(abspath $(AIRLOCK))
	@bench/gateway.sh $(abspath $(AIRLOCK))
	@bench/checkpoint.sh $(abspath $(AIRLOCK))
	@bench/turn.sh $(abspath $(AIRLOCK))
	@bench/overhead.sh $(abspath $(AIRLOCK))

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
