#!/usr/bin/env bash
# The README's "main job" on a fresh machine: installs what the build needs when it is missing (as root on
# Debian: OpenSSL 3 headers and pkg-config), builds the tool and runs `multipeer demo` (three peers on loopback;
# nothing leaves the machine). Arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh
ensure_build_packages demo.sh
source scripts/mirrors.sh
use_package_mirrors
swift build --product multipeer
exec "$(swift build --show-bin-path)/multipeer" demo "$@"
