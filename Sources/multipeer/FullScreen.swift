internal import Foundation
internal import Glibc

/// A key read from a terminal in raw mode.
enum Key: Equatable, Sendable {
    /// Printable text (one character, UTF-8 decoded).
    case text(String)
    case enter, backspace, tab, escape, up, down, left, right, pageUp, pageDown
    /// Ctrl and a letter (1 is Ctrl-A); Enter, Tab and Backspace are reported as themselves.
    case control(UInt8)
}

/// Turns the bytes a terminal sends into keys: UTF-8 text, arrows (`ESC [ A`...), Enter, Backspace, Ctrl keys.
/// Other escape sequences (function keys, mouse) are read to their end and dropped; invalid UTF-8 is dropped.
struct KeyDecoder {
    private var sequence: [UInt8] = []
    private var utf8: [UInt8] = []
    private var expected = 0

    /// The keys `byte` completes (none while a sequence or a character is incomplete).
    mutating func feed(_ byte: UInt8) -> [Key] {
        if !sequence.isEmpty { return escape(byte) }
        if expected > 0 {
            guard byte & 0xC0 == 0x80 else {
                expected = 0
                utf8 = []
                return feed(byte)
            }
            utf8.append(byte)
            guard utf8.count == expected else { return [] }
            defer {
                utf8 = []
                expected = 0
            }
            return String(validating: utf8, as: UTF8.self).map { [.text($0)] } ?? []
        }
        switch byte {
        case 0x1B:
            sequence = [byte]
            return []
        case 0x0D, 0x0A: return [.enter]
        case 0x7F, 0x08: return [.backspace]
        case 0x09: return [.tab]
        case 0x01...0x1A: return [.control(byte)]
        case 0x20...0x7E: return [.text(String(UnicodeScalar(byte)))]
        case 0xC2...0xDF: return start(byte, length: 2)
        case 0xE0...0xEF: return start(byte, length: 3)
        case 0xF0...0xF4: return start(byte, length: 4)
        default: return []
        }
    }

    private mutating func start(_ byte: UInt8, length: Int) -> [Key] {
        utf8 = [byte]
        expected = length
        return []
    }

    private mutating func escape(_ byte: UInt8) -> [Key] {
        if sequence.count == 1 {
            guard byte == UInt8(ascii: "[") || byte == UInt8(ascii: "O") else {
                // A lone Escape, then whatever came after it.
                sequence = []
                return [.escape] + feed(byte)
            }
            sequence.append(byte)
            return []
        }
        sequence.append(byte)
        // A control sequence ends with a byte in 0x40-0x7E; bound it so garbage cannot grow it.
        guard (0x40...0x7E).contains(byte) || sequence.count > 16 else { return [] }
        defer { sequence = [] }
        if sequence.count == 4, byte == UInt8(ascii: "~") {
            switch sequence[2] {
            case UInt8(ascii: "5"): return [.pageUp]
            case UInt8(ascii: "6"): return [.pageDown]
            default: return []
            }
        }
        guard sequence.count == 3 else { return [] }
        switch byte {
        case UInt8(ascii: "A"): return [.up]
        case UInt8(ascii: "B"): return [.down]
        case UInt8(ascii: "C"): return [.right]
        case UInt8(ascii: "D"): return [.left]
        default: return []
        }
    }
}

/// What an input key or line asks of a session command.
enum InputStep { case next, quit }

/// Runs a session command's input until it asks to quit, its input ends, or SIGINT/SIGTERM arrives: keys on the
/// full screen (redrawing when the terminal is resized), lines otherwise, plus `alongside` tasks; then gives the
/// terminal back. The caller leaves its session afterwards.
func runInput(
    screen: FullScreen?, signals: TerminationSignals, key: @escaping @Sendable (Key) async -> InputStep,
    line: @escaping @Sendable (String) async -> InputStep, redraw: @escaping @Sendable () async -> Void,
    alongside: [@Sendable () async -> Void] = []
) async {
    await withTaskGroup(of: Void.self) { group in
        if let screen {
            group.addTask {
                for await typed in screen.keys where await key(typed) == .quit { break }
            }
            group.addTask { for await _ in screen.resizes { await redraw() } }
        } else {
            let input = InputLines()
            group.addTask {
                for await text in input.lines where await line(text) == .quit { break }
            }
        }
        for task in alongside { group.addTask { await task() } }
        group.addTask { _ = await signals.wait() }
        await group.next()
        group.cancelAll()
    }
    screen?.restore()
}

/// The terminal while a command runs full screen: raw keys (no echo, no line editing; Ctrl-C still raises
/// SIGINT, which the commands turn into a clean exit), the alternate screen, redraws on SIGWINCH; put back as it
/// was by ``restore()``, which every exit path calls.
final class FullScreen: @unchecked Sendable {
    // Safety: `saved` is written once in init and read in restore (guarded by `restored`); drawing happens on
    // one actor.
    private var saved = termios()
    private let restored = NSLock()
    private var isRestored = false
    /// The keys typed, decoded.
    let keys: AsyncStream<Key>
    /// One element per change of the terminal's size.
    let resizes: AsyncStream<Void>
    private let resizeSignals = SignalStream(SIGWINCH)

    /// Whether standard input and output are both a terminal (full screen makes sense).
    static var isAvailable: Bool { isatty(0) == 1 && isatty(1) == 1 }

