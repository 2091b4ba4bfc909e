import Dispatch
import Glibc
import MultipeerIO
import Testing

@testable import Multipeer

@Suite("PeerIdentity: saving and loading")
struct IdentityFileTests {
    @Test func saveAndLoadRoundTripWithMode0600() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let identity = try PeerIdentity.generate(displayName: "Alice's 日本 laptop")
            try identity.save(to: path)
            #expect(!identity.isEphemeral)
            #expect(try permissionBits(path) == 0o600)
            #expect(directoryEntries(directory) == ["identity"])  // no temporary file left behind

            let loaded = try PeerIdentity.load(from: path)
            #expect(loaded.displayName == identity.displayName)
            #expect(loaded.publicKey == identity.publicKey)
            #expect(loaded.fingerprint == identity.fingerprint)
            #expect(!loaded.isEphemeral)
            let signature = try loaded.sign([42])
            #expect(PeerIdentity.verify(signature: signature, data: [42], publicKey: identity.publicKey))
        }
    }

    @Test func saveIsExactly0600EvenWithAPermissiveUmask() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let previous = umask(0)
            defer { umask(previous) }
            try PeerIdentity.generate(displayName: "a").save(to: path)
            #expect(try permissionBits(path) == 0o600)
        }
    }

    @Test func saveReplacesAnExistingFileAndTightensIt() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            try writeFile(path, Array("old".utf8), mode: 0o644)
            let identity = try PeerIdentity.generate(displayName: "new")
            try identity.save(to: path)
            #expect(try permissionBits(path) == 0o600)
            #expect(try PeerIdentity.load(from: path).fingerprint == identity.fingerprint)
        }
    }

    @Test func saveIntoAMissingDirectoryFailsClearly() throws {
        let path = "/nonexistent-multipeer-directory/identity"
        let error = #expect(throws: IdentityError.self) {
            try PeerIdentity.generate(displayName: "a").save(to: path)
        }
        #expect(error?.code == .fileWriteFailed(path: path))
        #expect(error?.reason.contains("No such file or directory") == true)
    }

    @Test(arguments: [0o644, 0o640, 0o604, 0o660, 0o601] as [mode_t])
    func loadRefusesAFileOthersCanAccess(mode: mode_t) throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            try PeerIdentity.generate(displayName: "a").save(to: path)
            try #require(chmod(path, mode) == 0)
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.load(from: path) }
            #expect(error?.code == .fileTooOpen(path: path, mode: UInt32(mode)))
            #expect(error?.reason.contains(path) == true)
            #expect(error?.reason.contains("0" + String(mode, radix: 8)) == true)
        }
    }

    @Test func loadAcceptsAnOwnerOnlyFileReadableWithMode0400() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let identity = try PeerIdentity.generate(displayName: "a")
            try identity.save(to: path)
            try #require(chmod(path, 0o400) == 0)
            #expect(try PeerIdentity.load(from: path).fingerprint == identity.fingerprint)
        }
    }

    @Test func loadOfAMissingFileSaysItIsUnreadable() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/missing"
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.load(from: path) }
            #expect(error?.code == .fileUnreadable(path: path))
            #expect(error?.reason.contains("No such file or directory") == true)
        }
    }

    @Test func loadOfADirectoryIsRefused() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/sub"
            try #require(mkdir(path, 0o700) == 0)
            defer { rmdir(path) }
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.load(from: path) }
            #expect(error?.code == .fileUnreadable(path: path))
        }
    }

    static let malformedContents: [(String, [UInt8])] = [
        ("empty", []),
        ("wrong header", Array("ssh-ed25519 AAAA\n".utf8)),
        ("no display name line", Array("swift-multipeer identity 1\n".utf8)),
        ("display name line missing", Array("swift-multipeer identity 1\n\(RFC8032TestVector.privateKeyPEM)".utf8)),
        (
            "empty display name",
            Array("swift-multipeer identity 1\ndisplay-name: \n\(RFC8032TestVector.privateKeyPEM)".utf8)
        ),
        ("no key", Array("swift-multipeer identity 1\ndisplay-name: a\n".utf8)),
        (
            "damaged key",
            Array(
                "swift-multipeer identity 1\ndisplay-name: a\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
                    .utf8)
        ),
        (
            "encrypted key",
            Array(
                ("swift-multipeer identity 1\ndisplay-name: a\n-----BEGIN ENCRYPTED PRIVATE KEY-----\n"
                    + "MIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAg4iiRY1UBqdAICCAAw\n"
                    + "DAYIKoZIhvcNAgkFADAdBglghkgBZQMEAQIEEM/Zssc9YyLQOSFZAcNMVvcEQK5y\n"
                    + "X1xmAelk04pSmf0ZoubSIKG40riCt6YyI4i03RqC+v3Docifv4Ya+y7KcbDgELro\n"
                    + "Qthd7TgDui2leUyatRY=\n-----END ENCRYPTED PRIVATE KEY-----\n").utf8)
        ),
        ("not UTF-8", Array("swift-multipeer identity 1\ndisplay-name: ".utf8) + [0xff, 0xfe, 0x0a]),
        ("too large", [UInt8](repeating: 0x41, count: 20_000)),
    ]

    @Test(arguments: malformedContents)
    func loadRefusesMalformedContent(name: String, contents: [UInt8]) throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            try writeFile(path, contents)
            let error = #expect(throws: IdentityError.self, "\(name)") { try PeerIdentity.load(from: path) }
            #expect(error?.code == .fileMalformed(path: path), "\(name)")
            #expect(error?.reason.contains(path) == true)
        }
    }

    @Test func loadRefusesAKeyThatIsNotEd25519() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let x25519 = """
                -----BEGIN PRIVATE KEY-----
                MC4CAQAwBQYDK2VuBCIEIPBhW+VA7I3YhX5p1h1xsG3GZHLjvS3Rb3G8ZDf+CA5a
                -----END PRIVATE KEY-----

                """
            try writeFile(path, Array("swift-multipeer identity 1\ndisplay-name: a\n\(x25519)".utf8))
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.load(from: path) }
            #expect(error?.code == .notEd25519)
        }
    }

    /// A file written by hand with the RFC 8032 key proves the format, the key decoding, the fingerprint
    /// and the signature against independent known answers.
    @Test func loadsAHandWrittenFileAndMatchesRFC8032() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let text = "swift-multipeer identity 1\ndisplay-name: RFC 8032\n\(RFC8032TestVector.privateKeyPEM)"
            try writeFile(path, Array(text.utf8))
            let identity = try PeerIdentity.load(from: path)
            #expect(identity.displayName == "RFC 8032")
            #expect(identity.publicKey == RFC8032TestVector.publicKey)
            #expect(identity.fingerprint.description == RFC8032TestVector.fingerprintText)
            #expect(try identity.sign([]) == RFC8032TestVector.emptyMessageSignature)
            #expect(
                PeerIdentity.verify(
                    signature: RFC8032TestVector.emptyMessageSignature, data: [],
                    publicKey: RFC8032TestVector.publicKey))

            // Saving writes the same format back.
            let copy = directory + "/copy"
            try identity.save(to: copy)
            #expect(try PeerIdentity.load(from: copy).fingerprint == identity.fingerprint)
        }
    }

    // MARK: Links, FIFOs, crashes and durability

    @Test func loadOfAFIFOFailsAtOnceInsteadOfWaitingForAWriter() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            try #require(mkfifo(path, 0o600) == 0)
            let outcome = Lock<Result<PeerIdentity, IdentityError>?>(nil)
            let done = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                let result = Result { () throws(IdentityError) in try PeerIdentity.load(from: path) }
                outcome.withLock { $0 = result }
                done.signal()
            }
            let finished = done.wait(timeout: .now() + 5) == .success
            if !finished {
                // Unblock the stuck open (a writer arrives and leaves) so the thread ends, then fail.
                let writer = open(path, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
                _ = done.wait(timeout: .now() + 5)
            }
            #expect(finished, "loading a FIFO blocked for 5 seconds")
            guard case .failure(let error)? = outcome.withLock({ $0 }) else {
                Issue.record("loading a FIFO did not fail: \(String(describing: outcome.withLock { $0 }))")
                return
            }
            #expect(error.code == .fileUnreadable(path: path))
            #expect(error.reason.contains("not a regular file (a FIFO)"), "\(error.reason)")
        }
    }

    @Test func loadRefusesASymbolicLinkInsteadOfFollowingIt() throws {
        try withTemporaryDirectory { directory in
            let real = directory + "/real"
            let path = directory + "/identity"
            let identity = try PeerIdentity.generate(displayName: "a")
            try identity.save(to: real)
            try #require(symlink(real, path) == 0)
            let error = #expect(throws: IdentityError.self) { try PeerIdentity.load(from: path) }
            #expect(error?.code == .fileUnreadable(path: path))
            #expect(error?.reason.contains("symbolic link") == true, "\(error?.reason ?? "")")
            #expect(try PeerIdentity.load(from: real).fingerprint == identity.fingerprint)
        }
    }

    @Test func saveReplacesASymbolicLinkAndLeavesItsTargetAlone() throws {
        try withTemporaryDirectory { directory in
            let victim = directory + "/victim"
            let path = directory + "/identity"
            try writeFile(victim, Array("victim".utf8), mode: 0o644)
            try #require(symlink(victim, path) == 0)
            try PeerIdentity.generate(displayName: "a").save(to: path)
            #expect(try fileType(path) == S_IFREG)
            #expect(try readWhole(victim) == Array("victim".utf8))
            #expect(try permissionBits(victim) == 0o644)
        }
    }

    @Test func theTemporaryFileIsAHiddenNameNextToTheTarget() {
        #expect(IdentityFile.temporaryName(for: "identity") == ".identity.tmp")
        #expect(IdentityFile.temporaryName(for: ".hidden") == "..hidden.tmp")
    }

    @Test func saveRemovesATemporaryFileLeftByACrashedSave() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            // What a save killed between creating and renaming its file leaves: a partial file at the fixed name.
            try writeFile(directory + "/.identity.tmp", Array("swift-multipeer identity 1\ndisplay-".utf8))
            let identity = try PeerIdentity.generate(displayName: "after the crash")
            try identity.save(to: path)
            #expect(directoryEntries(directory) == ["identity"])
            #expect(try PeerIdentity.load(from: path).fingerprint == identity.fingerprint)
        }
    }

    @Test func loadRemovesATemporaryFileLeftByACrashedSave() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let identity = try PeerIdentity.generate(displayName: "a")
            try identity.save(to: path)
            try writeFile(directory + "/.identity.tmp", Array("partial".utf8))
            #expect(try PeerIdentity.load(from: path).fingerprint == identity.fingerprint)
            #expect(directoryEntries(directory) == ["identity"])
        }
    }

    @Test func aLeftoverSymbolicLinkIsRemovedWithoutTouchingItsTarget() throws {
        try withTemporaryDirectory { directory in
            let victim = directory + "/victim"
            try writeFile(victim, Array("victim".utf8), mode: 0o644)
            try #require(symlink(victim, directory + "/.identity.tmp") == 0)
            try PeerIdentity.generate(displayName: "a").save(to: directory + "/identity")
            #expect(directoryEntries(directory).sorted() == ["identity", "victim"])
            #expect(try readWhole(victim) == Array("victim".utf8))
        }
    }

    @Test func aTemporaryFileASaveIsStillWritingIsLeftAlone() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let temporary = directory + "/.identity.tmp"
            try writeFile(temporary, Array("being written".utf8))
            // A save under way holds an exclusive lock on its temporary file.
            let holder = open(temporary, O_RDONLY)
            try #require(holder >= 0)
            try #require(flock(holder, LOCK_EX) == 0)
            let error = #expect(throws: IdentityError.self) {
                try PeerIdentity.generate(displayName: "a").save(to: path)
            }
            #expect(error?.code == .fileWriteFailed(path: path))
            #expect(error?.reason.contains("another save of the same file is under way") == true)
            #expect(try readWhole(temporary) == Array("being written".utf8))
            close(holder)
            // Once the lock is gone the file is a leftover like any other.
            try PeerIdentity.generate(displayName: "a").save(to: path)
            #expect(directoryEntries(directory) == ["identity"])
        }
    }

    @Test func somethingElseAtTheTemporaryNameStopsTheSave() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            try #require(mkdir(directory + "/.identity.tmp", 0o700) == 0)
            defer { rmdir(directory + "/.identity.tmp") }
            let error = #expect(throws: IdentityError.self) {
                try PeerIdentity.generate(displayName: "a").save(to: path)
            }
            #expect(error?.code == .fileWriteFailed(path: path))
            #expect(error?.reason.contains("is not a file (a directory)") == true, "\(error?.reason ?? "")")
        }
    }

    @Test func theDirectoryIsSyncedAfterTheRename() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            var directoryStatus = stat()
            try #require(stat(directory, &directoryStatus) == 0)
            var synced: [(isTheDirectory: Bool, renamed: Bool)] = []
            try IdentityFile.write(Array("new".utf8), to: path) { fd in
                var status = stat()
                let isTheDirectory =
                    fstat(fd, &status) == 0 && status.st_mode & S_IFMT == S_IFDIR
                    && status.st_ino == directoryStatus.st_ino && status.st_dev == directoryStatus.st_dev
                synced.append((isTheDirectory, (try? readWhole(path)) == Array("new".utf8)))
                return fsync(fd)
            }
            #expect(synced.count == 1)
            #expect(synced.first?.isTheDirectory == true)
            #expect(synced.first?.renamed == true)
        }
    }

    @Test func aFailedDirectorySyncIsReported() throws {
        try withTemporaryDirectory { directory in
            let path = directory + "/identity"
            let error = #expect(throws: IdentityError.self) {
                try IdentityFile.write(Array("new".utf8), to: path) { _ in
                    errno = EIO
                    return -1
                }
            }
            #expect(error?.code == .fileWriteFailed(path: path))
            #expect(error?.reason.contains("syncing its directory failed") == true, "\(error?.reason ?? "")")
            #expect(error?.reason.contains("Input/output error") == true, "\(error?.reason ?? "")")
        }
    }
}
