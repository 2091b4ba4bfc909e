import Testing

@testable import multipeer

/// The full screen's key decoding, line editing and layout, without a terminal.
struct TerminalInputTests {
    static func keys(_ bytes: [UInt8]) -> [Key] {
        var decoder = KeyDecoder()
        return bytes.flatMap { decoder.feed($0) }
    }

    @Test func bytesBecomeKeys() {
        #expect(Self.keys(Array("hi".utf8)) == [.text("h"), .text("i")])
        #expect(Self.keys([0x1B, 0x5B, 0x41, 0x1B, 0x5B, 0x42]) == [.up, .down])
        #expect(Self.keys([0x0D, 0x7F, 0x08, 0x15]) == [.enter, .backspace, .backspace, .control(0x15)])
        #expect(Self.keys(Array("é→😀".utf8)) == [.text("é"), .text("→"), .text("😀")])
        // A lone Escape, then a key.
        #expect(Self.keys([0x1B, 0x61]) == [.escape, .text("a")])
        #expect(Self.keys([0x1B, 0x5B, 0x35, 0x7E, 0x1B, 0x5B, 0x36, 0x7E]) == [.pageUp, .pageDown])
        // Other sequences (Delete, F5) are read to their end and dropped; invalid UTF-8 is dropped.
        #expect(Self.keys([0x1B, 0x5B, 0x33, 0x7E, 0x1B, 0x5B, 0x31, 0x35, 0x7E, 0x61]) == [.text("a")])
        #expect(Self.keys([0xC3, 0x28, 0xFF, 0x62]) == [.text("("), .text("b")])
        // A sequence that never ends is cut off: what follows it is read again.
        #expect(Self.keys([0x1B, 0x5B] + Array(repeating: 0x30, count: 40) + [0x7A]).last == .text("z"))
    }

    @Test func theLineEditorKeepsAHistory() {
        var editor = LineEditor()
        for key in "one".map({ Key.text(String($0)) }) { _ = editor.apply(key) }
        #expect(editor.apply(.enter) == .submitted("one"))
        for key in "twx".map({ Key.text(String($0)) }) { _ = editor.apply(key) }
        _ = editor.apply(.backspace)
        _ = editor.apply(.text("o"))
        #expect(editor.apply(.enter) == .submitted("two"))
        _ = editor.apply(.text("d"))
        _ = editor.apply(.up)
        #expect(editor.text == "two")
        _ = editor.apply(.up)
        _ = editor.apply(.up)
        #expect(editor.text == "one")
        _ = editor.apply(.down)
        _ = editor.apply(.down)
        #expect(editor.text == "d", "the line being typed comes back")
        _ = editor.apply(.control(0x15))
        #expect(editor.text.isEmpty && editor.apply(.enter) == .editing, "an empty line is not sent")
        for _ in 0..<(LineEditor.lengthLimit + 10) { _ = editor.apply(.text("x")) }
        #expect(editor.text.count == LineEditor.lengthLimit)
    }

