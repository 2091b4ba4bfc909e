#!/usr/bin/env bash
# The project's benchmark command: every `multipeer-bench` suite in a release build, each with its baselines
# measured in the same run, then the generated tables of docs/BENCHMARKS.md and the scaling plot rewritten.
#
#   scripts/bench.sh                        every suite (about 30 minutes on 2 cores)
#   scripts/bench.sh --quick                fewer runs and less work per run, to try it (about 10 minutes)
#   scripts/bench.sh --only scaling,lock    some suites only (the others' tables are left as they are)
#   scripts/bench.sh --no-docs              measure only: results in .build/bench/, docs untouched
#
# Suites: lock, baseline, connection, session, discovery, widearea, scaling. Steps:
#   1. on Debian as root: install the packages the build and the suites use when missing (`apt-get update`
#      only then) and sweep lab namespaces left by dead processes; as another user, list what is missing and run
#      only the suites that need no root (lock, baseline, connection);
#   2. the release build of `multipeer` and `multipeer-bench` (SwiftPM mirrors as in scripts/test.sh);
#   3. each suite with `--results`: its report in .build/bench/STAMP/SUITE.txt, its rows in SUITE.json; a suite
#      that fails is reported and the others still run;
#   4. scripts/bench/update_docs.py rewrites the blocks between `<!-- bench:SUITE:begin -->` and
#      `<!-- bench:SUITE:end -->` in docs/BENCHMARKS.md; scripts/plot.py draws docs/scaling.svg.
# Benchmarks send traffic only on loopback and inside the network-namespace labs they create and remove.
# Exits 0 when every suite ran (missed targets included: this is a report), 1 when one failed.
set -euo pipefail
cd "$(dirname "$0")/.."

