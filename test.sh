#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, unused dependencies (cargo-machete), then
# every test of the workspace with cargo-nextest, the tests that need a service included,
# with the storage suite on both SQLite and a throwaway PostgreSQL, and the executor suite on both
# local processes and a single-node Slurm, which this script starts (installing Debian's packages if
# the machine lacks them; it runs as root, as CI does) and removes afterwards; schemathesis (from
# PyPI, in a venv under the scratch dir) checks the running service against its OpenAPI document;
# scripts/faults.sh injects real faults (kill -9, a network cut, SIGSTOP, a PostgreSQL restart) into
# two `databuild serve` hosts sharing a PostgreSQL log.
set -euo pipefail
cd "$(dirname "$0")"

# The cargo subcommands this script runs, built from crates.io when the machine lacks them.
for tool in cargo-nextest@0.9.143 cargo-machete@0.9.2; do
  command -v "${tool%@*}" >/dev/null || cargo install --locked --quiet "$tool"
done

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo machete (no unused dependencies)"
cargo machete

scratch=$(mktemp -d)
cleanup() {
  status=$?
  ./scripts/postgres.sh stop "$scratch/postgres" || true
  ./scripts/slurm.sh stop "$scratch/slurm" || true
  rm -rf "$scratch" 2>/dev/null || true
  exit "$status"
}
trap cleanup EXIT
echo "== starting a throwaway PostgreSQL"
DATABUILD_TEST_POSTGRES=$(./scripts/postgres.sh start "$scratch/postgres")
export DATABUILD_TEST_POSTGRES
# Its folder, for the tests that restart it (crates/log/tests/postgres_faults.rs).
export DATABUILD_TEST_POSTGRES_DIR="$scratch/postgres"
echo "== starting a single-node Slurm"
DATABUILD_TEST_SLURM=$(./scripts/slurm.sh start "$scratch/slurm")
export DATABUILD_TEST_SLURM SLURM_CONF=$DATABUILD_TEST_SLURM

echo "== Chromium and playwright-core for the dashboard's browser test"
if [ ! -x /usr/bin/chromium ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
fi
(cd tests/browser && npm ci --no-audit --no-fund --silent)

echo "== schemathesis (from PyPI, in a venv) for the OpenAPI conformance test"
python3 -m venv "$scratch/schemathesis"
"$scratch/schemathesis/bin/pip" install --quiet --disable-pip-version-check schemathesis==4.32.5
export DATABUILD_SCHEMATHESIS="$scratch/schemathesis/bin/schemathesis"

# The tests that need one of these services (or root, for the fault-injection test and a full
# tmpfs) are `#[ignore]`d, so that a plain `cargo test` lists them as not run; here they run too
# (`--run-ignored all`), and one whose service is missing fails. .config/nextest.toml says how
# (timeouts, retries of the timing-sensitive ones, the tests that run alone).
echo "== cargo nextest run (every test, the ignored ones too)"
cargo nextest run --workspace --run-ignored all 2>&1 | tee "$scratch/nextest.log"
echo "== cargo test --doc (nextest runs no doctests)"
cargo test --workspace --doc --quiet 2>&1 | tee "$scratch/doctests.log"

echo "== the Python wheel: built with maturin, installed into a fresh venv, its tests (pytest)"
./scripts/wheel.sh "$scratch/wheel"

# The count, last: nextest's summary line and the doctests'.
doctests=$(awk '/^test result:/ { n += $4 } END { print n + 0 }' "$scratch/doctests.log")
echo "== $(grep -E '^ *Summary' "$scratch/nextest.log" | tail -1 | sed 's/^ *//'); $doctests doctests passed"
