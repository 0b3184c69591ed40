#!/usr/bin/env bash
# The whole test suite, as CI runs it: formatting, lints, then every test of the workspace.
# It installs or starts whatever the tests need and cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
cargo test --workspace --quiet
