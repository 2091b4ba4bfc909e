internal import Foundation

/// The input line of the full-screen chat: text typed at its end, Backspace, Ctrl-U to clear, and a history of
/// sent lines walked with the arrows.
struct LineEditor {
    static let historyLimit = 100
    /// The longest line kept (characters); typing beyond it is ignored.
    static let lengthLimit = 4_000

    private(set) var text = ""
    private var history: [String] = []
    /// Position while walking the history; `history.count` is the line being typed.
    private var position = 0
    private var draft = ""

    enum Outcome: Equatable {
        /// The line changed, or nothing happened.
        case editing
        /// Enter: the line to run (not empty).
        case submitted(String)
    }

    mutating func apply(_ key: Key) -> Outcome {
        switch key {
        case .text(let typed):
            if text.count < Self.lengthLimit { text += typed }
        case .tab:
            if text.count < Self.lengthLimit { text += " " }
        case .backspace:
            if !text.isEmpty { text.removeLast() }
        case .control(0x15):  // Ctrl-U
            text = ""
        case .up:
            guard position > 0 else { break }
            if position == history.count { draft = text }
            position -= 1
            text = history[position]
        case .down:
            guard position < history.count else { break }
            position += 1
            text = position == history.count ? draft : history[position]
        case .enter:
            let line = text
            text = ""
            draft = ""
            guard !line.trimmingCharacters(in: .whitespaces).isEmpty else {
                position = history.count
                return .editing
            }
            if history.last != line { history.append(line) }
            if history.count > Self.historyLimit { history.removeFirst(history.count - Self.historyLimit) }
            position = history.count
            return .submitted(line)
        default:
            break
        }
        return .editing
    }
}

/// The chat's message pane: the last ``lineLimit`` lines, oldest first, each escaped (text from peers cannot
/// command the terminal) and cut to ``lengthLimit`` characters, saying how much was left out.
struct MessagePane {
    static let lineLimit = 1_000
    static let lengthLimit = 2_000
    private(set) var lines: [String] = []

    mutating func append(_ text: String) {
        var line = Output.escaped(text)
        if line.count > Self.lengthLimit {
            line = String(line.prefix(Self.lengthLimit)) + " … (\(line.count - Self.lengthLimit) more characters)"
        }
        lines.append(line)
        if lines.count > Self.lineLimit { lines.removeFirst(lines.count - Self.lineLimit) }
    }
}

/// What the full-screen chat shows, laid out for a terminal of a given size: a title bar; nearby peers with
/// their state and the session's members on the left; the message pane (newest at the bottom) on the right;
/// transfers with progress bars; an invitation prompt; the input line and a line of help. Every text in it that
/// came from a peer is escaped already, so it cannot move the cursor or restyle the screen.
struct ChatView {
    var title: String
    /// Nearby peers: name and what this side knows of them (found, invited, inviting us with a code, member).
    var nearby: [(name: String, state: String)]
    var members: [String]
    var pane: [String]
    var transfers: [String]
    /// The invitation waiting for an answer, as one line (wrapped when long).
    var prompt: String?
    var inputPrompt: String
    var input: String
    /// Rows of the message pane hidden below (scrolled back); 0 shows the newest.
    var scroll = 0
    static let help =
        "/invite NAME [MSG]  /send NAME FILE  /to NAME TEXT  /accept /decline NAME  /quit  ↑↓ PgUp PgDn"

    private static let reverse = "\u{1b}[7m"
    private static let bold = "\u{1b}[1m"
    private static let dim = "\u{1b}[2m"
    private static let highlight = "\u{1b}[1;33m"
    private static let reset = "\u{1b}[0m"

