#!/usr/bin/env bash
# Builds the `databuild` wheel (maturin, from PyPI, in a venv of its own), installs it into a fresh
# venv, and runs the Python package's tests there: the job helper, an example build with the
# wheel's binary, and the client against a real `databuild serve`.
#   scripts/wheel.sh SCRATCH_DIR [maturin build options, default: --profile dev]
# The test command builds the dev profile (the binary `cargo nextest run` has just built); a release wheel
# is `cd python && maturin build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$1
shift
options=("$@")
[ ${#options[@]} -gt 0 ] || options=(--profile dev)
mkdir -p "$scratch"
python3 -m venv "$scratch/build-venv"
"$scratch/build-venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0
(cd python && "$scratch/build-venv/bin/maturin" build --quiet "${options[@]}" --out "$scratch/wheels")
wheel=$(ls "$scratch"/wheels/databuild-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
python3 -m venv "$scratch/venv"
"$scratch/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" pytest==9.2.0
# The venv's `databuild` and `python3` first, as an activated venv would have them.
PATH="$scratch/venv/bin:$PATH" "$scratch/venv/bin/python" -m pytest -q python/tests
