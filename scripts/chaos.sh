#!/usr/bin/env bash
# The chaos run: N peers (processes in a lab of network namespaces) in one session while the driver kills them
# (-9, during handshakes, invitations and transfers too), makes them leave and come back, takes links down and up,
# sends files to a receiver whose disk is full and stalls readers; the rules it checks are in
# Sources/MultipeerChaos/ChaosLedger.swift and docs/TESTING.md. Needs root (namespaces, a tmpfs mount).
#
#   scripts/chaos.sh                      2 minutes, 6 peers (what CI runs)
#   scripts/chaos.sh --minutes 30 --peers 8 --seed 42 --log /tmp/chaos.log
#   scripts/chaos.sh --soak               the hour-long soak (8 peers chatting, sending files, leaving and
#                                         rejoining; no kills or cuts), samples to docs/soak.csv (a column per
#                                         peer), its report to .build/soak.txt, plotted to
#                                         docs/soak.svg by scripts/plot.py
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mirrors.sh
use_package_mirrors
swift build --product multipeer-chaos >/dev/null
binary=$(swift build --show-bin-path)/multipeer-chaos
if [[ " $* " == *" --soak "* ]]; then
    samples=$(mktemp)
    status=0
    "$binary" run --samples "$samples" "$@" | tee .build/soak.txt || status=$?
    scripts/soak_plot.sh "$samples" docs/soak.csv docs/soak.svg
    rm -f "$samples"
    exit "$status"
fi
exec "$binary" run --peers 6 --minutes 2 "$@"
