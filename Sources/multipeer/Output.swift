internal import Foundation
import MulticastDNS
import MultipeerIO

/// Line-oriented output: every line is flushed at once, so a pipe sees events as they happen.
enum Output {
    static func line(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    /// Writes `text` as it is (terminal control sequences).
    static func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    static func error(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Whether a terminal may act on the character (the log's rule: C0, C1, DEL, the line separators).
    static func isControl(_ scalar: Unicode.Scalar) -> Bool { ControlCharacters.isControl(scalar) }

    /// Text with control characters escaped (`\n`, `\t`, `\u{1b}`, `\u{9b}`...), so text from a peer stays on its
    /// line and cannot command the terminal. Escaping twice changes nothing.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where isControl(c): out += "\\u{\(String(c.value, radix: 16))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// A JSON string literal.
    static func json(_ string: String) -> String {
        var out = "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let c where c.value < 0x20:
                let hex = String(c.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// One browse event as a JSON object on one line.
    static func json(_ event: ServiceBrowserEvent) -> String {
        let (kind, service) = describe(event)
        let info = service.txt.entries.map { entry in
            "\(json(entry.key)):\(json(entry.value.map { String(decoding: $0, as: UTF8.self) } ?? ""))"
        }
        let addresses = service.addresses.map { json(addressText($0)) }
        return
            "{\"event\":\(json(kind)),\"name\":\(json(service.name)),\"type\":\(json(service.serviceType.description)),"
            + "\"info\":{\(info.joined(separator: ","))},\"port\":\(service.port),\"host\":\(json(service.hostName)),"
            + "\"addresses\":[\(addresses.joined(separator: ","))],\"interface\":\(json(service.interfaces.first ?? "")),"
            + "\"interfaces\":[\(service.interfaces.map(json).joined(separator: ","))]}"
    }

    /// One browse event for people.
    static func text(_ event: ServiceBrowserEvent) -> String {
        let (kind, service) = describe(event)
        let info = service.txt.entries.map { entry in
            entry.value.map { "\(entry.key)=\(String(decoding: $0, as: UTF8.self))" } ?? entry.key
        }
        let padded = kind.padding(toLength: 8, withPad: " ", startingAt: 0)
        return
            "\(padded)\(service.name)  port \(service.port)  \(service.addresses.map(addressText).joined(separator: " "))"
            + (info.isEmpty ? "" : "  " + info.joined(separator: " "))
    }

    static func addressText(_ address: DiscoveredAddress) -> String {
        if case .v6(let a) = address.address, a.isLinkLocal { return "\(a)%\(address.interfaceName)" }
        return address.address.description
    }

    private static func describe(_ event: ServiceBrowserEvent) -> (String, DiscoveredService) {
        switch event {
        case .found(let s): ("found", s)
        case .updated(let s): ("updated", s)
        case .lost(let s): ("lost", s)
        }
    }
}
