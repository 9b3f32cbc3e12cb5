//! What a call is, for the detector: its exact identity (tool and canonical arguments, a bash
//! command normalised first), its target (what it works on), and how many lines of which file
//! a read requests. Pure functions over one call.

use serde_json::{Map, Value};
use std::hash::{Hash, Hasher};

/// A fast non-cryptographic hasher (FxHash's multiply-rotate, eight bytes at a time), stable
/// across processes, for identities and the session index.
#[derive(Default, Clone, Copy)]
pub struct Fx(u64);

const FX_K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Fx {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(FX_K);
    }
}

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A hasher for keys that are already hashes.
#[derive(Default, Clone, Copy)]
pub struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type IdMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<Identity>>;

fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, *b).hash(h),
        Value::Number(n) => {
            2u8.hash(h);
            match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => i.hash(h),
                (None, Some(f)) => f.to_bits().hash(h),
                _ => n.to_string().hash(h),
            }
        }
        Value::String(s) => (3u8, s.as_str()).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            // serde_json's Map is ordered by key: the hash is over sorted keys
            for (k, x) in o {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

/// Normalises a bash command so trivially different spellings of one command compare equal:
/// continuation lines joined, comments dropped, leading `VAR=value` assignments and `cd dir &&`
/// prefixes stripped, whitespace collapsed.
pub fn normalize_command(cmd: &str) -> String {
    normalized(cmd).into_owned()
}

/// [`normalize_command`] without copying a command that is already normal (the common case).
pub fn normalized(cmd: &str) -> std::borrow::Cow<'_, str> {
    let first = cmd.split(' ').next().unwrap_or("");
    let plain = !cmd.contains(['\n', '#', '\t', '\\'])
        && !cmd.contains("  ")
        && !cmd.starts_with(' ')
        && !cmd.ends_with(' ')
        && !cmd.starts_with("cd ")
        && !first.contains('=');
    if plain {
        return std::borrow::Cow::Borrowed(cmd);
    }
    std::borrow::Cow::Owned(normalize_slow(cmd))
}

fn normalize_slow(cmd: &str) -> String {
    let joined = cmd.replace("\\\n", " ");
    let mut kept = Vec::new();
    for line in joined.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        // a trailing comment outside quotes
        let mut quote = None;
        let mut cut = t.len();
        let mut prev = ' ';
        for (i, c) in t.char_indices() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '#') if prev.is_whitespace() => {
                    cut = i;
                    break;
                }
                _ => {}
            }
            prev = c;
        }
        kept.push(&t[..cut]);
    }
    let mut s: String = kept.join(" ; ");
    s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    loop {
        let before = s.len();
        // leading VAR=value assignments
        while let Some(first) = s.split(' ').next() {
            let is_assign = first.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit())
            });
            if is_assign && s.contains(' ') {
                s = s[first.len() + 1..].to_string();
            } else {
                break;
            }
        }
        // leading `cd dir &&` / `cd dir;`
        if let Some(rest) = s.strip_prefix("cd ") {
            let dir_end = rest.find([' ', ';', '&']).unwrap_or(rest.len());
            let after = rest[dir_end..].trim_start();
            if let Some(cmd) = after.strip_prefix("&&").or_else(|| after.strip_prefix(';')) {
                s = cmd.trim_start().to_string();
            }
        }
        if s.len() == before {
            return s;
        }
    }
}

/// The words of a command that name files: they contain a `/` or end in a dot extension.
fn named_files(cmd: &str) -> impl Iterator<Item = &str> {
    cmd.split(|c: char| c.is_whitespace() || "|;&<>()'\"`=,".contains(c))
        .filter(|w| !w.is_empty() && !w.starts_with('-'))
        .filter(|w| {
            w.contains('/')
                || w.rsplit_once('.').is_some_and(|(a, ext)| {
                    !a.is_empty()
                        && (1..=5).contains(&ext.len())
                        && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        && !ext.chars().all(|c| c.is_ascii_digit())
                })
        })
}

/// The numbers in a command: the slice a `sed -n 120,180p` or `head -50` asks for.
fn numbers(cmd: &str) -> impl Iterator<Item = &str> {
    cmd.split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
}

