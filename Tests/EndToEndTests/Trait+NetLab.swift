import NetLab
import Testing

extension Trait where Self == ConditionTrait {
    /// Skips a test where something it needs is missing, and says what in the test output (the comment of a
    /// skipped test is printed with it): every unmet requirement, with the Debian package that provides it.
    ///
    /// List everything the test needs in one trait: a suite's skip hides its tests' own traits, so a test that
    /// needs a package and the lab names both here, and a user without root still learns the package is missing.
    static func requires(_ requirements: LabRequirement...) -> Self {
        let reason = LabRequirement.unmetReason(of: requirements)
        return .enabled(if: reason == nil, Comment(rawValue: reason ?? "everything it needs is here"))
    }

    /// Skips a test that needs the namespace lab (root, iproute2, network namespaces) where it cannot run, and
    /// says why.
    static var requiresNetLab: Self { .requires(.netLab) }
}

extension Tag {
    /// Tests of the `multipeer` command-line contract.
    @Tag static var needsCLI: Self
    /// Tests that run software we did not write (python-zeroconf, avahi) inside the lab.
    @Tag static var interop: Self
}
