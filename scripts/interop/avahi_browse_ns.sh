#!/usr/bin/env bash
# Runs avahi-browse inside a namespace against the private system bus of an avahi_ns.sh --dbus instance.
#
#   avahi_browse_ns.sh NAMESPACE WORKDIR [avahi-browse arguments, default: -rpt _chat._tcp]
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: avahi_browse_ns.sh NAMESPACE WORKDIR [ARGS...]" >&2; exit 64; }
ns=$1 work=$(cd "$2" && pwd)
shift 2
[[ $# -gt 0 ]] || set -- -rpt _chat._tcp
exec ip netns exec "$ns" env DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/dbus.sock" avahi-browse "$@"
