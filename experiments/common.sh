# Sourced by each experiment's run.sh: builds the release `gantry` binary once (quietly) and
# defines ROOT (the repository), TRACES (the shared public traces) and GANTRY.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRACES="${GANTRY_TRACES:-$ROOT/../shared/traces}"
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p gantry --bin gantry >&2
GANTRY="$ROOT/target/release/gantry"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"

# Builds a plugin package in the release profile (quietly) and prints its library's path:
# plugin_so PACKAGE LIBNAME, e.g. plugin_so gantry-hetero gantry_hetero.
plugin_so() {
  cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p "$1" >&2
  echo "$ROOT/target/release/lib$2.so"
}

# Writes a scheduler configuration that loads one plugin for `place`:
# place_plugin_config FILE NAME LIBRARY [SETTING_LINE…], each line TOML for [plugins.config].
place_plugin_config() {
  local file="$1" name="$2" lib="$3"; shift 3
  printf '[[plugins]]\nname = "%s"\npath = "%s"\n[plugins.config]\n%s\n[profile]\nplace = "%s"\n' \
    "$name" "$lib" "$(printf '%s\n' "$@")" "$name" > "$file"
}
