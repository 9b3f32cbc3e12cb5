//! JSON with comments (opencode's `opencode.json` / `opencode.jsonc`), read with the byte span
//! of every value so a file can be edited surgically: one item inserted or removed, every other
//! byte (comments, indentation, key order, trailing commas) left as it was. opencode's config
//! grammar, used by the model block ([`super`]) alone.
//!
//! The grammar is opencode's: JSON plus `//` and `/* */` comments and trailing commas. A
//! duplicate key reads as the last one, as `JSON.parse` does. Errors name the line and column.

use anyhow::{bail, Result};

/// A value and where it lies in the text (`start..end`, bytes).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub start: usize,
    pub end: usize,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Object(Vec<Member>),
    Array(Vec<Node>),
    Str(String),
    /// A number, `true`, `false` or `null`.
    Scalar,
}

/// `"key": value`; the member spans `key_start..value.end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub key: String,
    pub key_start: usize,
    pub value: Node,
}

impl Member {
    fn span(&self) -> (usize, usize) {
        (self.key_start, self.value.end)
    }
}

impl Node {
    /// The member `key` of an object (the last one when repeated).
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Object(ms) => ms.iter().rev().find(|m| m.key == key).map(|m| &m.value),
            _ => None,
        }
    }

    /// What the value is, for error messages.
    pub fn what(&self) -> &'static str {
        match self.kind {
            Kind::Object(_) => "an object",
            Kind::Array(_) => "an array",
            Kind::Str(_) => "a string",
            Kind::Scalar => "a number, boolean or null",
        }
    }

    /// Spans of the container's items (members or elements), in order.
    fn items(&self) -> Vec<(usize, usize)> {
        match &self.kind {
            Kind::Object(ms) => ms.iter().map(Member::span).collect(),
            Kind::Array(vs) => vs.iter().map(|v| (v.start, v.end)).collect(),
            _ => Vec::new(),
        }
    }
}

