//! Reads what `opencode export <id>` writes: `{info: Session, messages: [{info, parts}]}`, the
//! same objects the HTTP API serves. Several documents may follow each other in one input
//! (`cat a.json b.json | oc-calls --export -`); each is parsed as it streams in.

use super::{convert, Fault, IndexEntry, Source};
use crate::record::Session;
use crate::sources::{SourceId, SourceKind};
use serde_json::Value;

/// One exported session: its `Session` object and its messages.
pub struct Export {
    pub info: Value,
    pub messages: Value,
}

/// What an input of export documents held: the good documents before the first bad one, and
/// why that one is bad (its number, 1-based), or that there was no document at all. Reading
/// stops at a bad document (after broken JSON the stream has no next document to find), but
/// what came before it is kept.
pub struct ExportDocs {
    pub docs: Vec<Export>,
    pub bad: Option<String>,
}

/// Every export document in `input`, in order, up to the first bad one.
pub fn read(input: impl std::io::Read) -> ExportDocs {
    let mut docs = Vec::new();
    let bad = read_into(input, &mut docs).err().or_else(|| {
        docs.is_empty()
            .then(|| "no export document (the input is empty)".to_string())
    });
    ExportDocs { docs, bad }
}

fn read_into(input: impl std::io::Read, out: &mut Vec<Export>) -> Result<(), String> {
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
    Ok(())
}

/// The documents of one export file, as a [`Source`].
pub struct ExportFile {
    /// The file as named (`-`: stdin).
    pub file: String,
    pub docs: Vec<Export>,
}

impl ExportFile {
    fn doc(&self, id: &str) -> Option<&Export> {
        self.docs.iter().find(|d| d.info["id"] == id)
    }
}

impl SourceKind for ExportFile {
    /// The file as it was named (`-`: stdin).
    type Name = String;
    const PHRASE: &'static str = "an export";
    const READER: &'static str = "export";
    fn claim(wire: &str) -> Option<String> {
        wire.strip_prefix("export:").map(str::to_string)
    }
    fn write(file: &String, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "export:{file}")
    }
}

impl Source for ExportFile {
    fn id(&self) -> SourceId {
        SourceId::Export(self.file.clone())
    }

    fn index(&self) -> Result<Vec<IndexEntry>, Fault> {
        let all: Vec<&str> = self
            .docs
            .iter()
            .filter_map(|d| d.info["id"].as_str())
            .collect();
        Ok(self.sessions(&all)?.iter().map(IndexEntry::of).collect())
    }

    /// The documents' sessions named in `ids`, in file order.
    fn sessions(&self, ids: &[&str]) -> Result<Vec<Session>, Fault> {
        let name = self.id().to_string();
        self.docs
            .iter()
            .filter(|d| ids.iter().any(|id| d.info["id"] == *id))
            .map(|d| convert::session_of(&d.info, None, &name).map_err(Fault::Broken))
            .collect()
    }

    fn session(&self, id: &str) -> Result<Option<Value>, Fault> {
        Ok(self.doc(id).map(|d| d.info.clone()))
    }

    fn messages(&self, id: &str) -> Result<Value, Fault> {
        self.doc(id)
            .map(|d| d.messages.clone())
            .ok_or_else(|| Fault::NotFound(format!("session {id}: not in {}", self.id())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_follow_each_other_and_a_wrong_one_is_named() {
        let two = r#"{"info":{"id":"ses_a"},"messages":[]}
        {"info":{"id":"ses_b"},"messages":[{"info":{},"parts":[]}]}"#;
        let got = read(two.as_bytes());
        assert!(got.bad.is_none());
        assert_eq!(got.docs.len(), 2);
        assert_eq!(got.docs[1].info["id"], "ses_b");
        assert_eq!(got.docs[1].messages.as_array().unwrap().len(), 1);
        let got = read(r#"{"info":{"id":"ses_a"},"messages":[]} {"id":"x"}"#.as_bytes());
        assert_eq!(got.docs.len(), 1);
        assert_eq!(
            got.bad.unwrap(),
            "document 2: no \"info\" object (not an `opencode export` document)"
        );
    }

    /// Issue 30, point 7: a good document followed by a corrupt one keeps the good one and
    /// names the bad one; an empty input says so.
    #[test]
    fn a_corrupt_document_after_good_ones_keeps_them_and_an_empty_input_says_so() {
        let got = read(r#"{"info":{"id":"ses_a"},"messages":[]} {"info": {"id": "#.as_bytes());
        assert_eq!(got.docs.len(), 1);
        assert_eq!(got.docs[0].info["id"], "ses_a");
        assert_eq!(
            got.bad.unwrap(),
            "document 2: not JSON: EOF while parsing a value at line 1 column 54"
        );
        for empty in ["", "\n  \n"] {
            let got = read(empty.as_bytes());
            assert!(got.docs.is_empty());
            assert_eq!(got.bad.unwrap(), "no export document (the input is empty)");
        }
    }
}
