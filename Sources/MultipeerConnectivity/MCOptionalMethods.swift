// Apple's delegate protocols mark some methods `@objc optional`, and code that forwards delegate calls writes
// `delegate?.session?(session, didReceiveCertificate: ...)`. Swift on Linux has no optional requirements: here
// those methods are requirements with default implementations, and each protocol has a property named after
// the methods' base name whose value calls them, so the optional-chaining form compiles and runs. The value is
// never nil: a delegate that does not implement the method gets its default (which does what Apple's
// framework does for such a delegate). A type's own property of the same name (a `session` or an `advertiser`)
// shadows this one inside that type, as it should.

extension MCSessionDelegate {
    /// The optional `MCSessionDelegate` method, for `delegate?.session?(session, didReceiveCertificate: ...,
    /// fromPeer: ..., certificateHandler: ...)` (see ``MCSessionDelegateOptionalMethods``).
    public var session: MCSessionDelegateOptionalMethods? { MCSessionDelegateOptionalMethods(delegate: self) }
}

/// Calls a session delegate's optional method the way Apple's `@objc optional` form is called:
/// `delegate?.session?(session, didReceiveCertificate: certificate, fromPeer: peerID, certificateHandler: handler)`.
public struct MCSessionDelegateOptionalMethods {
    let delegate: any MCSessionDelegate

    /// Calls the delegate's `session(_:didReceiveCertificate:fromPeer:certificateHandler:)` (its own, or the
    /// default that lets every peer in).
    public func callAsFunction(
        _ session: MCSession, didReceiveCertificate certificate: [Any]?, fromPeer peerID: MCPeerID,
        certificateHandler: @escaping (Bool) -> Void
    ) {
        delegate.session(
            session, didReceiveCertificate: certificate, fromPeer: peerID, certificateHandler: certificateHandler)
    }
}

extension MCNearbyServiceAdvertiserDelegate {
    /// The optional `MCNearbyServiceAdvertiserDelegate` method, for
    /// `delegate?.advertiser?(advertiser, didNotStartAdvertisingPeer: error)`.
    public var advertiser: MCNearbyServiceAdvertiserDelegateOptionalMethods? {
        MCNearbyServiceAdvertiserDelegateOptionalMethods(delegate: self)
    }
}

/// Calls an advertiser delegate's optional method as `delegate?.advertiser?(advertiser, didNotStartAdvertisingPeer:
/// error)`.
public struct MCNearbyServiceAdvertiserDelegateOptionalMethods {
    let delegate: any MCNearbyServiceAdvertiserDelegate

    /// Calls the delegate's `advertiser(_:didNotStartAdvertisingPeer:)` (its own, or the default that writes the
    /// error to standard error).
    public func callAsFunction(_ advertiser: MCNearbyServiceAdvertiser, didNotStartAdvertisingPeer error: any Error) {
        delegate.advertiser(advertiser, didNotStartAdvertisingPeer: error)
    }
}

extension MCNearbyServiceBrowserDelegate {
    /// The optional `MCNearbyServiceBrowserDelegate` method, for
    /// `delegate?.browser?(browser, didNotStartBrowsingForPeers: error)`.
    public var browser: MCNearbyServiceBrowserDelegateOptionalMethods? {
        MCNearbyServiceBrowserDelegateOptionalMethods(delegate: self)
    }
}

/// Calls a browser delegate's optional method as `delegate?.browser?(browser, didNotStartBrowsingForPeers: error)`.
public struct MCNearbyServiceBrowserDelegateOptionalMethods {
    let delegate: any MCNearbyServiceBrowserDelegate

    /// Calls the delegate's `browser(_:didNotStartBrowsingForPeers:)` (its own, or the default that writes the
    /// error to standard error).
    public func callAsFunction(_ browser: MCNearbyServiceBrowser, didNotStartBrowsingForPeers error: any Error) {
        delegate.browser(browser, didNotStartBrowsingForPeers: error)
    }
}

extension MCAdvertiserAssistantDelegate {
    /// The optional method, for `delegate?.advertiserAssistantWillPresentInvitation?(assistant)`.
    public var advertiserAssistantWillPresentInvitation: ((MCAdvertiserAssistant) -> Void)? {
        { self.advertiserAssistantWillPresentInvitation($0) }
    }

    /// The optional method, for `delegate?.advertiserAssistantDidDismissInvitation?(assistant)`.
    public var advertiserAssistantDidDismissInvitation: ((MCAdvertiserAssistant) -> Void)? {
        { self.advertiserAssistantDidDismissInvitation($0) }
    }
}
