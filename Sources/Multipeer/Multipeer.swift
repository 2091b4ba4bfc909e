/// The native Multipeer engine: identity, secure connections, wire protocol (being built).
public enum Multipeer {}