    init() {
        tcgetattr(0, &saved)
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON)
        raw.c_cc.6 = 1  // VMIN
        raw.c_cc.5 = 0  // VTIME
        tcsetattr(0, TCSANOW, &raw)
        // Ctrl-Z and Ctrl-\ would leave the shell in raw mode on the alternate screen: ignored while full screen
        // (Ctrl-C still ends the command cleanly).
        signal(SIGTSTP, SIG_IGN)
        signal(SIGQUIT, SIG_IGN)
        Output.write("\u{1b}[?1049h\u{1b}[?25l")
        let (keys, sink) = AsyncStream<Key>.makeStream()
        self.keys = keys
        resizes = resizeSignals.signals
        Thread.detachNewThread {
            var decoder = KeyDecoder()
            var byte: UInt8 = 0
            while read(0, &byte, 1) == 1 {
                for key in decoder.feed(byte) { sink.yield(key) }
            }
            sink.finish()
        }
    }

    /// The terminal's size now (at least 4 rows by 20 columns).
    var size: (rows: Int, columns: Int) {
        var size = winsize()
        _ = ioctl(1, UInt(TIOCGWINSZ), &size)
        return (max(Int(size.ws_row), 4), max(Int(size.ws_col), 20))
    }

    /// Whether ``restore()`` ran: nothing is drawn any more (late events must not paint over the shell).
    private var isDone: Bool { restored.withLock { isRestored } }

    /// Draws `rows` (each already cut to the width; they may hold style sequences) from the top, clearing the
    /// rest of every line and the lines below, and puts the cursor at `cursor` (zero-based) or hides it.
    func draw(_ rows: [String], cursor: (row: Int, column: Int)?) {
        guard !isDone else { return }
        var out = "\u{1b}[?25l"
        for (index, row) in rows.enumerated() { out += "\u{1b}[\(index + 1);1H\(row)\u{1b}[0m\u{1b}[K" }
        out += "\u{1b}[J"
        if let cursor { out += "\u{1b}[\(cursor.row + 1);\(cursor.column + 1)H\u{1b}[?25h" }
        Output.write(out)
    }

    /// Fills the screen with `background` and writes `lines` from the top left.
    func fill(_ lines: [String], background: Int?, foreground: Int?) {
        guard !isDone else { return }
        let (screenRows, columns) = size
        let rows = max(screenRows, lines.count + 2)
        var out = "\u{1b}[H"
        out += background.map { "\u{1b}[48;5;\($0)m" } ?? "\u{1b}[49m"
        out += foreground.map { "\u{1b}[38;5;\($0)m" } ?? "\u{1b}[39m"
        for row in 0..<rows {
            let text = row >= 1 && row - 1 < lines.count ? "  " + lines[row - 1] : ""
            out += Self.fit(text, columns)
            if row < rows - 1 { out += "\r\n" }
        }
        out += "\u{1b}[0m"
        Output.write(out)
    }

    /// `text` cut or padded with spaces to `width` terminal cells.
    static func fit(_ text: String, _ width: Int) -> String {
        let cut = CellWidth.prefix(Substring(text), fitting: width)
        return cut + String(repeating: " ", count: max(0, width - CellWidth.of(cut)))
    }

    /// Puts the terminal back as it was (once).
    func restore() {
        let first = restored.withLock { () -> Bool in
            defer { isRestored = true }
            return !isRestored
        }
        guard first else { return }
        Output.write("\u{1b}[0m\u{1b}[?25h\u{1b}[?1049l")
        tcsetattr(0, TCSANOW, &saved)
        signal(SIGTSTP, SIG_DFL)
        signal(SIGQUIT, SIG_DFL)
    }
}

/// How many terminal cells text takes: two for East Asian wide and full-width characters and emoji, none for
/// combining marks and format characters, one otherwise (what terminals do for the common cases; a terminal's
/// own tables may differ for rare characters).
enum CellWidth {
    static func of(_ character: Character) -> Int {
        guard let first = character.unicodeScalars.first else { return 0 }
        switch first.properties.generalCategory {
        case .nonspacingMark, .enclosingMark, .format, .control: return 0
        default: break
        }
        if first.properties.isEmojiPresentation || character.unicodeScalars.contains("\u{FE0F}") { return 2 }
        switch first.value {
        case 0x1100...0x115F, 0x2E80...0x303E, 0x3041...0x33FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xA000...0xA4CF,
            0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60, 0xFFE0...0xFFE6, 0x20000...0x3FFFD:
            return 2
        default:
            return 1
        }
    }

    static func of(_ text: some StringProtocol) -> Int { text.reduce(0) { $0 + of($1) } }

    /// The longest start of `text` that takes at most `width` cells.
    static func prefix(_ text: Substring, fitting width: Int) -> Substring {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let cells = of(text[index])
            if used + cells > width { break }
            used += cells
            end = text.index(after: index)
        }
        return text[..<end]
    }

    /// The longest end of `text` that takes at most `width` cells.
    static func suffix(_ text: String, fitting width: Int) -> Substring {
        var used = 0
        var start = text.endIndex
        while start > text.startIndex {
            let previous = text.index(before: start)
            let cells = of(text[previous])
            if used + cells > width { break }
            used += cells
            start = previous
        }
        return text[start...]
    }
}
