//! Query results with named columns, as the operator's queries print them: JSONL objects (one
//! per row, with a `kind`), an aligned table, or CSV.
//!
//! The columns are the SQL's own, so a query's output follows its `SELECT` list; columns that
//! hold JSON written by wd-store come out as JSON, not as strings of JSON.

use super::Store;
use crate::cli::{Format, Out};
use anyhow::Result;
use rusqlite::{params_from_iter, types::Value as Sql, types::ValueRef};
use serde_json::{json, Map, Value};

/// Columns whose text is JSON written by wd-store itself (verdicts' signals, evidence, digest).
const JSON_COLS: &[&str] = &["signals", "evidence", "digest"];

/// Columns that hold epoch milliseconds: a table shows them as times.
const TIME_COLS: &[&str] = &[
    "t",
    "last_tick",
    "opened",
    "resolved",
    "last_fired",
    "first_flag_t",
    "blocked",
    "unblocked",
];

/// Rows with named columns, printed as JSONL objects, a table, or CSV.
pub struct Rows {
    pub kind: &'static str,
    pub cols: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
}

impl Rows {
    /// Runs `sql` with parameters `p`; each row becomes a record of kind `kind`.
    pub fn query(store: &Store, kind: &'static str, sql: &str, p: &[Sql]) -> Result<Rows> {
        let mut st = store.conn.prepare(sql)?;
        let cols: Vec<&'static str> = st
            .column_names()
            .into_iter()
            .map(|c| &*Box::leak(c.to_string().into_boxed_str()))
            .collect();
        let n = cols.len();
        let mut rows = st
            .query_map(params_from_iter(p.iter()), |r| {
                (0..n)
                    .map(|i| Ok(json_of(r.get_ref(i)?)))
                    .collect::<rusqlite::Result<Vec<Value>>>()
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        // columns that hold JSON objects come out as objects, not as strings of JSON
        for (i, c) in cols.iter().enumerate() {
            if JSON_COLS.contains(c) {
                for r in &mut rows {
                    if let Some(parsed) = r[i].as_str().and_then(|t| serde_json::from_str(t).ok()) {
                        r[i] = parsed;
                    }
                }
            }
        }
        Ok(Rows { kind, cols, rows })
    }

    pub fn print(&self, format: Format, out: &mut Out) -> Result<()> {
        match format {
            Format::Jsonl => {
                for r in &self.rows {
                    let mut m = Map::new();
                    m.insert("kind".into(), json!(self.kind));
                    for (c, v) in self.cols.iter().zip(r) {
                        m.insert(c.to_string(), v.clone());
                    }
                    out.line(&Value::Object(m).to_string())?;
                }
            }
            Format::Table => {
                let rows: Vec<Vec<String>> = self
                    .rows
                    .iter()
                    .map(|r| r.iter().zip(&self.cols).map(|(v, c)| shown(v, c)).collect())
                    .collect();
                crate::cli::write_table(out, &self.cols, &rows)?;
            }
            Format::Csv => {
                let mut w = csv::Writer::from_writer(out);
                w.write_record(&self.cols)?;
                for r in &self.rows {
                    w.write_record(r.iter().map(cell))?;
                }
                w.flush()?;
            }
        }
        Ok(())
    }
}

/// A SQLite value as JSON; reals rounded to 6 places, blobs (never written) as null.
fn json_of(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(x) => json!(x),
        ValueRef::Real(x) => json!((x * 1e6).round() / 1e6),
        ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
        ValueRef::Blob(_) => Value::Null,
    }
}

/// A table cell: people read times, not epoch milliseconds.
fn shown(v: &Value, col: &str) -> String {
    match v.as_i64() {
        Some(ms) if TIME_COLS.contains(&col) && ms > 1_000_000_000_000 => {
            crate::cli::iso_ms(ms)[..19].replace('T', " ")
        }
        _ => cell(v),
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
