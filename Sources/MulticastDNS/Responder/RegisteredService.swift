import MultipeerIO

/// One service the responder publishes: what was asked for, the name it holds now, and where that name stands
/// in the RFC 6762 section 8 timeline.
struct RegisteredService {
    /// Where a name stands in the RFC 6762 section 8 timeline.
    enum Phase: Hashable {
        /// Probing; `sent` probes went out, the next step is due at `next`.
        case probing(sent: Int, next: IOInstant)
        /// Claimed; `sent` announcements went out, the next is due at `next`.
        case announcing(sent: Int, next: IOInstant)
        /// Claimed and fully announced.
        case established
        /// Stopping: `sent` goodbye rounds went out.
        case goodbye(sent: Int, next: IOInstant)
    }

    /// The registration, with the instance name in use now (renamed after a conflict).
    var service: ResponderStateMachine.Service
    /// The instance name first asked for; renames add a suffix to it.
    let baseName: String
    /// The number in the current name's `" (N)"` suffix; 1 while the name is the one asked for.
    private(set) var renameCount = 1
    var phase: Phase
    /// Whether the current name was announced at least once (so a stop owes goodbyes, and a rename owes a new
    /// `registered` event).
    var announcedOnce = false
    /// The full name, `<instance>.<service type>`.
    private(set) var instanceName: DNSName
    /// A TXT update waits to be announced.
    var updatePending = false
    /// When the last TXT update went out: the next one waits until a second after it, so an application
    /// updating in a tight loop sends at most one new TXT record per second.
    var lastUpdateAnnouncement: IOInstant?

    init(service: ResponderStateMachine.Service, instanceName: DNSName, phase: Phase) {
        self.service = service
        baseName = service.instanceName
        self.instanceName = instanceName
        self.phase = phase
    }

    /// When the timeline has its next step, or nil once established.
    var nextStep: IOInstant? {
        switch phase {
        case .probing(_, let next), .announcing(_, let next), .goodbye(_, let next): next
        case .established: nil
        }
    }

    /// Whether the name is claimed, so its records answer queries.
    var isClaimed: Bool {
        switch phase {
        case .announcing, .established: true
        case .probing, .goodbye: false
        }
    }

    /// Whether the service is probing its name.
    var isProbing: Bool {
        if case .probing = phase { return true }
        return false
    }

    /// Whether the service is saying goodbye.
    var isGoingAway: Bool {
        if case .goodbye = phase { return true }
        return false
    }

    /// Moves to the next name after a conflict, `"Alice (2)"`, `"Alice (3)"`, ... (RFC 6763 appendix D),
    /// shortening the base so the name stays one DNS label.
    mutating func takeNextName() {
        var renamed: DNSName?
        while renamed == nil {
            renameCount += 1
            let suffix = " (\(renameCount))"
            var base = baseName
            while base.utf8.count + suffix.utf8.count > DNSName.maximumLabelLength { base.removeLast() }
            service.instanceName = base + suffix
            renamed = try? service.serviceType.prepending(service.instanceName)
        }
        instanceName = renamed!
    }
}
