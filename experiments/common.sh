# Sourced by each experiment's run.sh: builds the release `gantry` binary once (quietly) and
# defines ROOT (the repository), TRACES (the shared public traces) and GANTRY.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TRACES="${GANTRY_TRACES:-$ROOT/../shared/traces}"
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p gantry-scheduler --bin gantry >&2
GANTRY="$ROOT/target/release/gantry"
OUT="${OUT:-$(mktemp -d)}"
