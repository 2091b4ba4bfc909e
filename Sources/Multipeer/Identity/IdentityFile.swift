internal import Glibc
internal import MultipeerIO

/// The identity file: its text format, and reading and writing it so the private key is never exposed.
///
/// The format is UTF-8 text, lines ending in `\n`:
///
///     swift-multipeer identity 1
///     display-name: <the display name, exactly, after one space>
///     -----BEGIN PRIVATE KEY-----
///     <the Ed25519 private key, unencrypted PKCS#8, base64 as PEM writes it>
///     -----END PRIVATE KEY-----
///
/// The PEM block is standard, so `openssl pkey -in FILE` reads the key. The file is written with mode 0600
/// and read only if it is a regular file (not reached through a symbolic link) whose mode grants nothing to group
/// or others.
enum IdentityFile {
    /// The first line, naming the format and its version.
    static let header = "swift-multipeer identity 1"
    /// The prefix of the second line.
    static let displayNamePrefix = "display-name: "
    /// The first line of the key block.
    static let pemBegin = "-----BEGIN PRIVATE KEY-----"
    /// The largest file read: a real identity file is about 200 bytes, so anything near this is not one,
    /// and reading stops there rather than loading an arbitrary file into memory.
    static let maximumByteCount = 16 * 1_024

    // MARK: Format

    static func encode(displayName: String, privateKeyPEM: [UInt8]) -> [UInt8] {
        Array("\(header)\n\(displayNamePrefix)\(displayName)\n".utf8) + privateKeyPEM
    }

