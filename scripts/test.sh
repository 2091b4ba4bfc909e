#!/usr/bin/env bash
# The project's test command (named in the README, run by .ci/run):
#   1. build every target, tests included, with warnings as errors;
#   2. run every test (the end-to-end tests need root; without it they are skipped and say why);
#   3. a short fuzz smoke run if scripts/fuzz.sh exists.
#
# `swift test --skip-build` reuses the build of step 1: running `swift test` with different flags would
# rebuild everything. No `--parallel`: that flag only splits XCTest into worker processes; Swift Testing
# already runs suites concurrently in one process, and lab names are unique per process and per lab, so
# namespace tests may overlap. On 2 cores the whole run is dominated by the build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $EUID -eq 0 ]]; then
    scripts/netlab.sh sweep
fi

time swift build --build-tests -Xswiftc -warnings-as-errors
time swift test --skip-build "$@"

if [[ -x scripts/fuzz.sh ]]; then
    time scripts/fuzz.sh 30 dns
    time scripts/fuzz.sh 20 wire
    time scripts/fuzz.sh 20 handshake
    time scripts/fuzz.sh 20 record
fi
