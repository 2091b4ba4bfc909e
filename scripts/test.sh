#!/usr/bin/env bash
# The project's test command (named in the README; CI runs it through .ci/run):
#   1. the Debian packages the tests use: as root, install what is missing (`apt-get update` only then) and
#      sweep stale lab namespaces; as another user, list what is missing (the tests that need it skip
#      themselves and name the package), and stop if the build itself cannot work;
#   2. build every target, tests included, with warnings as errors;
#   3. run every test (the end-to-end tests need root; without it they are skipped and say why);
#   4. a short fuzz smoke run if scripts/fuzz.sh exists.
# Arguments go to `swift test`, e.g. `scripts/test.sh --filter EndToEndTests`.
#
# `swift test --skip-build` reuses the build of step 2: running `swift test` with different flags would
# rebuild everything. No `--parallel`: that flag only splits XCTest into worker processes; Swift Testing
# already runs suites concurrently in one process, and lab names are unique per process and per lab, so
# namespace tests may overlap. On 2 cores the whole run is dominated by the build.
set -euo pipefail
cd "$(dirname "$0")/.."

# The package lists and the helpers that check and install them (shared with scripts/demo.sh).
source scripts/packages.sh
source scripts/mirrors.sh

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "test.sh: not a Debian system: the packages below are not checked; tests that lack what they need" \
        "skip themselves and say what is missing"
elif [[ $EUID -eq 0 ]]; then
    mapfile -t missing < <(missing_packages "${build_packages[@]}" "${test_packages[@]}")
    if (( ${#missing[@]} > 0 )); then
        echo "test.sh: installing ${missing[*]}"
        install_packages "${missing[@]}"
        if [[ " ${missing[*]} " == *" avahi-daemon "* ]]; then
            # Installed here for the lab only: should a service manager have started it anyway, stop it and keep
            # it from starting at boot. An avahi-daemon that was installed before is the machine owner's; the
            # lab's instances never meet it (each runs in its own network and mount namespace).
            service avahi-daemon stop >/dev/null 2>&1 || true
            systemctl disable --now avahi-daemon.service avahi-daemon.socket >/dev/null 2>&1 || true
        fi
    fi
    echo "test.sh: stale lab namespaces:"
    scripts/netlab.sh sweep
else
    ensure_build_packages test.sh  # as another user: stops with the command to run when the build cannot work
    mapfile -t missing_test < <(missing_packages "${test_packages[@]}")
    if (( ${#missing_test[@]} > 0 )); then
        echo "test.sh: not installed: ${missing_test[*]}; the tests that need them will skip and name them" \
            "(run this script as root to install them)"
    fi
fi

use_package_mirrors
time swift build --build-tests -Xswiftc -warnings-as-errors
time swift test --skip-build "$@"

# Two minutes of chaos (faults together, invariants throughout; `scripts/chaos.sh --minutes N` for longer).
if [[ $EUID -eq 0 ]]; then
    time scripts/chaos.sh
else
    echo "test.sh: the chaos run needs root (network namespaces, a tmpfs mount): skipped"
fi
if [[ -x scripts/fuzz.sh ]]; then
    time scripts/fuzz.sh 30 dns
    time scripts/fuzz.sh 20 wire
    time scripts/fuzz.sh 20 handshake
    time scripts/fuzz.sh 20 record
    time scripts/fuzz.sh 20 unicast
    time scripts/fuzz.sh 20 turn
    time scripts/fuzz.sh 20 session
    time scripts/fuzz.sh 20 offer
    time scripts/fuzz.sh 20 peerid
    time scripts/fuzz.sh 20 events
fi
