/// A usage error: printed with the command's usage, exit status 64 (EX_USAGE).
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The arguments of one subcommand, consumed option by option.
struct CommandLineArguments {
    private var remaining: [String]

    init(_ arguments: [String]) { remaining = arguments }

    /// Removes every `--name VALUE` (or `--name=VALUE`) and returns the values in order.
    mutating func values(of option: String) throws(UsageError) -> [String] {
        var values: [String] = []
        var kept: [String] = []
        var index = 0
        while index < remaining.count {
            let argument = remaining[index]
            if argument == option {
                guard index + 1 < remaining.count else { throw UsageError("\(option) needs a value") }
                values.append(remaining[index + 1])
                index += 2
            } else if argument.hasPrefix(option + "=") {
                values.append(String(argument.dropFirst(option.count + 1)))
                index += 1
            } else {
                kept.append(argument)
                index += 1
            }
        }
        remaining = kept
        return values
    }

    /// Removes `--name VALUE` and returns the value; at most once.
    mutating func value(of option: String) throws(UsageError) -> String? {
        let all = try values(of: option)
        guard all.count <= 1 else { throw UsageError("\(option) given more than once") }
        return all.first
    }

    /// Removes a flag and tells whether it was there.
    mutating func flag(_ name: String) -> Bool {
        let had = remaining.contains(name)
        remaining.removeAll { $0 == name }
        return had
    }

    /// Removes and returns the next positional argument.
    mutating func positional(_ what: String) throws(UsageError) -> String {
        guard let index = remaining.firstIndex(where: { !$0.hasPrefix("--") }) else {
            throw UsageError("missing \(what)")
        }
        return remaining.remove(at: index)
    }

    /// Removes and returns the next positional argument, or nil when there is none.
    mutating func optionalPositional() -> String? {
        guard let index = remaining.firstIndex(where: { !$0.hasPrefix("--") }) else { return nil }
        return remaining.remove(at: index)
    }

    /// Fails if anything is left over.
    func finish() throws(UsageError) {
        if let first = remaining.first { throw UsageError("unexpected argument '\(first)'") }
    }
}