    /// The rows to draw and where the cursor goes.
    func render(rows: Int, columns: Int) -> (rows: [String], cursor: (row: Int, column: Int)) {
        let top = [Self.reverse + FullScreen.fit(" " + title, columns) + Self.reset]
        // The input line shows its end when it is longer than the screen is wide.
        let promptWidth = CellWidth.of(inputPrompt)
        let room = max(1, columns - promptWidth - 1)
        let shown = CellWidth.of(input) > room ? "…" + CellWidth.suffix(input, fitting: room - 1) : input
        let inputLine = Self.bold + inputPrompt + Self.reset + shown
        let separator = Self.dim + String(repeating: "─", count: columns) + Self.reset
        let help = Self.dim + FullScreen.fit(" " + Self.help, columns) + Self.reset
        let promptLines = (prompt.map { Self.wrap($0, columns - 1) } ?? []).prefix(3).map {
            Self.highlight + FullScreen.fit(" " + $0, columns) + Self.reset
        }
        let transferLines = transfers.suffix(3).map { FullScreen.fit(" " + $0, columns) }
        // On a small screen the title, one row of messages and the input line come first; then the prompt, the
        // separator, the transfers and the help, as far as they fit.
        var budget = max(1, rows - top.count - 1)
        func take<T>(_ items: [T]) -> [T] {
            let taken = Array(items.prefix(budget))
            budget -= taken.count
            return taken
        }
        let keptInput = take([inputLine])
        let keptPrompt = take(promptLines)
        let keptSeparator = take([separator])
        let keptTransfers = take(transferLines)
        let keptHelp = take([help])
        let bottom = keptTransfers + keptPrompt + keptSeparator + keptInput + keptHelp
        let body = max(1, rows - top.count - bottom.count)
        let all = top + bodyRows(body, columns) + bottom
        let inputRow = top.count + body + keptTransfers.count + keptPrompt.count + keptSeparator.count
        return (all, (row: inputRow, column: min(columns - 1, promptWidth + CellWidth.of(shown))))
    }

    /// The side panel (nearby and members) and the message pane, `count` rows of `columns`.
    private func bodyRows(_ count: Int, _ columns: Int) -> [String] {
        let side = columns >= 60 ? min(32, columns / 3) : 0
        let paneWidth = columns - (side > 0 ? side + 1 : 0) - 1
        var panel: [String] = []
        if side > 0 {
            panel.append(Self.bold + FullScreen.fit(" Nearby (\(nearby.count))", side) + Self.reset)
            if nearby.isEmpty { panel.append(Self.dim + FullScreen.fit("  nobody found yet", side) + Self.reset) }
            for peer in nearby {
                panel.append(FullScreen.fit("  " + peer.name, side))
                panel.append(Self.dim + FullScreen.fit("    " + peer.state, side) + Self.reset)
            }
            panel.append(FullScreen.fit("", side))
            panel.append(Self.bold + FullScreen.fit(" Members (\(members.count))", side) + Self.reset)
            if members.isEmpty { panel.append(Self.dim + FullScreen.fit("  none yet", side) + Self.reset) }
            for member in members { panel.append(FullScreen.fit("  " + member, side)) }
        }
        var wrapped: [String] = []
        for line in pane.reversed() {
            wrapped.insert(contentsOf: Self.wrap(line, paneWidth), at: 0)
            if wrapped.count >= count + scroll { break }
        }
        // Never past the oldest line kept.
        let hidden = wrapped.count > count ? min(scroll, wrapped.count - (count - 1)) : 0
        // Scrolled back, the last row says that newer messages are below.
        let shownRows = hidden > 0 ? count - 1 : count
        var messages = Array(wrapped.dropLast(hidden).suffix(shownRows))
        messages = Array(repeating: "", count: shownRows - messages.count) + messages
        return (0..<count).map { row in
            let left =
                side > 0
                ? (row < panel.count ? panel[row] : FullScreen.fit("", side)) + Self.dim + "│" + Self.reset : ""
            if row == shownRows {
                return left + " " + Self.reverse + FullScreen.fit("↓ \(hidden) newer rows (PgDn)", paneWidth)
                    + Self.reset
            }
            return left + " " + FullScreen.fit(messages[row], paneWidth)
        }
    }

    /// `text` broken into lines of at most `width` terminal cells, at spaces where it can; one pass over the text.
    static func wrap(_ text: String, _ width: Int) -> [String] {
        guard width > 0 else { return [text] }
        var lines: [String] = []
        var line: [Character] = []
        var lineWidth = 0
        /// Where the last space of `line` is, and the width before it.
        var space: (index: Int, width: Int)?
        for character in text {
            let cells = CellWidth.of(character)
            while lineWidth + cells > width, !line.isEmpty {
                if let space, space.index > 0 {
                    lines.append(String(line[..<space.index]))
                    line = Array(line[(space.index + 1)...])
                    lineWidth -= space.width + 1
                } else {
                    lines.append(String(line))
                    line = []
                    lineWidth = 0
                }
                space = nil
                // What moved to the new line may hold a space of its own (it is shorter than a line).
                var width = 0
                for (index, moved) in line.enumerated() {
                    if moved == " " { space = (index, width) }
                    width += CellWidth.of(moved)
                }
            }
            if character == " " { space = (line.count, lineWidth) }
            line.append(character)
            lineWidth += cells
        }
        lines.append(String(line))
        return lines
    }
}