/// Identity and target of one call.
pub struct Keys {
    /// Tool and canonical arguments: two calls with the same `exact` are the same call.
    pub exact: u64,
    /// What the call works on.
    pub target: u64,
}

fn str_arg<'a>(args: &'a Map<String, Value>, k: &str) -> &'a str {
    args.get(k).and_then(Value::as_str).unwrap_or("")
}

pub fn keys(tool: &str, args: &Map<String, Value>) -> Keys {
    let mut exact = Fx::default();
    tool.hash(&mut exact);
    let mut target = Fx::default();
    tool.hash(&mut target);
    match tool {
        "bash" => {
            let norm = normalized(str_arg(args, "command"));
            norm.hash(&mut exact);
            for (k, v) in args {
                if k != "command" && k != "timeout" {
                    k.hash(&mut exact);
                    hash_value(v, &mut exact);
                }
            }
            let mut any = false;
            for f in named_files(&norm) {
                f.hash(&mut target);
                any = true;
            }
            1u8.hash(&mut target);
            for n in numbers(&norm) {
                n.hash(&mut target);
                any = true;
            }
            if !any {
                norm.hash(&mut target);
            }
        }
        _ => {
            for (k, v) in args {
                k.hash(&mut exact);
                hash_value(v, &mut exact);
            }
            match tool {
                "read" => {
                    str_arg(args, "filePath").hash(&mut target);
                    hash_value(args.get("offset").unwrap_or(&Value::Null), &mut target);
                    hash_value(args.get("limit").unwrap_or(&Value::Null), &mut target);
                }
                "grep" | "glob" => {
                    str_arg(args, "pattern").hash(&mut target);
                    str_arg(args, "path").hash(&mut target);
                }
                "edit" | "write" | "multiedit" => str_arg(args, "filePath").hash(&mut target),
                _ => {
                    for (k, v) in args {
                        k.hash(&mut target);
                        hash_value(v, &mut target);
                    }
                }
            }
        }
    }
    Keys {
        exact: exact.finish(),
        target: target.finish(),
    }
}

/// A short, human description of a call's target, for verdicts and alerts. Paths are shown
/// relative to the session's directory when under it.
pub fn describe(tool: &str, args: &Map<String, Value>, dir: Option<&str>) -> String {
    let mut s = String::new();
    describe_into(&mut s, tool, args, dir);
    s
}

/// [`describe`], appended to `out` (the detector describes every call for its digest, into a
/// buffer it reuses).
pub fn describe_into(out: &mut String, tool: &str, args: &Map<String, Value>, dir: Option<&str>) {
    use std::fmt::Write;
    let start = out.len();
    let rel = RelTo(dir);
    match tool {
        "read" => {
            out.push_str("read ");
            out.push_str(rel.of(str_arg(args, "filePath")));
            if let Some(o) = args.get("offset") {
                let _ = write!(out, " offset {o}");
            }
            if let Some(l) = args.get("limit") {
                let _ = write!(out, " limit {l}");
            }
        }
        "bash" => {
            out.push_str("bash ");
            out.push_str(&normalized(str_arg(args, "command")));
        }
        "grep" | "glob" => {
            let path = str_arg(args, "path");
            out.push_str(tool);
            out.push(' ');
            out.push_str(str_arg(args, "pattern"));
            if !path.is_empty() {
                out.push_str(" in ");
                out.push_str(rel.of(path));
            }
        }
        "edit" | "write" | "multiedit" => {
            out.push_str(tool);
            out.push(' ');
            out.push_str(rel.of(str_arg(args, "filePath")));
        }
        "task" => {
            out.push_str("task ");
            out.push_str(str_arg(args, "subagent_type"));
        }
        other => out.push_str(other),
    }
    // at most 120 characters: 117 and an ellipsis
    if out.len() - start > 120 {
        if let Some((cut, _)) = out[start..].char_indices().nth(117) {
            if out[start..].chars().count() > 120 {
                out.truncate(start + cut);
                out.push_str("...");
            }
        }
    }
}

/// Paths relative to a session's directory, when under it.
struct RelTo<'a>(Option<&'a str>);

