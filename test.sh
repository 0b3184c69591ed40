#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace,
# with the storage suite on both SQLite and a throwaway PostgreSQL, and the executor suite on both
# local processes and a single-node Slurm, which this script starts (installing Debian's packages if
# the machine lacks them; it runs as root, as CI does) and removes afterwards; schemathesis (from
# PyPI, in a venv under the scratch dir) checks the running service against its OpenAPI document;
# scripts/faults.sh injects real faults (kill -9, a network cut, SIGSTOP, a PostgreSQL restart) into
# two `databuild serve` hosts sharing a PostgreSQL log.
set -euo pipefail
cd "$(dirname "$0")"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

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
export DATABUILD_TEST_POSTGRES DATABUILD_REQUIRE_POSTGRES=1
# Its folder, for the tests that restart it (crates/log/tests/postgres_faults.rs).
export DATABUILD_TEST_POSTGRES_DIR="$scratch/postgres"
echo "== starting a single-node Slurm"
DATABUILD_TEST_SLURM=$(./scripts/slurm.sh start "$scratch/slurm")
export DATABUILD_TEST_SLURM SLURM_CONF=$DATABUILD_TEST_SLURM DATABUILD_REQUIRE_SLURM=1

echo "== Chromium and playwright-core for the dashboard's browser test"
if [ ! -x /usr/bin/chromium ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
fi
(cd tests/browser && npm ci --no-audit --no-fund --silent)
export DATABUILD_REQUIRE_BROWSER=1

echo "== schemathesis (from PyPI, in a venv) for the OpenAPI conformance test"
python3 -m venv "$scratch/schemathesis"
"$scratch/schemathesis/bin/pip" install --quiet --disable-pip-version-check schemathesis==4.32.5
export DATABUILD_SCHEMATHESIS="$scratch/schemathesis/bin/schemathesis" DATABUILD_REQUIRE_SCHEMATHESIS=1

# The fault-injection test (scripts/faults.sh: two hosts in namespaces of their own, on a bridge
# it makes, one PostgreSQL) runs as root; here its absence is a failure, not a skip.
export DATABUILD_REQUIRE_FAULTS=1

echo "== cargo test"
cargo test --workspace --quiet

echo "== the Python wheel: built with maturin, installed into a fresh venv, its tests (pytest)"
./scripts/wheel.sh "$scratch/wheel"
