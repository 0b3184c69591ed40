#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace,
# with the storage suite on both SQLite and a throwaway PostgreSQL that this script starts
# (installing Debian's postgresql package if the machine lacks it) and removes afterwards.
set -euo pipefail
cd "$(dirname "$0")"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings

scratch=$(mktemp -d)
cleanup() {
  ./scripts/postgres.sh stop "$scratch/postgres"
  rm -rf "$scratch"
}
trap cleanup EXIT
echo "== starting a throwaway PostgreSQL"
DATABUILD_TEST_POSTGRES=$(./scripts/postgres.sh start "$scratch/postgres")
export DATABUILD_TEST_POSTGRES DATABUILD_REQUIRE_POSTGRES=1

echo "== cargo test"
cargo test --workspace --quiet
