#!/usr/bin/env bash
# Fuzzes a decoder with libFuzzer for a number of seconds (default 300):
# `scripts/fuzz.sh [SECONDS] [dns|wire|handshake|record|unicast|turn|session|offer|peerid|events]`, the mDNS message
# decoder (default), the peer-connection frame decoder, the connection setup (preamble and hello parsers with the
# plaintext connection state machine behind them), the TLS record layer (parsing, AEAD, round trips and tampering), a
# DNS server's answers to a wide-area peer (unicast limits, transaction signatures, what a poll reads), a TURN
# relay's STUN messages (the codec and the client's state machine), a member's session control messages and
# connection data, a member's resource offers and the file names they are saved under, archived MCPeerIDs
# (NSKeyedUnarchiver with secure coding), or what a peer sends a PeerConnectivity manager (events, typed messages).
# Crash inputs land in fuzz-artifacts/; the script exits non-zero if libFuzzer finds one.
# Replay a corpus or an artifact without sanitizers: swift run mdns-fuzz Fuzz/corpus/dns fuzz-artifacts (with
# --wire, --session... for the other targets)
set -euo pipefail

duration="${1:-300}"
target="${2:-dns}"
targets="dns|wire|handshake|record|unicast|turn|session|offer|peerid|events"
case "$target" in dns | wire | handshake | record | unicast | turn | session | offer | peerid | events) ;;
*) echo "usage: scripts/fuzz.sh [SECONDS] [$targets]" >&2; exit 64 ;; esac
cd "$(dirname "$0")/.."
source scripts/mirrors.sh
use_package_mirrors

swift build -c release --product mdns-fuzz --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING

seeds=Fuzz/corpus/$target
if [ -z "$(ls -A "$seeds" 2>/dev/null)" ]; then
    if [ "$target" = dns ]; then
        MDNS_FUZZ_SEED_DIR="$PWD/$seeds" swift test --filter FuzzSeedTests
    else
        swift run mdns-fuzz "--write-$target-seeds" "$seeds"
    fi
fi

# libFuzzer writes new inputs into the first directory; keep the committed seeds untouched.
corpus=.build-fuzz/corpus/$target
mkdir -p "$corpus" fuzz-artifacts

# A TCP answer may be 65,535 bytes, a session message 3 bytes of kind and flags and a body of up to 16 KiB; the
# other targets' inputs are datagrams, records or messages of at most 9000.
max_len=9000
[ "$target" = unicast ] && max_len=65535
[ "$target" = session ] && max_len=16387
# Foundation logs a line for every archive it refuses: the peerid target runs with its stderr closed (libFuzzer's
# and the sanitizers' reports still show; replay a crash without sanitizers to read Swift's message).
quiet=()
[ "$target" = peerid ] && quiet=(-close_fd_mask=2)
MULTIPEER_FUZZ_TARGET=$target SWIFT_BACKTRACE=enable=no LSAN_OPTIONS=suppressions=Fuzz/lsan-suppressions.txt \
    .build-fuzz/release/mdns-fuzz -max_total_time="$duration" -max_len=$max_len -print_final_stats=1 \
    -artifact_prefix=fuzz-artifacts/ "${quiet[@]}" "$corpus" "$seeds"
