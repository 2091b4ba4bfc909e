public import Foundation
internal import MultipeerIO

/// A resource (a file) on its way to a member: its progress (bytes the receiver confirmed; cancel it to stop
/// the transfer on both sides) and its outcome.
public final class ResourceTransfer: Sendable {
    /// The name the receiver is told.
    public let name: String
    /// The receiver.
    public let peer: Peer
    /// Bytes the receiver confirmed out of the size; `cancel()` stops the transfer on both sides.
    public let progress: Progress
    let id: [UInt8]
    private let outcome = Lock<
        (
            result: Result<ResourceReceipt, SessionError>?,
            waiters: [CheckedContinuation<Result<ResourceReceipt, SessionError>, Never>]
        )
    >((nil, []))

    init(id: [UInt8], name: String, peer: Peer, progress: Progress) {
        self.id = id
        self.name = name
        self.peer = peer
        self.progress = progress
    }

    /// Waits until the receiver has saved and verified the resource.
    /// - Returns: Its size and SHA-256.
    /// - Throws: ``SessionError`` saying why it failed (the peer left, the receiver's disk is full, a checksum
    ///   mismatch, cancelled by either side, the file could not be read).
    public func finished() async throws(SessionError) -> ResourceReceipt {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<ResourceReceipt, SessionError>, Never>) in
            let ready = outcome.withLock { state -> Result<ResourceReceipt, SessionError>? in
                if let result = state.result { return result }
                state.waiters.append(continuation)
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
        return try result.get()
    }

    /// Whether the transfer has ended.
    public var isFinished: Bool { outcome.withLock { $0.result != nil } }

    /// Ends the transfer once; false if it had ended.
    @discardableResult
    func complete(_ result: Result<ResourceReceipt, SessionError>) -> Bool {
        let waiters = outcome.withLock {
            state -> [CheckedContinuation<Result<ResourceReceipt, SessionError>, Never>]? in
            guard state.result == nil else { return nil }
            state.result = result
            defer { state.waiters = [] }
            return state.waiters
        }
        guard let waiters else { return false }
        for waiter in waiters { waiter.resume(returning: result) }
        return true
    }
}

/// What a delivered resource was.
public struct ResourceReceipt: Sendable, Hashable {
    /// Its size in bytes.
    public let size: Int64
    /// Its SHA-256, lowercase hexadecimal.
    public let sha256: String
}

/// A resource a member is sending us: name as sent, sender, size, and the progress of what was written (cancel
/// it to stop the transfer on both sides).
public final class IncomingResource: Sendable {
    /// The name the sender gave (untrusted; the file is saved under a sanitized version of it).
    public let name: String
    /// The sender.
    public let peer: Peer
    /// The announced size in bytes.
    public let size: Int64
    /// Bytes written out of the size; `cancel()` stops the transfer on both sides.
    public let progress: Progress
    /// The SHA-256 the sender announced, lowercase hexadecimal.
    public let sha256: String

    init(name: String, peer: Peer, size: Int64, progress: Progress, sha256: String) {
        self.name = name
        self.peer = peer
        self.size = size
        self.progress = progress
        self.sha256 = sha256
    }
}

extension Array where Element == UInt8 {
    /// Lowercase hexadecimal.
    var hexString: String { map { String(format: "%02x", $0) }.joined() }
}
