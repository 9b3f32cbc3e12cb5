//! Scrubbing: what may leave `oc-calls`. Tool arguments keep verbatim only the keys a detector
//! inspects; every other string becomes `sha1:` plus 12 hex digits of its SHA-1, so equal
//! arguments stay equal and content stays home. Commands are the only verbatim free text, and
//! their secrets are masked first.

use regex::{Captures, Regex};
use serde_json::{Map, Value};
use sha1::{Digest, Sha1};
use std::sync::LazyLock;

/// Argument keys kept verbatim (commands are masked).
pub const VERBATIM: &[&str] = &[
    "filePath",
    "path",
    "offset",
    "limit",
    "command",
    "pattern",
    "include",
    "subagent_type",
    "timeout",
    "workdir",
];

/// What a masked secret is replaced by.
pub const MASK: &str = "***";

/// `sha1:` and the first 12 hex digits of the SHA-1 of `s`.
pub fn hash_str(s: &str) -> String {
    let d = Sha1::digest(s.as_bytes());
    let mut out = String::with_capacity(17);
    out.push_str("sha1:");
    for b in &d[..6] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Scrubs a tool's input object.
pub fn scrub_args(input: &Map<String, Value>) -> Map<String, Value> {
    input
        .iter()
        .map(|(k, v)| {
            let v = match (k.as_str(), v) {
                ("command", Value::String(s)) => Value::String(mask_secrets(s)),
                (k, v) if VERBATIM.contains(&k) => v.clone(),
                (_, v) => hash_value(v),
            };
            (k.clone(), v)
        })
        .collect()
}

fn hash_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(hash_str(s)),
        Value::Array(a) => Value::Array(a.iter().map(hash_value).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), hash_value(v))).collect())
        }
        other => other.clone(),
    }
}

static ASSIGN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(^|[\s;&|(`])([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|'[^']*'|[^\s;&|)`]*)"#).unwrap()
});
static AUTH_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(authorization:\s*)((?:bearer|basic|token|digest)\s+)?[^\s"']+"#).unwrap()
});
static BEARER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+").unwrap());
static SECRET_FLAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)(--?[a-z0-9_-]*(?:password|passwd|pwd|token|secret|api[-_]?key|auth|credential)[a-z0-9_-]*)(=|\s+)("[^"]*"|'[^']*'|[^\s;&|]+)"#,
    )
    .unwrap()
});
static URL_USERINFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(://[^/\s:@]+:)[^@\s/]+@").unwrap());
static KNOWN_TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,})").unwrap()
});
static LONG_HEX: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b[A-Fa-f0-9]{32,}\b").unwrap());
static LONG_B64: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+_-]{32,}={0,2}").unwrap());

/// Masks secrets in a shell command: values of `VAR=...` assignments, `Authorization:` headers
/// and bearer tokens, the values of `--password`-style flags, credentials in URLs, and long
/// hex or base64 tokens.
pub fn mask_secrets(cmd: &str) -> String {
    let s = ASSIGN.replace_all(cmd, |c: &Captures| format!("{}{}={MASK}", &c[1], &c[2]));
    let s = AUTH_HEADER.replace_all(&s, |c: &Captures| {
        format!(
            "{}{}{MASK}",
            &c[1],
            c.get(2).map(|m| m.as_str()).unwrap_or("")
        )
    });
    let s = BEARER.replace_all(&s, |c: &Captures| format!("{}{MASK}", &c[1]));
    let s = SECRET_FLAG.replace_all(&s, |c: &Captures| format!("{}{}{MASK}", &c[1], &c[2]));
    let s = URL_USERINFO.replace_all(&s, |c: &Captures| format!("{}{MASK}@", &c[1]));
    let s = KNOWN_TOKEN.replace_all(&s, MASK);
    let s = LONG_HEX.replace_all(&s, MASK);
    let s = LONG_B64.replace_all(&s, |c: &Captures| {
        let t = &c[0];
        let mixed = t.bytes().any(|b| b.is_ascii_uppercase())
            && t.bytes().any(|b| b.is_ascii_lowercase())
            && t.bytes().any(|b| b.is_ascii_digit());
        if mixed {
            MASK.to_string()
        } else {
            t.to_string()
        }
    });
    s.into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_is_sha1_prefix() {
        // sha1("abc") = a9993e364706816aba3e25717850c26c9cd0d89d
        assert_eq!(hash_str("abc"), "sha1:a9993e364706");
    }

    #[test]
    fn args_keep_only_detector_keys() {
        let input = json!({"filePath": "/p/a.js", "oldString": "secret body", "newString": "x",
                           "offset": 3, "replaceAll": true, "todos": [{"content": "plan", "n": 1}]});
        let out = scrub_args(input.as_object().unwrap());
        assert_eq!(out["filePath"], "/p/a.js");
        assert_eq!(out["offset"], 3);
        assert_eq!(out["oldString"], hash_str("secret body"));
        assert_eq!(out["replaceAll"], true);
        assert_eq!(out["todos"][0]["content"], hash_str("plan"));
        assert_eq!(out["todos"][0]["n"], 1);
    }

    #[test]
    fn secrets_in_commands_are_masked() {
        let cases = [
            ("API_KEY=abc123 make deploy", "API_KEY=*** make deploy"),
            ("export TOKEN='x y'; run", "export TOKEN=***; run"),
            (
                "curl -H 'Authorization: Bearer eyJhbGciOi' http://h",
                "curl -H 'Authorization: Bearer ***' http://h",
            ),
            ("mysql --password=hunter2 db", "mysql --password=*** db"),
            ("tool --api-key s3cr3t go", "tool --api-key *** go"),
            (
                "git clone https://bob:pw@example.com/r",
                "git clone https://bob:***@example.com/r",
            ),
            ("echo ghp_abcdefghijklmnopqrstuvwxyz0123", "echo ***"),
            ("x da39a3ee5e6b4b0d3255bfef95601890afd80709", "x ***"),
            ("echo QWxhZGRpbjpvcGVuIHNlc2FtZTEyMzQ1Njc4OQ", "echo ***"),
        ];
        for (cmd, want) in cases {
            assert_eq!(mask_secrets(cmd), want, "{cmd}");
        }
    }

    #[test]
    fn ordinary_commands_are_untouched() {
        for cmd in [
            "cat src/navbar.js | head -50",
            "sed -n '120,180p' docs/spec.md",
            "git add -A && git commit -q -m 'Fix navItem1 return; add footer'",
            "python3 -m pytest tests/test_really_long_module_name_here.py -x",
            "ls /usr/lib/x86_64-linux-gnu/some_library_directory_name",
        ] {
            assert_eq!(mask_secrets(cmd), cmd);
        }
    }
}
