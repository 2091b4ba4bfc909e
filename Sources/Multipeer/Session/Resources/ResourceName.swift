internal import Glibc

/// Where a received resource is saved: a name made safe from whatever the sender called it, placed in the
/// resource folder without ever leaving it or replacing a file.
enum ResourceName {
    /// The most bytes of a saved name.
    static let maximumByteCount = 200

    /// A safe file name for `name`: its last path component (`/` and `\` both separate), without control
    /// characters, leading dots or surrounding spaces, at most ``maximumByteCount`` bytes (the extension kept
    /// when it is short), and `resource` when nothing is left.
    ///
    /// The rules apply to Unicode scalars, not characters: a separator, dot or space followed by a combining mark
    /// is one character that is none of them, yet its bytes are still a separator, dot or space to the file
    /// system. A name is cut between characters, or between the scalars of a first character too long to fit.
    static func sanitize(_ name: String) -> String {
        let last = name.unicodeScalars.split(omittingEmptySubsequences: true) { $0 == "/" || $0 == "\\" }.last ?? []
        let kept = last.filter { $0.value >= 0x20 && $0.value != 0x7F }.drop { $0 == "." || $0 == " " }
        let cleaned = withoutTrailingSpaces(String(String.UnicodeScalarView(kept)))
        guard !cleaned.isEmpty else { return "resource" }
        guard cleaned.utf8.count > maximumByteCount else { return cleaned }
        var stem = cleaned
        var suffix = ""
        // Not the first scalar: leading dots are gone, so the stem is never empty.
        if let dot = cleaned.unicodeScalars.lastIndex(of: ".") {
            let extensionPart = String(String.UnicodeScalarView(cleaned.unicodeScalars[dot...]))
            if extensionPart.utf8.count <= 16 {
                suffix = extensionPart
                stem = String(String.UnicodeScalarView(cleaned.unicodeScalars[..<dot]))
            }
        }
        let room = maximumByteCount - suffix.utf8.count
        var cut = ""
        for character in stem {
            guard cut.utf8.count + character.utf8.count <= room else { break }
            cut.append(character)
        }
        if cut.isEmpty {
            var scalars = String.UnicodeScalarView()
            var byteCount = 0
            for scalar in stem.unicodeScalars {
                byteCount += UTF8.width(scalar)
                guard byteCount <= room else { break }
                scalars.append(scalar)
            }
            cut = String(scalars)
        }
        // The stem starts with neither a space nor a dot, and its first scalar always fits: the cut is not empty.
        return withoutTrailingSpaces(cut) + suffix
    }

    private static func withoutTrailingSpaces(_ text: String) -> String {
        var scalars = text.unicodeScalars
        while scalars.last == " " { scalars.removeLast() }
        return String(scalars)
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
