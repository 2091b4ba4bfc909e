# Sourced by scripts/test.sh, scripts/demo.sh and scripts/fuzz.sh. Where GitHub cannot be reached, a folder of
# offline git mirrors of the packages Package.swift names (bare clones named like `swift-log.git`) can stand beside
# the checkout as `../shared/swiftpm`, or be named by SWIFTPM_MIRRORS. When one is found, SwiftPM is pointed at it
# (`swift package config set-mirror`, kept in `.swiftpm/configuration/mirrors.json`, which is not committed);
# otherwise nothing is set and SwiftPM fetches from GitHub as on any machine with network access.

# The package URLs of Package.swift that a mirror can stand in for.
mirrored_packages=(
    https://github.com/apple/swift-log.git
    https://github.com/apple/swift-argument-parser.git
    https://github.com/apple/swift-collections.git
)

use_package_mirrors() {
    local folder=${SWIFTPM_MIRRORS:-}
    if [[ -z $folder && -d ../shared/swiftpm ]]; then
        folder=$(cd ../shared/swiftpm && pwd)
    fi
    [[ -n $folder ]] || return 0
    if [[ ! -d $folder ]]; then
        echo "mirrors: SWIFTPM_MIRRORS=$folder is not a folder" >&2
        exit 1
    fi
    local url mirror
    for url in "${mirrored_packages[@]}"; do
        mirror="$folder/$(basename "$url")"
        if [[ -d $mirror ]]; then
            swift package config set-mirror --original "$url" --mirror "$mirror"
        else
            echo "mirrors: no $(basename "$url") in $folder: SwiftPM will fetch $url" >&2
        fi
    done
}
