//! What may reach a popup: text with nothing raw in it. A NUL (which fails the D-Bus call),
//! other control characters (terminal escapes) and Unicode bidi controls (`safe\u{202e}txt.exe`
//! shown as `safeexe.txt`) are shown visibly as `<U+XXXX>`; text is capped with an ellipsis;
//! and where the notification server interprets markup in the body (`body-markup`), `&`, `<`
//! and `>` are escaped there, so an agent name such as `<b>bold-agent` is shown as written. The
//! summary is plain text to every server (dunst escapes it itself), so it is never escaped.

/// The longest summary and body line shown, in characters (each line of the body is capped on
/// its own, so a long name never pushes out the link and the "Look closer" line).
pub const SUMMARY_CAP: usize = 120;
pub const LINE_CAP: usize = 300;

/// Is `c` a control a reader cannot see: C0/C1 controls but newline and tab, DEL, and the
/// bidi embeddings, overrides, isolates and marks.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every hidden control shown as `<U+XXXX>` (newlines kept only when `lines`), at
/// most `cap` characters, the last an ellipsis when cut.
pub fn visible(s: &str, cap: usize, lines: bool) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if hidden(c) || (c == '\n' && !lines) {
            out += &format!("<U+{:04X}>", c as u32);
        } else {
            out.push(c);
        }
    }
    if out.chars().count() > cap {
        out = out.chars().take(cap.saturating_sub(1)).collect();
        out.push('…');
    }
    out
}

/// Each line of `s` [`visible`] and capped at `cap`.
pub fn visible_lines(s: &str, cap: usize) -> String {
    s.split('\n')
        .map(|l| visible(l, cap, false))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `s` escaped for a server that reads the body as markup.
pub fn escape_markup(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_an_escape_and_a_bidi_override_are_shown_and_long_text_is_cut() {
        assert_eq!(
            visible("a\0b\x1b[31mc safe\u{202e}txt.exe", 100, false),
            "a<U+0000>b<U+001B>[31mc safe<U+202E>txt.exe"
        );
        assert_eq!(visible("one\ntwo", 100, true), "one\ntwo");
        assert_eq!(visible_lines("abcdef\nxy", 4), "abc…\nxy");
        assert_eq!(visible("one\ntwo", 100, false), "one<U+000A>two");
        let long = visible(&"x".repeat(400), 120, false);
        assert_eq!(long.chars().count(), 120);
        assert!(long.ends_with("x…"));
        assert_eq!(
            escape_markup("<b>a & b</b>"),
            "&lt;b&gt;a &amp; b&lt;/b&gt;"
        );
    }
}