all_suites=(lock baseline connection session discovery widearea scaling)
rootless_suites=(lock baseline connection)
quick=()
only=""
docs=yes
while (( $# > 0 )); do
    case $1 in
        --quick) quick=(--quick) ;;
        --only)
            [[ $# -ge 2 ]] || { echo "bench.sh: --only wants suites, e.g. --only scaling,lock" >&2; exit 64; }
            only=$2
            shift
            ;;
        --no-docs) docs=no ;;
        -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done
suites=("${all_suites[@]}")
if [[ -n $only ]]; then
    IFS=, read -r -a suites <<< "$only"
    for suite in "${suites[@]}"; do
        [[ " ${all_suites[*]} " == *" $suite "* ]] || { echo "bench.sh: no suite '$suite' (${all_suites[*]})" >&2; exit 64; }
    done
fi

source scripts/packages.sh
source scripts/mirrors.sh

# What the suites run besides our own binaries: the lab (`ip`), /proc readers, python-zeroconf (discovery and
# scaling baselines), iperf3 (connection and file baselines), Knot, coturn and iptables (widearea).
bench_packages=(iproute2 procps python3 python3-zeroconf iperf3 knot knot-dnsutils coturn iptables)

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    echo "bench.sh: not a Debian system: packages not checked"
elif [[ $EUID -eq 0 ]]; then
    mapfile -t missing < <(missing_packages "${build_packages[@]}" "${bench_packages[@]}")
    if (( ${#missing[@]} > 0 )); then
        echo "bench.sh: installing ${missing[*]}"
        install_packages "${missing[@]}"
    fi
    scripts/netlab.sh sweep
else
    ensure_build_packages bench.sh
    mapfile -t missing < <(missing_packages "${bench_packages[@]}")
    if (( ${#missing[@]} > 0 )); then
        echo "bench.sh: not installed: ${missing[*]} (run as root to install them)"
    fi
fi

use_package_mirrors
build_started=$SECONDS
# One product per command: SwiftPM builds only the last of several --product options.
swift build -c release --product multipeer
swift build -c release --product multipeer-bench
echo "bench.sh: release build took $((SECONDS - build_started)) s"

stamp=$(date -u +%Y%m%d-%H%M%S)
out=.build/bench/$stamp
mkdir -p "$out"
started=$SECONDS
started_at=$(date -u +"%Y-%m-%d %H:%M UTC")
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
failed=()
results=()
for suite in "${suites[@]}"; do
    json=$out/$suite.json
    if [[ $EUID -ne 0 && " ${rootless_suites[*]} " != *" $suite "* ]]; then
        echo "bench.sh: $suite needs root (network-namespace labs): skipped"
        printf '{"suite": "%s", "started": "%s", "error": "skipped: the suite needs root (network-namespace labs)"}\n' \
            "$suite" "$started_at" > "$json"
        results+=("$json")
        continue
    fi
    echo "bench.sh: $suite (report: $out/$suite.txt)"
    suite_started=$SECONDS
    status=0
    .build/release/multipeer-bench "$suite" "${quick[@]}" --results "$json" 2>"$out/$suite.log" \
        | tee "$out/$suite.txt" || status=$?
    echo "bench.sh: $suite took $((SECONDS - suite_started)) s (exit status $status)"
    if (( status != 0 )); then
        failed+=("$suite")
    fi
    # A suite that stopped on an error still writes what it measured, with the error as a failed row; only
    # when it wrote nothing does its block say why from the end of its log.
    if [[ ! -s $json ]]; then
        [[ " ${failed[*]} " == *" $suite "* ]] || failed+=("$suite")
        reason=$(tail -n 3 "$out/$suite.log" | tr '\n"\\' "  /" | cut -c1-300)
        printf '{"suite": "%s", "started": "%s", "error": "exit status %s: %s (full log: %s)"}\n' \
            "$suite" "$started_at" "$status" "$reason" "$out/$suite.log" > "$json"
    fi
    results+=("$json")
done
took=$((SECONDS - started))

summary="Last run of \`scripts/bench.sh${quick:+ --quick}${only:+ --only $only}\`: $started_at, $took s for the suites"
summary+=" (${suites[*]}) after the release build, nproc $(nproc), kernel $(uname -r), load average $load_at_start"
summary+=" at the start and $(cut -d' ' -f1-3 /proc/loadavg) at the end"
(( ${#failed[@]} == 0 )) || summary+="; failed: ${failed[*]}"
summary+="."
python3 -c 'import json, sys; json.dump({"suite": "run", "summary": sys.argv[1]}, open(sys.argv[2], "w"))' \
    "$summary" "$out/run.json"
echo "bench.sh: $summary"

if [[ $docs == yes ]]; then
    csv=()
    [[ -s $out/scaling.json ]] && csv=(--csv "$out/scaling.csv")
    # Only a full run (all suites) rewrites the line about the last full run.
    run_json=()
    [[ -z $only ]] && run_json=("$out/run.json")
    scripts/bench/update_docs.py --doc docs/BENCHMARKS.md "${csv[@]}" "${results[@]}" "${run_json[@]}"
    if [[ -s $out/scaling.csv ]] && grep -q mesh_s "$out/scaling.csv"; then
        # Four panels: times, CPU seconds, resident memory, idle CPU; ours and python-zeroconf side by side.
        panels=discovery_s+discovery_zeroconf_s+mesh_s
        panels+=,cpu_mesh_s+cpu_discovery_s+cpu_zeroconf_s
        panels+=,rss_mesh_mib+rss_discovery_mib+rss_zeroconf_mib
        panels+=,idle_cpu_pct
        names="discovery_s=all discovered (ours),discovery_zeroconf_s=all discovered (python-zeroconf)"
        names+=",mesh_s=full mesh (ours),cpu_mesh_s=to form the mesh (ours),cpu_discovery_s=to discover (ours)"
        names+=",cpu_zeroconf_s=to discover (python-zeroconf),rss_mesh_mib=meshed (ours)"
        names+=",rss_discovery_mib=discovery (ours),rss_zeroconf_mib=discovery (python-zeroconf)"
        names+=",idle_cpu_pct=idle when meshed (ours)"
        scripts/plot.py "$out/scaling.csv" --x peers --logx --xlabel "peers (one process each, own namespace)" \
            --y "$panels" --labels "$names" \
            --ylabels "seconds from the first spawn,CPU seconds per peer,MiB resident per peer,% of one core per peer" \
            --title "multipeer-bench scaling: $(nproc) cores, $started_at" --out docs/scaling.svg
        echo "bench.sh: docs/scaling.svg drawn from $out/scaling.csv"
    fi
fi
echo "bench.sh: results in $out"
(( ${#failed[@]} == 0 ))
