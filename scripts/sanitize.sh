#!/usr/bin/env bash
# Builds the package and runs its tests under a sanitizer: `scripts/sanitize.sh thread|address [swift test args]`,
# e.g. `scripts/sanitize.sh address --filter SessionTests`.
#
# Each sanitizer builds into its own scratch path (.build-thread, .build-address), so the normal build stays as it
# is. Every process the tests start (the multipeer tool, the example apps) is built with the same sanitizer and
# writes its reports next to the test runner's, one file per process, in .build-<sanitizer>/reports/; the run fails
# if the tests fail or if any report was written (reports are printed at the end). The thread sanitizer's
# suppressions live in scripts/sanitize/thread.supp, each with a comment that names what it suppresses and why; the
# address sanitizer has none.
#
# Timing-bound tests read MULTIPEER_TEST_TIME_FACTOR (set here: 6 under thread, 3 under address) and stretch their
# deadlines by it: sanitized code runs several times slower, and a deadline is not what those tests check.
# The tests need the same packages and root as scripts/test.sh (run that once first on a fresh machine).
set -euo pipefail

sanitizer="${1:-}"
case "$sanitizer" in thread | address) ;; *) echo "usage: scripts/sanitize.sh thread|address [swift test arguments]" >&2; exit 64 ;; esac
shift
cd "$(dirname "$0")/.."
source scripts/mirrors.sh
use_package_mirrors

scratch=".build-$sanitizer"
reports="$PWD/$scratch/reports"
rm -rf "$reports"
mkdir -p "$reports"

time swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch" -Xswiftc -warnings-as-errors

suppressions="$PWD/scripts/sanitize/$sanitizer.supp"
if [[ $sanitizer == thread ]]; then
    export MULTIPEER_TEST_TIME_FACTOR="${MULTIPEER_TEST_TIME_FACTOR:-6}"
    export TSAN_OPTIONS="log_path=$reports/tsan suppressions=$suppressions history_size=4 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
else
    export MULTIPEER_TEST_TIME_FACTOR="${MULTIPEER_TEST_TIME_FACTOR:-3}"
    # LeakSanitizer is off: the Swift runtime keeps metadata and caches for the life of the process by design;
    # what the project frees is checked by its own tests (descriptors, memory across rounds).
    export ASAN_OPTIONS="log_path=$reports/asan detect_leaks=0 ${ASAN_OPTIONS:-}"
fi
# The backtracer would hang on a sanitizer's abort; the sanitizer prints its own stacks.
export SWIFT_BACKTRACE=enable=no
# At most this many tests at once (the testing library starts every test at once otherwise). Sanitized code is
# several times slower, and hundreds of tests sharing two cores starved each other for minutes: a 300 ms sleep
# that resumed after 800 s, deadlines missed by the dozen. A stretched deadline cannot cover that; fewer tests
# at a time can.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-4}"

status=0
time swift test --skip-build --sanitize="$sanitizer" --scratch-path "$scratch" "$@" || status=$?

shopt -s nullglob
written=("$reports"/*)
if (( ${#written[@]} > 0 )); then
    echo "sanitize.sh: $sanitizer sanitizer reports from ${#written[@]} processes:"
    for report in "${written[@]}"; do
        echo "==== $report"
        cat "$report"
    done
    status=1
else
    echo "sanitize.sh: no $sanitizer sanitizer reports"
fi
exit $status
