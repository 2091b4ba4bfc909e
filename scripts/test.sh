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

# What each package is for: building (OpenSSL 3 headers found through pkg-config), the namespace lab (`ip`,
# `sysctl` in scripts/netlab.sh), peers we did not write (python-zeroconf, avahi-daemon, avahi-browse and a
# private dbus-daemon), and the iperf3 baseline of `multipeer-bench`.
build_packages=(libssl-dev pkg-config)
test_packages=(iproute2 procps python3-zeroconf avahi-daemon avahi-utils dbus iperf3 tmux)

# Prints the packages of the arguments that are not installed ("ii" in dpkg's database: a package removed
# with its configuration files kept is still known to dpkg, but not installed).
missing_packages() {
    local package
    for package in "$@"; do
        [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$package" 2>/dev/null) == ii* ]] || echo "$package"
    done
}

# Installs packages without letting their maintainer scripts start a daemon: avahi-daemon started in the root
# namespace would multicast on the machine's real interfaces. A policy-rc.d that exits 101 ("action
# forbidden") stops invoke-rc.d and deb-systemd-invoke from starting services; an existing one is left alone.
install_packages() {
    local policy=/usr/sbin/policy-rc.d
    local policy_added=no
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod +x "$policy"
        policy_added=yes
        # Removed however apt-get ends, so a failed install cannot leave services forbidden on this machine.
        trap 'rm -f '"$policy" EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "$@"
    if [[ $policy_added == yes ]]; then
        rm -f "$policy"
        trap - EXIT
    fi
}

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
    mapfile -t missing_build < <(missing_packages "${build_packages[@]}")
    if (( ${#missing_build[@]} > 0 )); then
        echo "test.sh: the build needs ${missing_build[*]}: run this script as root to install them," \
            "or: sudo apt-get install ${missing_build[*]}" >&2
        exit 1
    fi
    mapfile -t missing_test < <(missing_packages "${test_packages[@]}")
    if (( ${#missing_test[@]} > 0 )); then
        echo "test.sh: not installed: ${missing_test[*]}; the tests that need them will skip and name them" \
            "(run this script as root to install them)"
    fi
fi

time swift build --build-tests -Xswiftc -warnings-as-errors
time swift test --skip-build "$@"

if [[ -x scripts/fuzz.sh ]]; then
    time scripts/fuzz.sh 30 dns
    time scripts/fuzz.sh 20 wire
    time scripts/fuzz.sh 20 handshake
    time scripts/fuzz.sh 20 record
fi
