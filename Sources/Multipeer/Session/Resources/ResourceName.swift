internal import Glibc

/// Where a received resource is saved: a name made safe from whatever the sender called it, placed in the
/// resource folder without ever leaving it or replacing a file.
enum ResourceName {
    /// The most bytes of a saved name.
    static let maximumByteCount = 200

    /// A safe file name for `name`: its last path component (`/` and `\` both separate), without control
    /// characters, leading dots or surrounding spaces, at most ``maximumByteCount`` bytes (the extension kept
    /// when it is short), and `resource` when nothing is left.
    static func sanitize(_ name: String) -> String {
        let last = name.split(omittingEmptySubsequences: true) { $0 == "/" || $0 == "\\" }.last.map(String.init) ?? ""
        var cleaned = String(
            String.UnicodeScalarView(last.unicodeScalars.filter { $0.value >= 0x20 && $0.value != 0x7F }))
        cleaned = String(cleaned.drop { $0 == "." || $0 == " " })
        while cleaned.last == " " { cleaned.removeLast() }
        guard !cleaned.isEmpty else { return "resource" }
        guard cleaned.utf8.count > maximumByteCount else { return cleaned }
        var suffix = ""
        if let dot = cleaned.lastIndex(of: "."), cleaned[dot...].utf8.count <= 16 {
            suffix = String(cleaned[dot...])
            cleaned = String(cleaned[..<dot])
        }
        var cut = ""
        for character in cleaned {
            guard cut.utf8.count + character.utf8.count + suffix.utf8.count <= maximumByteCount else { break }
            cut.append(character)
        }
        return cut + suffix
    }

    /// The `index`-th candidate for `name`: `name`, then `name (2).ext`, `name (3).ext`...
    static func candidate(_ name: String, _ index: Int) -> String {
        guard index > 1 else { return name }
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot]) (\(index))\(name[dot...])"
        }
        return "\(name) (\(index))"
    }

    /// Gives the finished partial file its final name in `directory`: the sanitized name, or the first free
    /// numbered variant, by a hard link that fails rather than replace an existing file; then removes the
    /// partial name.
    /// - Returns: The final path.
    /// - Throws: A sentence when no name could be taken.
    static func place(partial: String, as name: String, in directory: String) throws(SessionError) -> String {
        let safe = sanitize(name)
        for index in 1...1_000 {
            let path = directory + "/" + candidate(safe, index)
            if link(partial, path) == 0 {
                unlink(partial)
                return path
            }
            guard errno == EEXIST else {
                throw SessionError(
                    .unavailable, "cannot save \(safe) in \(directory): \(String(cString: strerror(errno)))")
            }
        }
        throw SessionError(.unavailable, "cannot save \(safe) in \(directory): 1,000 files of that name exist")
    }
}
