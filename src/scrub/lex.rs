//! A shell-word lexer that remembers where every byte of a word came from, so a secret found in a
//! word's value (quotes removed, escapes resolved) can be masked in the original text and the
//! rest of the command stays verbatim.
//!
//! It reads what the masker needs and no more: words with single, double and `$'...'` quotes and
//! backslash escapes; the operators that end a simple command (`;` `&` `&&` `|` `||` `|&` `(`
//! `)` `$(` `` ` `` and newlines); redirections; here-strings; here-documents (their bodies are
//! free text); comments (free text). Unterminated quotes run to the end.

/// A word: its value and, for each value byte, the offset of the original byte it came from.
#[derive(Debug, Clone)]
pub struct Word {
    pub text: String,
    pub map: Vec<usize>,
    /// Value bytes written with a backslash before them.
    pub esc: Vec<bool>,
}

impl Word {
    /// The original byte range of value bytes `a..b` (`a < b`).
    pub fn orig(&self, a: usize, b: usize) -> (usize, usize) {
        (self.map[a] - usize::from(self.esc[a]), self.map[b - 1] + 1)
    }

    /// A word that is its text, verbatim from byte `at` of the original.
    pub fn verbatim(text: &str, at: usize) -> Word {
        Word {
            text: text.to_string(),
            map: (at..at + text.len()).collect(),
            esc: vec![false; text.len()],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `;`, `&`, `&&`, `||`, newline, `(`, `)`, `$(`, `` ` ``: the next word starts a command.
    End,
    /// `|` or `|&`: like End, and the next command reads this one's output.
    Pipe,
    /// `<`, `>`, `>>`, `>&`, `<&`, `&>`, `>|`, `<>`: the next word is a file.
    Redirect,
    /// `<<<`: the next word is fed to the command's stdin.
    HereString,
    /// `<<` or `<<-`: the next word is a here-document delimiter.
    HereDoc,
}

#[derive(Debug, Clone)]
pub enum Tok {
    Word(Word),
    Op(Op),
    /// Free text (a comment or a here-document body), original byte range.
    Text(usize, usize),
}

/// Splits `s` into tokens.
pub fn lex(s: &str) -> Vec<Tok> {
    lex_states(s).0
}

/// Quote states: what the shell is inside of just before reading a byte.
pub const UNQUOTED: u8 = 0;
pub const SINGLE: u8 = 1;
pub const DOUBLE: u8 = 2;
pub const ANSI_C: u8 = 3;

/// Splits `s` into tokens, and says for each byte position (and the end) which quotes the shell
/// is inside of just before reading it.
pub fn lex_states(s: &str) -> (Vec<Tok>, Vec<u8>) {
    let b = s.as_bytes();
    let mut st = vec![UNQUOTED; b.len() + 1];
    let mut toks = Vec::new();
    let mut i = 0;
    let mut cur: Option<Word> = None;
    // here-document delimiters waiting for the end of the line: (delimiter, strip tabs)
    let mut pending: Vec<(String, bool)> = Vec::new();
    let mut want_delim: Option<bool> = None;
    let push = |toks: &mut Vec<Tok>,
                cur: &mut Option<Word>,
                want: &mut Option<bool>,
                pend: &mut Vec<(String, bool)>| {
        if let Some(w) = cur.take() {
            if let Some(strip) = want.take() {
                pend.push((w.text.clone(), strip));
            }
            toks.push(Tok::Word(w));
        }
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' => {
                push(&mut toks, &mut cur, &mut want_delim, &mut pending);
                i += 1;
            }
            b'\n' => {
                push(&mut toks, &mut cur, &mut want_delim, &mut pending);
                toks.push(Tok::Op(Op::End));
                i = here_docs(s, i + 1, std::mem::take(&mut pending), &mut toks);
            }
            b'#' if cur.is_none() => {
                let e = s[i..].find('\n').map(|k| i + k).unwrap_or(b.len());
                toks.push(Tok::Text(i, e));
                i = e;
            }
            b';' | b'&' | b'|' | b'(' | b')' | b'`' | b'<' | b'>' => {
                // `2>`, `&>` and friends: a word of digits right before a redirection is its fd
                push(&mut toks, &mut cur, &mut want_delim, &mut pending);
                let (op, n) = operator(&s[i..]);
                if op == Op::HereDoc {
                    want_delim = Some(n == 3);
                }
                toks.push(Tok::Op(op));
                i += n;
            }
            b'$' if b.get(i + 1) == Some(&b'(') => {
                push(&mut toks, &mut cur, &mut want_delim, &mut pending);
                toks.push(Tok::Op(Op::End));
                i += 2;
            }
            _ => {
                let w = cur.get_or_insert_with(|| Word {
                    text: String::new(),
                    map: Vec::new(),
                    esc: Vec::new(),
                });
                i = word_part(s, i, w, &mut st);
            }
        }
    }
    push(&mut toks, &mut cur, &mut want_delim, &mut pending);
    (toks, st)
}

