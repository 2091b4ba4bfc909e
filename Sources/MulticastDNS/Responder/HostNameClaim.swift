/// The host name our address records are published under, such as `linux-4f2a.local.`, and the names it
/// moves to when another host owns it.
struct HostNameClaim {
    /// The name in use now.
    private(set) var name: DNSName
    /// The label first asked for; renames add a suffix to it.
    private let baseLabel: String
    /// The number in the current name's `-N` suffix; 1 while the name is the one asked for.
    private var renameCount = 1

    /// Claims `<label>.local.`.
    /// - Throws: ``DNSNameError`` if `label` is not a valid label.
    init(label: String) throws(DNSNameError) {
        baseLabel = label
        name = try DNSName(labels: [label, "local"])
    }

    /// Moves to the next name, `<label>-2.local.`, `<label>-3.local.`, ... (RFC 6762 section 9), shortening
    /// the label so the name stays valid.
    mutating func takeNextName() {
        renameCount += 1
        var label = baseLabel
        let suffix = "-\(renameCount)"
        while label.utf8.count + suffix.utf8.count > DNSName.maximumLabelLength { label.removeLast() }
        name = (try? DNSName(labels: [label + suffix, "local"])) ?? name
    }
}
