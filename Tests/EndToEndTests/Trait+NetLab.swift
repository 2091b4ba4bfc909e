import NetLab
import Testing

extension Trait where Self == ConditionTrait {
    /// Skips a test that needs the namespace lab (root, iproute2, network namespaces) where it cannot run, and
    /// says why in the test output (the comment of a skipped test is printed with it).
    static var requiresNetLab: Self {
        .enabled(
            if: NetLab.unavailableReason == nil,
            Comment(rawValue: NetLab.unavailableReason ?? "NetLab is available"))
    }

    /// Skips a test that runs the `multipeer` discovery commands until the built binary implements them.
    static var requiresDiscoveryCLI: Self {
        .enabled(
            if: MultipeerBinary.discoveryUnavailableReason == nil,
            Comment(rawValue: MultipeerBinary.discoveryUnavailableReason ?? "the discovery CLI is available"))
    }
}

extension Tag {
    /// Tests of the `multipeer` command-line contract; they wait for the CLI to be merged.
    @Tag static var needsCLI: Self
    /// Tests that run software we did not write (python-zeroconf, avahi) inside the lab.
    @Tag static var interop: Self
}
