#!/usr/bin/env bash
# Builds every fuzz target and runs each for a short, bounded time over its committed seeds.
# Exits non-zero on the first target that crashes, panics, hangs or runs out of memory, naming
# the target and the input that did it. See fuzz/README.md.
#
#   bash fuzz/ci.sh                    # every target, FUZZ_SECONDS (default 20) each
#   FUZZ_SECONDS=300 bash fuzz/ci.sh rdl trace_swf
#
# Toolchain: cargo-fuzz passes -Z flags, which need a nightly compiler. A stable one accepts
# them with RUSTC_BOOTSTRAP=1, which is what this uses, so only the stable toolchain must be
# present; FUZZ_TOOLCHAIN=nightly picks a nightly instead. No sanitizer: the code fuzzed is safe
# Rust, so ASan would only slow it down; panics, overflow checks (debug assertions are on),
# stack overflows, timeouts and the RSS limit are what find the bugs.
set -euo pipefail

FUZZ_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$FUZZ_DIR"

SECONDS_EACH="${FUZZ_SECONDS:-20}"
TOOLCHAIN="${FUZZ_TOOLCHAIN:-stable}"
# The inputs are texts and JSON bodies: 64 KiB reaches every construct; 2 GiB of RSS and 10 s for
# one input are far beyond what any correct parse needs.
FUZZ_ARGS=(-max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1)
BUILD_FLAGS=(--sanitizer none)  # release, with debug assertions and overflow checks (the default)

if [ "$TOOLCHAIN" = stable ]; then
    export RUSTC_BOOTSTRAP=1
fi
cargo_fuzz() { cargo "+$TOOLCHAIN" fuzz "$@"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/ci.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

mapfile -t ALL < <(cargo_fuzz list)
if [ "$#" -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL[@]}"); fi

start=$(date +%s)
cargo_fuzz build "${BUILD_FLAGS[@]}"
echo "fuzz/ci.sh: built ${#ALL[@]} targets in $(( $(date +%s) - start )) s" >&2

for t in "${TARGETS[@]}"; do
    # The corpus grows in fuzz/corpus (not committed); the seeds are read, never written.
    mkdir -p "corpus/$t" "artifacts/$t"
    log="artifacts/$t/ci.log"
    echo "fuzz/ci.sh: $t for ${SECONDS_EACH} s" >&2
    if ! cargo_fuzz run "${BUILD_FLAGS[@]}" "$t" "corpus/$t" "seeds/$t" -- \
        "${FUZZ_ARGS[@]}" -max_total_time="$SECONDS_EACH" -artifact_prefix="artifacts/$t/" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz/ci.sh: FAILED: target $t" >&2
        for a in "artifacts/$t"/crash-* "artifacts/$t"/oom-* "artifacts/$t"/timeout-* "artifacts/$t"/slow-unit-*; do
            [ -e "$a" ] && echo "fuzz/ci.sh: input: fuzz/$a (reproduce: cargo +$TOOLCHAIN fuzz run ${BUILD_FLAGS[*]} $t fuzz/$a)" >&2
        done
        exit 1
    fi
    grep -E '^stat::number_of_executed_units|^Done ' "$log" | sed "s/^/fuzz\/ci.sh: $t: /" >&2 || true
done
echo "fuzz/ci.sh: ${#TARGETS[@]} targets fuzzed, no crash; $(( $(date +%s) - start )) s in all" >&2
