extension String {
    /// The text with control characters escaped (`\u{1B}`), for error messages and logs that quote what a peer,
    /// a DNS server or a relay sent: it cannot forge lines or steer a terminal.
    var escapingControlCharacters: String {
        var result = ""
        for scalar in unicodeScalars {
            if scalar.properties.generalCategory == .control {
                result += scalar.escaped(asASCII: true)
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}