    /// Splits a file into the display name and the PEM key block, checking everything except the key.
    static func decode(_ bytes: [UInt8], path: String) throws(IdentityError) -> (displayName: String, pem: [UInt8]) {
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .fileMalformed(path: path, detail: "it is not UTF-8 text")
        }
        let lines = text.split(separator: "\n", maxSplits: 2, omittingEmptySubsequences: false)
        guard lines.count == 3, lines[0] == header else {
            throw .fileMalformed(path: path, detail: "the first line is not '\(header)'")
        }
        guard lines[1].hasPrefix(displayNamePrefix) else {
            throw .fileMalformed(path: path, detail: "the second line does not start with '\(displayNamePrefix)'")
        }
        let displayName = String(lines[1].dropFirst(displayNamePrefix.count))
        do {
            try DisplayName.validate(displayName)
        } catch {
            throw .fileMalformed(path: path, detail: "its display name is invalid: \(error.reason)")
        }
        guard lines[2].hasPrefix(pemBegin) else {
            throw .fileMalformed(path: path, detail: "the third line is not '\(pemBegin)'")
        }
        return (displayName, Array(lines[2].utf8))
    }

    // MARK: Reading

    /// The file's bytes, after checking that it is a regular file that only its owner can access.
    ///
    /// The path's last component is never followed if it is a symbolic link, and opening never waits: a FIFO
    /// (or a device) at the path is refused at once instead of blocking until someone writes to it. A leftover
    /// temporary file from a save that crashed is removed on the way, when that is possible and safe.
    static func read(path: String, limit: Int = maximumByteCount, holding what: String = "an identity")
        throws(IdentityError) -> [UInt8]
    {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else {
            if errno == ELOOP {
                throw .fileUnreadable(
                    path: path,
                    detail: "it is a symbolic link; an identity file is read only where it is, never "
                        + "through a link")
            }
            throw .fileUnreadable(path: path, detail: systemError("open"))
        }
        defer { close(fd) }
        // fstat on the open descriptor checks the file that is read, not whatever the path names later.
        var status = stat()
        guard fstat(fd, &status) == 0 else { throw .fileUnreadable(path: path, detail: systemError("fstat")) }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw .fileUnreadable(path: path, detail: "it is not a regular file (\(fileKind(status.st_mode)))")
        }
        guard status.st_mode & 0o077 == 0 else { throw .fileTooOpen(path: path, mode: status.st_mode) }

        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4_096)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileUnreadable(path: path, detail: systemError("read"))
            }
            if count == 0 {
                removeLeftoverQuietly(of: path)
                return bytes
            }
            bytes += chunk.prefix(count)
        }
        throw .fileMalformed(
            path: path, detail: "it is larger than \(limit) bytes, far more than \(what) needs")
    }

    // MARK: Writing

    /// Writes `bytes` to `path` atomically with mode 0600: into the temporary file ``temporaryName(for:)`` in
    /// the same directory, created 0600 and never wider, synced, renamed over `path`, and then the directory is
    /// synced so the rename itself survives a power loss. A reader sees the old file or the new one, never a
    /// partial one, and the key is never readable by anyone but the owner.
    ///
    /// The temporary name is fixed per target so a save that crashed between creating and renaming it leaves a
    /// file the next save (or load) recognises and removes (``removeLeftover(named:in:path:)``). A save holds an
    /// exclusive `flock` on its temporary file until the rename, so a concurrent save of the same target is
    /// refused instead of removing a file that is still being written.
    ///
    /// - Parameter syncDirectory: Syncs the directory descriptor after the rename (`fsync`); tests observe it.
    static func write(
        _ bytes: [UInt8], to path: String, syncDirectory: (Int32) -> Int32 = { fsync($0) }
    ) throws(IdentityError) {
        let (directoryPath, name) = split(path)
        guard !name.isEmpty, name != ".", name != ".." else {
            throw .fileWriteFailed(path: path, detail: "the path does not name a file")
        }
        let directory = open(directoryPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else {
            throw .fileWriteFailed(path: path, detail: systemError("open the directory \(directoryPath)"))
        }
        defer { close(directory) }
        let temporary = temporaryName(for: name)
        let fd = try createTemporary(temporary, in: directory, path: path)
        var renamed = false
        defer {
            // Still ours (locked and checked): remove it so a failed save leaves nothing behind.
            if !renamed { unlinkat(directory, temporary, 0) }
            close(fd)
        }
        // The umask can only have removed bits; fchmod makes the mode exactly 0600.
        guard fchmod(fd, 0o600) == 0 else { throw .fileWriteFailed(path: path, detail: systemError("fchmod")) }
        var offset = 0
        while offset < bytes.count {
            let count = bytes.withUnsafeBytes {
                Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset)
            }
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileWriteFailed(path: path, detail: systemError("write"))
            }
            offset += count
        }
        guard fsync(fd) == 0 else { throw .fileWriteFailed(path: path, detail: systemError("fsync")) }
        // The lock keeps other savers from removing the file, but not a process that ignores it: rename only
        // the file this save wrote.
        guard isStill(fd, named: temporary, in: directory) else {
            throw .fileWriteFailed(
                path: path, detail: "the temporary file \(temporary) was replaced while it was written")
        }
        guard renameat(directory, temporary, directory, name) == 0 else {
            throw .fileWriteFailed(path: path, detail: systemError("rename \(temporary)"))
        }
        renamed = true
        guard syncDirectory(directory) == 0 else {
            throw .fileWriteFailed(
                path: path,
                detail: "the file was replaced, but syncing its directory failed, so the change may "
                    + "not survive a crash: \(systemError("fsync \(directoryPath)"))")
        }
    }

    /// The temporary file a save of the file `name` writes before renaming it: a hidden name next to it.
    static func temporaryName(for name: String) -> String {
        ".\(name).tmp"
    }

    /// Creates and locks the temporary file, removing a leftover of a crashed save first.
    private static func createTemporary(_ temporary: String, in directory: Int32, path: String)
        throws(IdentityError) -> Int32
    {
        // O_EXCL|O_NOFOLLOW: never write through a file or link someone else prepared at that name.
        func create() -> Int32 {
            openat(directory, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        }
        var fd = create()
        if fd < 0 && errno == EEXIST {
            try removeLeftover(named: temporary, in: directory, path: path)
            fd = create()
        }
        guard fd >= 0 else { throw .fileWriteFailed(path: path, detail: systemError("open \(temporary)")) }
        // Another save may have found the new file and removed it between the open and the lock; the check after
        // locking notices that.
        guard flock(fd, LOCK_EX | LOCK_NB) == 0, isStill(fd, named: temporary, in: directory) else {
            close(fd)
            throw .fileWriteFailed(
                path: path, detail: "another save of the same file is under way (\(temporary) is in use)")
        }
        return fd
    }

    // MARK: Leftovers

    /// Removes `temporary` in `directory` if it is what a crashed save leaves: a regular file or a symbolic
    /// link (the link itself, never its target) owned by this user, that no save is writing now (no lock on
    /// it). Nothing at the name is fine.
    ///
    /// - Throws: `.fileWriteFailed` if something else is at the name, or a save is writing it.
    static func removeLeftover(named temporary: String, in directory: Int32, path: String) throws(IdentityError) {
        var status = stat()
        guard fstatat(directory, temporary, &status, AT_SYMLINK_NOFOLLOW) == 0 else {
            if errno == ENOENT { return }
            throw .fileWriteFailed(path: path, detail: systemError("fstatat \(temporary)"))
        }
        guard status.st_uid == geteuid() else {
            throw .fileWriteFailed(
                path: path, detail: "\(temporary) is in the way and belongs to user \(status.st_uid), not to this one")
        }
        switch status.st_mode & S_IFMT {
        case S_IFLNK:
            // unlink removes the link, never what it points to.
            guard unlinkat(directory, temporary, 0) == 0 || errno == ENOENT else {
                throw .fileWriteFailed(path: path, detail: systemError("unlink \(temporary)"))
            }
        case S_IFREG:
            let fd = openat(directory, temporary, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                if errno == ENOENT { return }
                throw .fileWriteFailed(path: path, detail: systemError("open \(temporary)"))
            }
            defer { close(fd) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
                throw .fileWriteFailed(
                    path: path, detail: "another save of the same file is under way (\(temporary) is in use)")
            }
            // Holding the lock, unlink only if the name still means the file that was locked.
            if isStill(fd, named: temporary, in: directory) {
                guard unlinkat(directory, temporary, 0) == 0 || errno == ENOENT else {
                    throw .fileWriteFailed(path: path, detail: systemError("unlink \(temporary)"))
                }
            }
        default:
            throw .fileWriteFailed(
                path: path, detail: "\(temporary) is in the way and is not a file (\(fileKind(status.st_mode)))")
        }
    }

    /// ``removeLeftover(named:in:path:)`` for the file at `path`, ignoring failures: a load must not fail
    /// because its directory is read-only or a save is under way.
    private static func removeLeftoverQuietly(of path: String) {
        let (directoryPath, name) = split(path)
        let directory = open(directoryPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else { return }
        defer { close(directory) }
        try? removeLeftover(named: temporaryName(for: name), in: directory, path: path)
    }

    /// Whether `name` in `directory` is the file open as `fd` (same device and inode), without following a link.
    private static func isStill(_ fd: Int32, named name: String, in directory: Int32) -> Bool {
        var open = stat()
        var named = stat()
        guard fstat(fd, &open) == 0, fstatat(directory, name, &named, AT_SYMLINK_NOFOLLOW) == 0 else {
            return false
        }
        return open.st_dev == named.st_dev && open.st_ino == named.st_ino
    }

    /// The directory part and the last component of `path` ("." for a bare name).
    private static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let directory = String(path[..<slash])
        return (directory.isEmpty ? "/" : directory, String(path[path.index(after: slash)...]))
    }

    /// A word for what kind of file `mode` describes, for error messages.
    private static func fileKind(_ mode: mode_t) -> String {
        switch mode & S_IFMT {
        case S_IFIFO: "a FIFO"
        case S_IFDIR: "a directory"
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFSOCK: "a socket"
        case S_IFLNK: "a symbolic link"
        default: "mode 0\(String(mode, radix: 8))"
        }
    }

    private static func systemError(_ call: String) -> String {
        SystemCallError(call: call, errno: errno).description
    }
}