impl RelTo<'_> {
    fn of<'p>(&self, p: &'p str) -> &'p str {
        match self.0 {
            Some(d) if !d.is_empty() => p
                .strip_prefix(d)
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(p),
            _ => p,
        }
    }
}

/// Lines a read requests from its file: from `offset` (1-based) for `limit` lines (opencode's
/// default is 2000), not counting lines past the end of the file.
pub fn lines_requested(args: &Map<String, Value>, file_lines: i64) -> i64 {
    let offset = args
        .get("offset")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .max(1);
    let limit = args
        .get("limit")
        .and_then(Value::as_i64)
        .unwrap_or(2000)
        .max(0);
    let last = (offset + limit - 1).min(file_lines);
    (last - offset + 1).max(0)
}

/// A hash of a string, for file identities.
pub fn hash_str(s: &str) -> u64 {
    let mut h = Fx::default();
    s.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn commands_normalise() {
        assert_eq!(
            normalize_command("cd /w && FOO=1 BAR=x  cat a.txt"),
            "cat a.txt"
        );
        assert_eq!(
            normalize_command("# look\npython3 -m pytest \\\n  -x tests  # quick"),
            "python3 -m pytest -x tests"
        );
        assert_eq!(
            normalize_command("echo 'a # not a comment'"),
            "echo 'a # not a comment'"
        );
        assert_eq!(normalize_command("cd /w; ls"), "ls");
    }

    #[test]
    fn equal_commands_after_normalising_are_the_same_call() {
        let a = keys(
            "bash",
            &args(json!({"command": "cd /p && cat docs/spec.md"})),
        );
        let b = keys(
            "bash",
            &args(json!({"command": "cat   docs/spec.md", "timeout": 5000})),
        );
        assert_eq!(a.exact, b.exact);
        assert_eq!(a.target, b.target);
    }

    #[test]
    fn bash_target_is_files_and_slice() {
        let a = keys(
            "bash",
            &args(json!({"command": "sed -n 120,180p docs/spec.md"})),
        );
        let b = keys(
            "bash",
            &args(json!({"command": "sed -n '120,180p' docs/spec.md | head"})),
        );
        let c = keys(
            "bash",
            &args(json!({"command": "sed -n 180,240p docs/spec.md"})),
        );
        assert_ne!(a.exact, b.exact);
        assert_eq!(a.target, b.target);
        assert_ne!(a.target, c.target);
    }

    #[test]
    fn read_target_is_file_and_window() {
        let a = keys(
            "read",
            &args(json!({"filePath": "/p/a.js", "offset": 1, "limit": 50})),
        );
        let b = keys(
            "read",
            &args(json!({"filePath": "/p/a.js", "offset": 51, "limit": 50})),
        );
        assert_ne!(a.target, b.target);
    }

    #[test]
    fn requested_lines_stop_at_end_of_file() {
        assert_eq!(
            lines_requested(&args(json!({"offset": 281, "limit": 40})), 300),
            20
        );
        assert_eq!(lines_requested(&args(json!({})), 300), 300);
        assert_eq!(
            lines_requested(&args(json!({"offset": 400, "limit": 40})), 300),
            0
        );
    }

    #[test]
    fn descriptions_are_clipped_at_120_characters() {
        let long = "é".repeat(130);
        let d = describe("bash", &args(json!({ "command": long })), None);
        assert_eq!(d.chars().count(), 120);
        assert_eq!(d, format!("bash {}...", "é".repeat(112)));
        let fits = "x".repeat(115);
        let d = describe("bash", &args(json!({ "command": fits })), None);
        assert_eq!(d, format!("bash {fits}"));
        let mut buf = String::from("kept|");
        describe_into(
            &mut buf,
            "grep",
            &args(json!({"pattern": "a", "path": "/w/s"})),
            Some("/w"),
        );
        assert_eq!(buf, "kept|grep a in s");
    }

    #[test]
    fn targets_are_described_relative_to_the_session() {
        let d = describe(
            "read",
            &args(json!({"filePath": "/w/src/navbar.js"})),
            Some("/w"),
        );
        assert_eq!(d, "read src/navbar.js");
    }
}
