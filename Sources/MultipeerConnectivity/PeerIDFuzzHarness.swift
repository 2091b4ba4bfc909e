internal import Foundation
internal import Multipeer

/// The libFuzzer oracle for archived peer IDs, which apps send each other (custom discovery) and unarchive with
/// `NSKeyedUnarchiver` and secure coding, as Apple's documentation shows.
///
/// Every input is unarchived as an `MCPeerID` the way apps do (unless Foundation would stop the process on it:
/// ``foundationWouldTrap(_:)``); it is also read as `mode (1) | name | 0 | fingerprint`, archived with those values
/// under the peer ID's keys (`mode` says whether each is a string, is missing, is another class, or the name is the
/// peer ID itself), and unarchived, so the peer ID's own decoding sees any name and fingerprint without the fuzzer
/// having to build a property list around them. The properties: nothing crashes; a peer ID that unarchives has a
/// name that keeps the display-name rules and a fingerprint in its one canonical form, archives and unarchives to
/// the same peer, and holds a key only when it names this user's own identity (then with the name saved with the
/// key, whatever the archive claims); the structured form unarchives exactly when both values are strings that
/// keep the rules. Package access, for `mdns-fuzz`.
package enum PeerIDFuzzHarness {
    /// A folder of this user's with one identity of "ours" in it, so the rule for our own fingerprint is reached.
    /// Always the same one, and left in place (libFuzzer ends a run without `atexit` handlers): every run writes
    /// the same file.
    static let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
        "swift-multipeer-fuzz-identities-\(getuid())", isDirectory: true)
    static let ownName = "Own Key"
    /// Always the same key (an Ed25519 seed of bytes 1 to 32, as PKCS#8), so seeds naming its fingerprint stay ours.
    static let own: PeerIdentity = {
        let pkcs8: [UInt8] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
        ]
        let pem =
            "-----BEGIN PRIVATE KEY-----\n\(Data(pkcs8 + (1...32)).base64EncodedString())\n-----END PRIVATE KEY-----\n"
        let file = folder.appendingPathComponent("fixed.identity").path
        try! FileManager.default.createDirectory(
            at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = FileManager.default.createFile(
            atPath: file, contents: Data("swift-multipeer identity 1\ndisplay-name: \(ownName)\n\(pem)".utf8),
            attributes: [.posixPermissions: 0o600])
        let identity = try! PeerIdentity.load(from: file)
        try? FileManager.default.removeItem(atPath: file)
        let store = PeerIdentityStore(directory: folder)
        try! store.save(identity)
        MCPeerID.identityStore = store
        return identity
    }()

    /// Runs one input; traps on a broken property.
    package static func check(_ bytes: [UInt8]) {
        _ = own
        if !foundationWouldTrap(Data(bytes)), let peer = unarchive(Data(bytes)) { checkDecoded(peer) }
        guard let mode = bytes.first else { return }
        let rest = bytes.dropFirst()
        let nameBytes = rest.prefix { $0 != 0 }
        let fingerprintBytes = rest.dropFirst(nameBytes.count + 1)
        let name = String(decoding: nameBytes, as: UTF8.self)
        let text = String(decoding: fingerprintBytes, as: UTF8.self)
        let forged: ForgedPeerID
        switch mode % 5 {
        case 1: forged = ForgedPeerID(name: nil, fingerprint: text as NSString)
        case 2: forged = ForgedPeerID(name: Data(nameBytes) as NSData, fingerprint: text as NSString)
        case 3: forged = ForgedPeerID(name: name as NSString, fingerprint: NSNumber(value: fingerprintBytes.count))
        case 4: forged = ForgedPeerID(name: nil, fingerprint: text as NSString, nameIsItself: true)
        default: forged = ForgedPeerID(name: name as NSString, fingerprint: text as NSString)
        }
        guard let archive = try? NSKeyedArchiver.archivedData(withRootObject: forged, requiringSecureCoding: true)
        else { preconditionFailure("a forged peer ID does not archive") }
        let decoded = unarchive(archive)
        let valid = mode % 5 == 0 && (try? DisplayName.validate(name)) != nil && PeerFingerprint(text) != nil
        guard let peer = decoded else {
            precondition(!valid, "a valid name and fingerprint were refused: \(Array(name.utf8)) \(text)")
            return
        }
        precondition(valid, "a peer ID unarchived from mode \(mode % 5), \(Array(name.utf8)), \(Array(text.utf8))")
        checkDecoded(peer)
        precondition(peer.fingerprint.description == text, "the fingerprint changed")
        precondition(peer.fingerprint == own.fingerprint || peer.displayName == name, "the name changed")
    }

    /// Whether swift-corelibs-foundation would stop the process on this archive rather than refuse it, which no
    /// decoder of ours can prevent, so such archives are not tried:
    /// - with secure coding, its `NSKeyedUnarchiver` calls `fatalError` for an object of a class it knows but was
    ///   not asked for (Apple's Foundation sets an error instead), whether an app asked for a peer ID at the root
    ///   or the peer ID for a string under one of its keys; tried are only archives whose one class Foundation
    ///   knows is `MCPeerID`, described once, without class hints (Foundation checks a description once);
    /// - it force-unwraps the class of an object whose class reference leads to no class description (a string,
    ///   a `null`, an index past the end), in the error message it would throw;
    /// - its property list parser crashes on any binary property list that holds a set (the Swift runtime
    ///   dereferences null while bridging it), before an archive is even looked at.
    static func foundationWouldTrap(_ data: Data) -> Bool {
        guard !holdsASet(Array(data)) else { return true }
        guard let archive = try? PropertyListSerialization.propertyList(from: data, format: nil) as? [String: Any],
            let objects = archive["$objects"] as? [Any]
        else { return false }
        var known = 0
        for case let object as [String: Any] in objects {
            if let reference = object["$class"].flatMap(uid) {
                guard objects.indices.contains(reference), objects[reference] is [String: Any] else { return true }
            }
            if let hints = object["$classhints"] as? [String], hints.contains(where: { NSClassFromString($0) != nil }) {
                return true
            }
            guard let name = object["$classname"] as? String, let named = NSClassFromString(name) else { continue }
            known += 1
            if ObjectIdentifier(named) != ObjectIdentifier(MCPeerID.self) || known > 1 { return true }
        }
        return false
    }

    /// Whether `bytes` is a binary property list with a set among the objects its offset table lists (the parser
    /// reads no others); true as well for a table whose offsets are of a size the format does not have.
    static func holdsASet(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 40, bytes.starts(with: Array("bplist0".utf8)) else { return false }
        func integer(_ start: Int, _ size: Int) -> Int {
            Int(clamping: bytes[start..<start + size].reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
        }
        let trailer = bytes.count - 32
        let offsetSize = Int(bytes[trailer + 6])
        guard (1...8).contains(offsetSize) else { return true }
        let count = integer(trailer + 8, 8)
        let table = integer(trailer + 24, 8)
        for index in 0..<min(count, bytes.count) {
            let start = table.addingReportingOverflow(index * offsetSize)
            guard !start.overflow, start.partialValue <= bytes.count - offsetSize else { break }
            let offset = integer(start.partialValue, offsetSize)
            if offset < bytes.count, bytes[offset] & 0xF0 == 0xC0 { return true }
        }
        return false
    }

    /// The index a property list UID (an archive's reference to one of its objects) holds, which Foundation does
    /// not expose; -1 for a UID whose index cannot be read; nil for any other value.
    private static func uid(_ value: Any) -> Int? {
        guard String(describing: type(of: value)) == "_NSKeyedArchiverUID" else { return nil }
        let index = Mirror(reflecting: value).children.first { $0.label == "value" }?.value as? any BinaryInteger
        return index.map { Int($0) } ?? -1
    }

    private static func unarchive(_ data: Data) -> MCPeerID? {
        try? NSKeyedUnarchiver.unarchivedObject(ofClass: MCPeerID.self, from: data)
    }

    /// What every unarchived peer ID must be.
    private static func checkDecoded(_ peer: MCPeerID) {
        precondition((try? DisplayName.validate(peer.displayName)) != nil, "a name that breaks the rules")
        precondition(PeerFingerprint(peer.fingerprint.description) == peer.fingerprint, "a fingerprint not canonical")
        if peer.fingerprint == own.fingerprint {
            precondition(peer.displayName == ownName && peer.identity != nil, "our own peer ID without its key or name")
        } else {
            precondition(peer.identity == nil, "a key for a fingerprint that is not ours")
        }
        guard let archive = try? NSKeyedArchiver.archivedData(withRootObject: peer, requiringSecureCoding: true) else {
            preconditionFailure("an unarchived peer ID does not archive")
        }
        guard let again = unarchive(archive) else { preconditionFailure("a peer ID's own archive does not unarchive") }
        precondition(again == peer && again.displayName == peer.displayName, "round trip changed the peer ID")
    }

    /// Seeds: archives of remote peers' IDs and of our own, and the structured form of each.
    package static func seeds() -> [[UInt8]] {
        let fingerprints =
            [own.fingerprint] + [0x01, 0x7f, 0xff].map { PeerFingerprint(bytes: .init(repeating: $0, count: 32))! }
        let names = ["Alice", "Bob's iPhone ✓", String(repeating: "é", count: 31), "👩‍💻"]
        var seeds: [[UInt8]] = []
        for (fingerprint, name) in zip(fingerprints, names) {
            let peer = MCPeerID(peer: Peer(identity: .claimed(fingerprint), displayName: name))
            if let archive = try? NSKeyedArchiver.archivedData(withRootObject: peer, requiringSecureCoding: true) {
                seeds.append(Array(archive))
            }
            seeds.append([0] + Array(name.utf8) + [0] + Array(fingerprint.description.utf8))
        }
        return seeds
    }
}

/// A peer ID's archive with any values under its keys: archived under `MCPeerID`'s class name, it unarchives as one.
private final class ForgedPeerID: NSObject, NSSecureCoding {
    static var supportsSecureCoding: Bool { true }
    let name: NSObject?
    let fingerprint: NSObject?
    /// The name key refers to the archived peer ID itself.
    let nameIsItself: Bool

    init(name: NSObject?, fingerprint: NSObject?, nameIsItself: Bool = false) {
        self.name = name
        self.fingerprint = fingerprint
        self.nameIsItself = nameIsItself
    }

    required init?(coder: NSCoder) { nil }

    override var classForKeyedArchiver: AnyClass? { MCPeerID.self }

    func encode(with coder: NSCoder) {
        if let name { coder.encode(name, forKey: "MCPeerIDDisplayName") }
        if nameIsItself { coder.encode(self, forKey: "MCPeerIDDisplayName") }
        if let fingerprint { coder.encode(fingerprint, forKey: "MCPeerIDFingerprint") }
    }
}
