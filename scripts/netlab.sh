#!/usr/bin/env bash
# Manual network-namespace lab with the same layout as Sources/NetLab (see NetLab.swift).
#
#   netlab.sh up N [--no-ipv6]   create N hosts; prints the lab id, then one line per namespace
#   netlab.sh down ID            delete every namespace of lab ID (killing what runs inside)
#   netlab.sh sweep              delete labs whose creating process is dead
#   netlab.sh list               list lab namespaces
#
# Layout: namespace mpl<id>-sw holds bridge br0 (multicast snooping off, forward delay 0, no STP, IPv6 off);
# namespace mpl<id>-hI holds interface lab0 (veth to port hI on the bridge) with 198.(18|19).X.(I+10)/24 and
# fdXX:XXXX:XXXX:YYYY::(I+10)/64 (no DAD), lo up, and a route for 224.0.0.0/4 on lab0.
# Nothing is created in the root namespace: every link is created inside a lab namespace (ip -n).
# Namespaces of a lab made by this script embed the pid of this shell's parent (the interactive shell),
# so `sweep` only removes them once that shell has exited.
set -euo pipefail

prefix=mpl

die() { echo "netlab.sh: $*" >&2; exit 1; }

ns_exec() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# Deletes one namespace after killing the processes inside it.
delete_ns() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n "$pids" ]]; then kill -9 $pids 2>/dev/null || true; fi
    ip netns delete "$ns" 2>/dev/null || true
}

cmd_up() {
    local n=${1:?usage: netlab.sh up N [--no-ipv6]} ipv6=1
    [[ "${2:-}" == "--no-ipv6" ]] && ipv6=0
    (( n >= 1 )) || die "need at least one host"
    local owner=$PPID rand id sw net ula
    rand=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    id="${owner}x${rand:0:4}"
    sw="${prefix}${id}-sw"
    # 198.18.0.0/15 holds 512 /24s; pick one so overlapping labs never share a range.
    local r=$(( 0x${rand} % 512 ))
    net="198.$(( 18 + r / 256 )).$(( r % 256 ))"
    ula="fd$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n' | sed -E 's/^(..)(....)(....)$/\1:\2:\3/')"
    ula="${ula}:$(od -An -N2 -tx1 /dev/urandom | tr -d ' \n')"
    ip netns add "$sw"
    ns_exec "$sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge mcast_snooping 0 forward_delay 0 stp_state 0
    ip -n "$sw" link set br0 up
    echo "$id"
    echo "$sw"
    local i ns
    for (( i = 0; i < n; i++ )); do
        ns="${prefix}${id}-h${i}"
        ip netns add "$ns"
        ns_exec "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.all.accept_dad=0 \
            net.ipv6.conf.all.keep_addr_on_down=1
        ip -n "$sw" link add "h${i}" type veth peer name lab0 netns "$ns"
        ip -n "$sw" link set "h${i}" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "${net}.$(( i + 10 ))/24" dev lab0
        if (( ipv6 )); then ip -n "$ns" addr add "${ula}::$(( i + 10 ))/64" dev lab0 nodad; fi
        ip -n "$ns" link set lab0 up
        ip -n "$ns" route add 224.0.0.0/4 dev lab0
        echo "$ns ${net}.$(( i + 10 ))$( (( ipv6 )) && echo " ${ula}::$(( i + 10 ))")"
    done
    if (( n >= 2 )); then
        # A TCP connection to a closed port is refused by host 1 only if packets go both ways.
        local ok=0
        for _ in 1 2 3 4 5; do
            local reply
            reply=$(ns_exec "${prefix}${id}-h0" timeout 2 bash -c "echo > /dev/tcp/${net}.11/9" 2>&1 || true)
            if [[ "$reply" == *"Connection refused"* ]]; then ok=1; break; fi
            sleep 0.2
        done
        (( ok )) || { cmd_down "$id"; die "host 0 cannot reach host 1"; }
    fi
}

lab_namespaces() { ip netns list | awk '{print $1}' | grep -E "^${prefix}$1-" || true; }

cmd_down() {
    local id=${1:?usage: netlab.sh down ID} ns
    for ns in $(lab_namespaces "$id"); do delete_ns "$ns"; done
}

cmd_sweep() {
    local ns pid
    for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}[0-9]+x[0-9a-f]+-" || true); do
        pid=${ns#"$prefix"}; pid=${pid%%x*}
        if ! kill -0 "$pid" 2>/dev/null; then echo "sweeping $ns"; delete_ns "$ns"; fi
    done
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down "$@" ;;
    sweep) cmd_sweep ;;
    list) lab_namespaces '[0-9]+x[0-9a-f]+' ;;
    *) echo "usage: netlab.sh up N [--no-ipv6] | down ID | sweep | list" >&2; exit 64 ;;
esac
