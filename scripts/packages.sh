# Sourced by scripts/test.sh and scripts/demo.sh: the Debian packages the project uses, and how they are checked
# and installed.

# What each package is for: building (OpenSSL 3 headers found through pkg-config), the namespace lab (`ip`,
# `sysctl` in scripts/netlab.sh), peers we did not write (python-zeroconf, avahi-daemon, avahi-browse and a
# private dbus-daemon), the iperf3 baseline of `multipeer-bench`, and the servers of wide-area discovery and
# relaying (Knot DNS with its kdig and knsupdate, coturn, iptables for the routed lab's firewall and NAT).
build_packages=(libssl-dev pkg-config)
test_packages=(iproute2 procps python3-zeroconf avahi-daemon avahi-utils dbus iperf3 tmux knot knot-dnsutils coturn iptables)

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

# As root on Debian, installs the build's packages when missing; as another user, stops with the command to
# run when they are missing. `$1` names the calling script in messages.
ensure_build_packages() {
    command -v dpkg-query >/dev/null && command -v apt-get >/dev/null || return 0
    local missing
    mapfile -t missing < <(missing_packages "${build_packages[@]}")
    (( ${#missing[@]} == 0 )) && return 0
    if [[ $EUID -eq 0 ]]; then
        echo "$1: installing ${missing[*]}"
        install_packages "${missing[@]}"
    else
        echo "$1: the build needs ${missing[*]}: run this script as root to install them," \
            "or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
}
