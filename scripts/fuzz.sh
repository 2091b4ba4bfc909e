#!/usr/bin/env bash
# Fuzzes the mDNS message decoder with libFuzzer for a number of seconds (default 300).
# Crash inputs land in fuzz-artifacts/; the script exits non-zero if libFuzzer finds one.
# Replay a corpus or an artifact without sanitizers: swift run mdns-fuzz Fuzz/corpus/dns fuzz-artifacts
set -euo pipefail

duration="${1:-300}"
cd "$(dirname "$0")/.."

swift build -c release --product mdns-fuzz --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING

seeds=Fuzz/corpus/dns
if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
    MDNS_FUZZ_SEED_DIR="$PWD/$seeds" swift test --filter FuzzSeedTests
fi

# libFuzzer writes new inputs into the first directory; keep the committed seeds untouched.
corpus=.build-fuzz/corpus/dns
mkdir -p "$corpus" fuzz-artifacts

SWIFT_BACKTRACE=enable=no .build-fuzz/release/mdns-fuzz \
    -max_total_time="$duration" -max_len=9000 -print_final_stats=1 \
    -artifact_prefix=fuzz-artifacts/ "$corpus" "$seeds"
