//! Reads what `opencode export <id>` writes: `{info: Session, messages: [{info, parts}]}`, the
//! same objects the HTTP API serves. Several documents may follow each other in one input
//! (`cat a.json b.json | oc-calls --export -`); each is parsed as it streams in.

use serde_json::Value;
use std::io::Read;

/// One exported session: its `Session` object and its messages.
pub struct Export {
    pub info: Value,
    pub messages: Value,
}

/// The `source` of records read from an export: `export:FILE` (`export:-` for stdin). oc-calls
/// reading a stream never tries to open it again: the calls are in the stream already.
pub fn source_name(file: &str) -> String {
    format!("export:{file}")
}

/// Every export document in `input`, in order. Errors name the document (1-based) and why.
pub fn read(input: impl Read) -> Result<Vec<Export>, String> {
    let mut out = Vec::new();
    let docs =
        serde_json::Deserializer::from_reader(std::io::BufReader::new(input)).into_iter::<Value>();
    for (i, doc) in docs.enumerate() {
        let n = i + 1;
        let mut doc = doc.map_err(|e| format!("document {n}: not JSON: {e}"))?;
        let o = doc
            .as_object_mut()
            .ok_or_else(|| format!("document {n}: not an object"))?;
        let info = o.remove("info").filter(Value::is_object).ok_or_else(|| {
            format!("document {n}: no \"info\" object (not an `opencode export` document)")
        })?;
        let messages = o
            .remove("messages")
            .filter(Value::is_array)
            .ok_or_else(|| format!("document {n}: no \"messages\" list"))?;
        out.push(Export { info, messages });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_each_other_and_a_wrong_one_is_named() {
        let two = r#"{"info":{"id":"ses_a"},"messages":[]}
        {"info":{"id":"ses_b"},"messages":[{"info":{},"parts":[]}]}"#;
        let got = read(two.as_bytes()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].info["id"], "ses_b");
        assert_eq!(got[1].messages.as_array().unwrap().len(), 1);
        let e = read(r#"{"info":{"id":"ses_a"},"messages":[]} {"id":"x"}"#.as_bytes())
            .err()
            .unwrap();
        assert_eq!(
            e,
            "document 2: no \"info\" object (not an `opencode export` document)"
        );
    }
}