    @Test func theViewFitsAnySizeAndPutsTheCursorOnTheInputLine() {
        let view = ChatView(
            title: "multipeer chat · Ada", nearby: [("Bea", "member, code 123456")], members: ["Bea ✓"],
            pane: (0..<50).map { "line \($0) " + String(repeating: "word 漢字😀 ", count: $0 % 7) },
            transfers: ["[##..] 50%"],
            prompt: "Cy invites you", inputPrompt: "> ", input: String(repeating: "x", count: 300))
        for (rows, columns) in [(4, 20), (24, 80), (10, 200), (60, 45)] {
            let (lines, cursor) = view.render(rows: rows, columns: columns)
            #expect(lines.count == rows, "\(rows)x\(columns): \(lines.count) rows")
            let visible = lines.map { $0.replacing(/\u{1b}\[[0-9;?]*[A-Za-z]/, with: "") }
            #expect(visible.allSatisfy { CellWidth.of($0) <= columns }, "\(rows)x\(columns): \(visible)")
            #expect(visible[cursor.row].hasPrefix("> ") && cursor.column < columns, "\(rows)x\(columns)")
            if rows >= 24 { #expect(visible.contains { $0.contains("line 49") }, "the newest line shows") }
        }
    }

    @Test func wideCharactersTakeTwoCells() {
        #expect(CellWidth.of("abc") == 3)
        #expect(CellWidth.of("漢字") == 4)
        #expect(CellWidth.of("😀") == 2 && CellWidth.of("👍🏽") == 2 && CellWidth.of("e\u{301}") == 1)
        #expect(FullScreen.fit("漢字漢字", 5) == "漢字 ")
        #expect(ChatView.wrap("漢字漢字漢字", 4) == ["漢字", "漢字", "漢字"])
        #expect(CellWidth.suffix("ab漢字", fitting: 3) == "字")
    }

    @Test func thePaneScrollsBackAndSaysWhatIsBelow() {
        var view = ChatView(
            title: "t", nearby: [], members: [], pane: (0..<100).map { "message \($0)" }, transfers: [], prompt: nil,
            inputPrompt: "> ", input: "")
        let newest = view.render(rows: 20, columns: 40).rows.joined(separator: "\n")
        #expect(newest.contains("message 99") && !newest.contains("newer rows"))
        view.scroll = 30
        let back = view.render(rows: 20, columns: 40).rows.joined(separator: "\n")
        #expect(
            back.contains("message 69") && !back.contains("message 70") && back.contains("↓ 30 newer rows"), "\(back)")
        view.scroll = 10_000
        let top = view.render(rows: 20, columns: 40).rows.joined(separator: "\n")
        #expect(top.contains("message 0") && !top.contains("message 99"), "never past the oldest line: \(top)")
    }

    @Test func wrappingKeepsEveryCharacterAndEveryLineFits() {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["a", "bb ", " ", "漢", "😀", "word ", "e\u{301}", "  "]
        for width in [1, 2, 3, 7, 40] {
            for _ in 0..<200 {
                let text = (0..<Int.random(in: 0...60, using: &generator)).map { _ in pieces.randomElement()! }.joined()
                let lines = ChatView.wrap(text, width)
                #expect(lines.allSatisfy { CellWidth.of($0) <= max(width, 2) }, "\(width): \(lines)")
                // Only the spaces a line was broken at are gone.
                #expect(lines.joined().filter { $0 != " " } == text.filter { $0 != " " }, "\(width): \(lines)")
            }
        }
        // One pass: a message of 1 MiB wraps (a quadratic wrap took hours at this size).
        let long = String(repeating: "abcdefghij", count: 100_000)
        #expect(ChatView.wrap(long, 100).count == 10_000)
    }

    @Test func everyControlCharacterIsEscapedForTheTerminal() {
        // C0, DEL, C1 (U+009B is a one-character CSI for VTE and screen), and the line separators.
        let hostile = "a\u{1b}]0;title\u{07}\u{7f}\u{9b}2J\u{9d}\u{2028}\u{2029}b"
        let shown = Output.escaped(hostile)
        #expect(!shown.unicodeScalars.contains { Output.isControl($0) }, "\(shown.unicodeScalars.map(\.value))")
        #expect(shown.hasPrefix("a\\u{1b}]0;title\\u{7}") && shown.hasSuffix("b"), "\(shown)")
        #expect(Output.escaped(shown) == shown, "escaping twice changes nothing")
        #expect(Output.escaped("漢字 é 😀") == "漢字 é 😀")
    }

    @Test func thePaneHoldsBoundedEscapedLines() {
        var pane = MessagePane()
        for index in 0..<1_500 {
            pane.append("\(index) \u{1b}[2J\u{9b}" + String(repeating: "x", count: 10_000))
        }
        #expect(pane.lines.count == MessagePane.lineLimit)
        #expect(pane.lines.first?.hasPrefix("500 ") == true && pane.lines.last?.hasPrefix("1499 ") == true)
        #expect(pane.lines.allSatisfy { $0.count < MessagePane.lengthLimit + 40 && $0.hasSuffix("more characters)") })
        #expect(!pane.lines.joined().unicodeScalars.contains { Output.isControl($0) })
    }
}
