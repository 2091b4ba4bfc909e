extension ResponderStateMachine {
    /// Identifies a registered service.
    public struct ServiceID: Hashable, Sendable, CustomStringConvertible {
        /// A number unique within one state machine.
        public let rawValue: Int
        /// `service#N`.
        public var description: String { "service#\(rawValue)" }
    }

    /// A registration request.
    public struct Service: Hashable, Sendable {
        /// The instance name wanted; the responder may rename it on conflict.
        public var instanceName: String
        /// The service type, such as `_chat._tcp.local.`.
        public var serviceType: DNSName
        /// The TCP or UDP port.
        public var port: UInt16
        /// TXT strings in wire form.
        public var txt: [[UInt8]]

        /// Creates a registration request.
        public init(instanceName: String, serviceType: DNSName, port: UInt16, txt: [[UInt8]]) {
            self.instanceName = instanceName
            self.serviceType = serviceType
            self.port = port
            self.txt = txt
        }
    }
}
