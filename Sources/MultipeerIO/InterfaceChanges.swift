/// The difference between two snapshots of the network interfaces, keyed by interface index.
public struct InterfaceChanges: Sendable {
    /// Interfaces that appeared.
    public var added: [NetworkInterface]
    /// Interfaces that disappeared (their last known state).
    public var removed: [NetworkInterface]
    /// Interfaces whose name, flags or addresses changed (their new state).
    public var changed: [NetworkInterface]
    /// All interfaces now, sorted by index.
    public var current: [NetworkInterface]

    /// Creates a change set.
    /// - Parameters:
    ///   - added: Interfaces that appeared.
    ///   - removed: Interfaces that disappeared.
    ///   - changed: Interfaces that changed.
    ///   - current: All interfaces now.
    public init(
        added: [NetworkInterface], removed: [NetworkInterface], changed: [NetworkInterface],
        current: [NetworkInterface]
    ) {
        self.added = added
        self.removed = removed
        self.changed = changed
        self.current = current
    }

    /// `true` if nothing was added, removed or changed.
    public var isEmpty: Bool { added.isEmpty && removed.isEmpty && changed.isEmpty }

    /// The changes from `old` to `new`, matched by interface index.
    /// - Parameters:
    ///   - old: The previous snapshot.
    ///   - new: The current snapshot.
    /// - Returns: The difference.
    public static func between(_ old: [NetworkInterface], _ new: [NetworkInterface]) -> InterfaceChanges {
        let oldByIndex = Dictionary(old.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        let newByIndex = Dictionary(new.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        let added = new.filter { oldByIndex[$0.index] == nil }
        let removed = old.filter { newByIndex[$0.index] == nil }
        let changed = new.filter { interface in oldByIndex[interface.index].map { $0 != interface } ?? false }
        return InterfaceChanges(added: added, removed: removed, changed: changed, current: new)
    }
}