/// Parses JSONC text. The error says where (`line L, column C`) and what was expected.
pub fn parse(text: &str) -> Result<Node> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        text,
    };
    if text.starts_with('\u{feff}') {
        p.i = 3;
    }
    p.skip()?;
    let v = p.value(0)?;
    p.skip()?;
    if p.i < p.s.len() {
        return Err(p.error("end of file after the top-level value"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    text: &'a str,
}

impl Parser<'_> {
    fn error(&self, expected: &str) -> anyhow::Error {
        let before = &self.text[..self.i.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.len() - before.rfind('\n').map(|n| n + 1).unwrap_or(0) + 1;
        let found = match self.s.get(self.i) {
            None => "end of file".to_string(),
            Some(_) => {
                let c = self.text[self.i..].chars().next().unwrap_or('?');
                format!("{c:?}")
            }
        };
        anyhow::anyhow!("line {line}, column {col}: expected {expected}, found {found}")
    }

    /// Skips whitespace and comments.
    fn skip(&mut self) -> Result<()> {
        loop {
            match self.s.get(self.i) {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.i += 1,
                Some(b'/') if self.s.get(self.i + 1) == Some(&b'/') => {
                    while self.i < self.s.len() && self.s[self.i] != b'\n' {
                        self.i += 1;
                    }
                }
                Some(b'/') if self.s.get(self.i + 1) == Some(&b'*') => {
                    let from = self.i;
                    self.i += 2;
                    loop {
                        if self.i + 1 >= self.s.len() {
                            self.i = from;
                            return Err(self.error("*/ closing this comment"));
                        }
                        if self.s[self.i] == b'*' && self.s[self.i + 1] == b'/' {
                            self.i += 2;
                            break;
                        }
                        self.i += 1;
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// The value at `self.i`, `depth` containers deep, with its span.
    fn value(&mut self, depth: usize) -> Result<Node> {
        if depth > 200 {
            return Err(self.error("less nesting (over 200 levels)"));
        }
        let start = self.i;
        let kind = match self.s.get(self.i) {
            Some(b'{') => Kind::Object(self.object(depth)?),
            Some(b'[') => Kind::Array(self.array(depth)?),
            Some(b'"') => Kind::Str(self.string()?),
            Some(b't') | Some(b'f') | Some(b'n') => self.word()?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => return Err(self.error("a value")),
        };
        Ok(Node {
            start,
            end: self.i,
            kind,
        })
    }

    /// The members of the object at `self.i` (which holds `{`), through its `}`.
    fn object(&mut self, depth: usize) -> Result<Vec<Member>> {
        self.i += 1;
        let mut ms = Vec::new();
        loop {
            self.skip()?;
            if self.s.get(self.i) == Some(&b'}') {
                self.i += 1;
                break;
            }
            if self.s.get(self.i) != Some(&b'"') {
                return Err(self.error(if ms.is_empty() {
                    "a property name or }"
                } else {
                    "a property name"
                }));
            }
            let key_start = self.i;
            let key = self.string()?;
            self.skip()?;
            if self.s.get(self.i) != Some(&b':') {
                return Err(self.error(":"));
            }
            self.i += 1;
            self.skip()?;
            let value = self.value(depth + 1)?;
            ms.push(Member {
                key,
                key_start,
                value,
            });
            self.skip()?;
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.error(", or }")),
            }
        }
        Ok(ms)
    }

    /// The elements of the array at `self.i` (which holds `[`), through its `]`.
    fn array(&mut self, depth: usize) -> Result<Vec<Node>> {
        self.i += 1;
        let mut vs = Vec::new();
        loop {
            self.skip()?;
            if self.s.get(self.i) == Some(&b']') {
                self.i += 1;
                break;
            }
            vs.push(self.value(depth + 1)?);
            self.skip()?;
            match self.s.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    break;
                }
                _ => return Err(self.error(", or ]")),
            }
        }
        Ok(vs)
    }

    /// `true`, `false` or `null` at `self.i`.
    fn word(&mut self) -> Result<Kind> {
        for w in ["true", "false", "null"] {
            if self.s[self.i..].starts_with(w.as_bytes()) {
                self.i += w.len();
                return Ok(Kind::Scalar);
            }
        }
        Err(self.error("a value"))
    }

    /// A number at `self.i`, as JSON writes them.
    fn number(&mut self) -> Result<Kind> {
        let from = self.i;
        while self.i < self.s.len()
            && matches!(
                self.s[self.i],
                b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
            )
        {
            self.i += 1;
        }
        if serde_json::from_str::<serde_json::Number>(&self.text[from..self.i]).is_err() {
            self.i = from;
            return Err(self.error("a number"));
        }
        Ok(Kind::Scalar)
    }

    /// A JSON string at `self.i` (which holds `"`), decoded.
    fn string(&mut self) -> Result<String> {
        let from = self.i;
        self.i += 1;
        loop {
            match self.s.get(self.i) {
                None | Some(b'\n') => {
                    self.i = from;
                    return Err(self.error("a closing \" for this string"));
                }
                Some(b'\\') => self.i += 2,
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(_) => self.i += 1,
            }
        }
        match serde_json::from_str::<String>(&self.text[from..self.i]) {
            Ok(s) => Ok(s),
            Err(_) => {
                self.i = from;
                Err(self.error("a valid string"))
            }
        }
    }
}

/// `text` with `item` inserted as the first item of the container `c` (an object or array
/// node of `text`). The new item takes the whitespace that led to the old first item, so a
/// one-per-line container stays one per line; [`remove`] of the new item gives `text` back
/// byte for byte.
pub fn prepend(text: &str, c: &Node, item: &str) -> Result<String> {
    let items = c.items();
    if !matches!(c.kind, Kind::Object(_) | Kind::Array(_)) {
        bail!("cannot insert into {}", c.what());
    }
    let mut out = String::with_capacity(text.len() + item.len() + 8);
    match items.first() {
        None => {
            out.push_str(&text[..c.start + 1]);
            out.push_str(item);
            out.push_str(&text[c.start + 1..]);
        }
        Some(&(first, _)) => {
            let lead = &text[c.start + 1..first];
            let sep = if !lead.is_empty() && lead.chars().all(char::is_whitespace) {
                lead
            } else {
                " "
            };
            out.push_str(&text[..first]);
            out.push_str(item);
            out.push(',');
            out.push_str(sep);
            out.push_str(&text[first..]);
        }
    }
    Ok(out)
}

/// `text` without the item spanning `at..` in container `c`: the item and its separator.
/// With a next item, from the item's start to the next one's; as the last item, from the end of
/// the previous one (a trailing comma, if any, stays); as the only item, the item and its comma.
pub fn remove(text: &str, c: &Node, at: usize) -> Result<String> {
    let items = c.items();
    let Some(k) = items.iter().position(|&(s, _)| s == at) else {
        bail!("no item at byte {at}");
    };
    let (s, e) = items[k];
    let (from, to) = if let Some(&(next, _)) = items.get(k + 1) {
        (s, next)
    } else if k > 0 {
        (items[k - 1].1, e)
    } else {
        // the only item: take its trailing comma with it
        let rest = &text[e..c.end - 1];
        let comma = rest
            .find(|ch: char| !ch.is_whitespace())
            .filter(|&n| rest.as_bytes()[n] == b',')
            .map(|n| n + 1)
            .unwrap_or(0);
        (s, e + comma)
    };
    Ok(format!("{}{}", &text[..from], &text[to..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at<'a>(n: &'a Node, path: &[&str]) -> &'a Node {
        path.iter().fold(n, |n, k| n.get(k).unwrap())
    }

    #[test]
    fn comments_trailing_commas_and_spans() {
        let t = "{\n  // c\n  \"a\": [1, \"x\",], /* b */ \"b\": {\"c\": null},\n}";
        let n = parse(t).unwrap();
        let a = at(&n, &["a"]);
        assert_eq!(&t[a.start..a.end], "[1, \"x\",]");
        assert_eq!(
            &t[at(&n, &["b", "c"]).start..at(&n, &["b", "c"]).end],
            "null"
        );
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("{\n  \"a\": 1,,\n}").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2, column 10: expected a property name, found ','"
        );
        let e = parse("{\"a\": 1} x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 1, column 10: expected end of file after the top-level value, found 'x'"
        );
        assert!(parse("{\"a\": tru}").is_err());
        assert!(parse("{\"a\": \"x}").is_err());
        assert!(parse("{/* open").is_err());
    }

    #[test]
    fn prepend_then_remove_is_the_identity() {
        for t in [
            "{\"p\": []}",
            "{\"p\": [ ]}",
            "{\"p\": [\"a\"]}",
            "{\"p\": [\"a\", \"b\",]}",
            "{\"p\": [\n    \"a\",\n    \"b\" // last\n  ]}",
            "{\"p\": [ /* first */ \"a\"]}",
            "{\"p\": [\"a\"\n]}",
        ] {
            let n = parse(t).unwrap();
            let p = at(&n, &["p"]);
            let t2 = prepend(t, p, "\"m\"").unwrap();
            let n2 = parse(&t2).unwrap();
            let p2 = at(&n2, &["p"]);
            let Kind::Array(vs) = &p2.kind else { panic!() };
            assert_eq!(vs[0].kind, Kind::Str("m".into()), "{t2}");
            let back = remove(&t2, p2, vs[0].start).unwrap();
            assert_eq!(back, t, "via {t2}");
        }
    }

    #[test]
    fn prepend_keeps_one_per_line() {
        let t = "{\n  \"a\": 1,\n  \"b\": 2\n}\n";
        let n = parse(t).unwrap();
        assert_eq!(
            prepend(t, &n, "\"p\": {}").unwrap(),
            "{\n  \"p\": {},\n  \"a\": 1,\n  \"b\": 2\n}\n"
        );
    }

    #[test]
    fn removing_a_last_or_middle_item_keeps_valid_text() {
        let t = "[\"a\", \"m\", \"b\"]";
        let n = parse(t).unwrap();
        let Kind::Array(vs) = &n.kind else { panic!() };
        assert_eq!(remove(t, &n, vs[1].start).unwrap(), "[\"a\", \"b\"]");
        assert_eq!(remove(t, &n, vs[2].start).unwrap(), "[\"a\", \"m\"]");
        let t = "{\"only\": 1 , }";
        let n = parse(t).unwrap();
        let Kind::Object(ms) = &n.kind else { panic!() };
        assert_eq!(remove(t, &n, ms[0].key_start).unwrap(), "{ }");
    }
}
