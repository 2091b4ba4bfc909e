#!/usr/bin/env bash
# Turns a soak's samples (one row per peer and sample, as multipeer-chaos writes them) into one row per minute with
# a column per peer (rss_P0, heap_P0, fds_P0, cpu_P0, ...), and plots resident memory, heap in use, descriptors
# and CPU per peer over time with scripts/plot.py.
#
#   scripts/soak_plot.sh SAMPLES.csv WIDE.csv PLOT.svg
set -euo pipefail
cd "$(dirname "$0")/.."
samples=$1 wide=$2 plot=$3
python3 - "$samples" "$wide" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
peers = sorted({row["peer"] for row in rows}, key=lambda name: int(name[1:]))
table = {}
incarnations = {}
for row in rows:
    minute = round(float(row["minutes"]))
    entry = table.setdefault(minute, {})
    entry["rss_" + row["peer"]] = row["rss_mib"]
    entry["heap_" + row["peer"]] = row.get("heap_mib", "")
    entry["fds_" + row["peer"]] = row["fds"]
    # The first sample of an incarnation has no CPU share yet (a gap, not a zero).
    first = incarnations.get(row["peer"]) != row["incarnation"]
    incarnations[row["peer"]] = row["incarnation"]
    entry["cpu_" + row["peer"]] = "" if first else row["cpu_percent"]
columns = ["minute"] + [f"{kind}_{peer}" for kind in ("rss", "heap", "fds", "cpu") for peer in peers]
with open(sys.argv[2], "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(columns)
    for minute in sorted(table):
        writer.writerow([minute] + [table[minute].get(column, "") for column in columns[1:]])
PY
peers=$(head -1 "$wide" | tr ',' '\n' | sed -n 's/^rss_//p' | paste -sd' ')
panel() { local kind=$1 out="" peer; for peer in $peers; do out+="${out:++}${kind}_${peer}"; done; echo "$out"; }
scripts/plot.py "$wide" --x minute --y "$(panel rss),$(panel heap),$(panel fds),$(panel cpu)" \
    --ylabels "resident MiB,heap in use MiB,descriptors,CPU %" --xlabel "minutes" \
    --title "Soak: 8 peers chatting, sending files, leaving and rejoining for an hour (one line per peer)" \
    --out "$plot"