/// The bodies of the here-documents whose delimiters `pending` holds, one after another from `i`
/// (the line after their `<<`), as text; gives where the shell reads on, after the last
/// delimiter line.
fn here_docs(s: &str, mut i: usize, pending: Vec<(String, bool)>, toks: &mut Vec<Tok>) -> usize {
    let b = s.as_bytes();
    for (delim, strip) in pending {
        let start = i;
        let mut end = b.len();
        let mut next = b.len();
        let mut j = i;
        while j < b.len() {
            let e = s[j..].find('\n').map(|k| j + k).unwrap_or(b.len());
            let line = &s[j..e];
            let line = if strip {
                line.trim_start_matches('\t')
            } else {
                line
            };
            if line == delim {
                end = j;
                next = (e + 1).min(b.len());
                break;
            }
            j = e + 1;
        }
        if end > start {
            toks.push(Tok::Text(start, end));
        }
        i = next;
    }
    i
}

/// The shell's operators of two and three bytes, each longer one before those it begins with.
const OPERATORS: &[(&str, Op)] = &[
    ("<<<", Op::HereString),
    ("<<-", Op::HereDoc),
    ("<<", Op::HereDoc),
    ("&&", Op::End),
    ("||", Op::End),
    (";;", Op::End),
    ("|&", Op::Pipe),
    ("&>>", Op::Redirect),
    (">>", Op::Redirect),
    (">&", Op::Redirect),
    ("<&", Op::Redirect),
    ("&>", Op::Redirect),
    (">|", Op::Redirect),
    ("<>", Op::Redirect),
];

/// The operator `rest` begins with (it begins with one of `;&|()\`<>`) and its length.
fn operator(rest: &str) -> (Op, usize) {
    if let Some((p, op)) = OPERATORS.iter().find(|(p, _)| rest.starts_with(p)) {
        return (op.clone(), p.len());
    }
    match rest.as_bytes()[0] {
        b'|' => (Op::Pipe, 1),
        b'<' | b'>' => (Op::Redirect, 1),
        _ => (Op::End, 1),
    }
}

/// Adds one unit of a word at `i` (a quoted string, an escape or a plain character) to `w`;
/// returns where the next unit starts.
fn word_part(s: &str, i: usize, w: &mut Word, st: &mut [u8]) -> usize {
    let b = s.as_bytes();
    let mut mark = |from: usize, to: usize, q: u8| {
        for x in st.iter_mut().take(to.min(b.len()) + 1).skip(from) {
            *x = q;
        }
    };
    let add = |w: &mut Word, at: usize| -> usize {
        let n = char_len(b[at]).min(b.len() - at);
        w.text.push_str(&s[at..at + n]);
        w.map.extend(at..at + n);
        w.esc
            .extend(std::iter::repeat(at > 0 && b[at - 1] == b'\\').take(n));
        at + n
    };
    match b[i] {
        b'\'' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'\'' {
                j = add(w, j);
            }
            mark(i + 1, j, SINGLE);
            j + 1
        }
        b'$' if b.get(i + 1) == Some(&b'\'') => {
            let mut j = i + 2;
            while j < b.len() && b[j] != b'\'' {
                if b[j] == b'\\' && j + 1 < b.len() {
                    j += 1;
                }
                j = add(w, j);
            }
            mark(i + 2, j, ANSI_C);
            j + 1
        }
        b'"' => {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                if b[j] == b'\\' && j + 1 < b.len() && b"\"\\$`\n".contains(&b[j + 1]) {
                    j += 1;
                    if b[j] == b'\n' {
                        j += 1;
                        continue;
                    }
                }
                j = add(w, j);
            }
            mark(i + 1, j, DOUBLE);
            j + 1
        }
        b'\\' if i + 1 < b.len() => {
            if b[i + 1] == b'\n' {
                i + 2
            } else {
                add(w, i + 1)
            }
        }
        _ => add(w, i),
    }
}

fn char_len(first: u8) -> usize {
    match first {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        lex(s)
            .into_iter()
            .map(|t| match t {
                Tok::Word(w) => w.text,
                Tok::Op(o) => format!("<{o:?}>"),
                Tok::Text(a, b) => format!("[{}]", &s[a..b]),
            })
            .collect()
    }

    #[test]
    fn quotes_escapes_and_operators() {
        assert_eq!(
            words("a 'b c'\"d\"\\ e;f&&g|h $'x\\'y' # hi"),
            ["a", "b cd e", "<End>", "f", "<End>", "g", "<Pipe>", "h", "x'y", "[# hi]"]
        );
    }

    #[test]
    fn heredoc_body_is_text() {
        assert_eq!(
            words("cat > .env <<'EOF'\nA=1\nB=2\nEOF\necho done"),
            [
                "cat",
                "<Redirect>",
                ".env",
                "<HereDoc>",
                "EOF",
                "<End>",
                "[A=1\nB=2\n]",
                "echo",
                "done"
            ]
        );
    }

    #[test]
    fn value_bytes_map_to_the_original() {
        let s = "x 'ab'\"c\"d";
        let Tok::Word(w) = &lex(s)[1] else { panic!() };
        assert_eq!(w.text, "abcd");
        assert_eq!(w.orig(0, 4), (3, 10));
        assert_eq!(&s[w.orig(2, 3).0..w.orig(2, 3).1], "c");
    }
}
