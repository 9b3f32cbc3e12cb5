//! Scrubbing: what may leave `oc-calls`. Tool arguments keep readable only the keys the
//! vocabulary ([`crate::vocab`]) keeps, as its [`Kept`] rule for each says, and only in the type
//! it is kept in (a path as a string, an offset as a number); every other value becomes `sha1:`
//! plus 12 hex digits of its SHA-1, so equal arguments stay equal and content stays home.
//! Commands are the only verbatim free text, and their secrets are masked first ([`mask`]: read
//! as a shell reads them, then masked by tool grammar and by shape).

mod lex;
mod mask;

use crate::vocab::{Arg, Kept};
pub use mask::{
    mask_command, mask_path, mask_pattern, mask_text, mask_title, password_shaped, randomish,
    secret_name,
};
use serde_json::{Map, Value};
use sha1::{Digest, Sha1};

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

/// Scrubs a tool's input object, each argument as its [`Arg::kept`] says. A kept key holding
/// another type than the one it is kept in (a `command` array, a `timeout` string, a `workdir`
/// object) is hashed like any other value.
pub fn scrub_args(input: &Map<String, Value>) -> Map<String, Value> {
    input
        .iter()
        .map(|(k, v)| {
            let v = match (Arg::of(k).map(Arg::kept), v) {
                (Some(Kept::MaskedCommand), Value::String(s)) => Value::String(mask_command(s)),
                (Some(Kept::MaskedPattern), Value::String(s)) => Value::String(mask_pattern(s)),
                (Some(Kept::MaskedPath), Value::String(s)) => Value::String(mask_path(s)),
                (Some(Kept::Verbatim), Value::String(s)) => Value::String(s.clone()),
                (Some(Kept::Number), Value::Number(n)) => Value::Number(n.clone()),
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

/// Masks secrets in a shell command (see [`mask_command`]).
pub fn mask_secrets(cmd: &str) -> String {
    mask_command(cmd)
}

#[cfg(test)]
mod tests;
