#!/usr/bin/env bash
# Runs avahi-daemon inside one network namespace with a configuration, service directory and runtime
# directory of its own, in the foreground, until it is signalled (SIGTERM makes avahi send goodbyes).
#
#   avahi_ns.sh NAMESPACE WORKDIR [--dbus] [--host-name NAME] [SERVICE_FILE...]
#
# WORKDIR (created if missing) receives avahi-daemon.conf, services/ (the given *.service files) and run/.
# Inside a private mount namespace (unshare --mount, private propagation) services/ is bind-mounted over
# /etc/avahi/services and run/ over /run/avahi-daemon, so the host's files are never read or written.
# With --dbus, a private system bus (dbus-daemon --system --address=unix:path=WORKDIR/dbus.sock) is started in
# the namespace first and avahi registers on it; then, from the same namespace,
#   DBUS_SYSTEM_BUS_ADDRESS=unix:path=WORKDIR/dbus.sock avahi-browse -rpt _chat._tcp
# browses through this avahi-daemon (see avahi_browse_ns.sh).
# Without --dbus, avahi still answers queries and publishes the static services (enable-dbus=no).
set -euo pipefail

usage() { echo "usage: avahi_ns.sh NAMESPACE WORKDIR [--dbus] [--host-name NAME] [SERVICE_FILE...]" >&2; exit 64; }
[[ $# -ge 2 ]] || usage
ns=$1 work=$2
shift 2
dbus=no host_name="avahi-${ns}"
files=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dbus) dbus=yes ;;
        --host-name) host_name=${2:?}; shift ;;
        *) files+=("$1") ;;
    esac
    shift
done

mkdir -p "$work/services" "$work/run"
work=$(cd "$work" && pwd)
for f in "${files[@]+"${files[@]}"}"; do cp "$f" "$work/services/"; done
cat > "$work/avahi-daemon.conf" <<CONF
[server]
host-name=${host_name}
use-ipv4=yes
use-ipv6=yes
allow-interfaces=lab0
enable-dbus=${dbus}
disallow-other-stacks=no
ratelimit-interval-usec=1000000
ratelimit-burst=1000

[wide-area]
enable-wide-area=no

[publish]
disable-publishing=no
publish-addresses=yes
publish-hinfo=no
publish-workstation=no

[reflector]
enable-reflector=no

[rlimits]
CONF

inner='mount --bind "$WORK/services" /etc/avahi/services && mount --bind "$WORK/run" /run/avahi-daemon && '
avahi='avahi-daemon -f "$WORK/avahi-daemon.conf" --no-drop-root --no-chroot --no-rlimits'
if [[ $dbus == yes ]]; then
    # The shell stays as parent so that the private bus ends with avahi-daemon; signals are passed on.
    rm -f "$work/dbus.sock"
    inner+='dbus-daemon --system --nofork --nopidfile --address="unix:path=$WORK/dbus.sock" & bus=$!; '
    inner+='for _ in $(seq 50); do [ -S "$WORK/dbus.sock" ] && break; sleep 0.1; done; '
    inner+='DBUS_SYSTEM_BUS_ADDRESS="unix:path=$WORK/dbus.sock" '"$avahi"' & av=$!; '
    inner+='trap "kill -TERM \$av" TERM INT; wait $av; wait $av; status=$?; kill $bus; wait $bus; exit $status'
else
    inner+="exec $avahi"
fi
# /run/avahi-daemon may not exist on the host; bind mounts need a mount point, so create it (empty) if missing.
mkdir -p /run/avahi-daemon
exec env WORK="$work" ip netns exec "$ns" unshare --mount --propagation private sh -c "$inner"
