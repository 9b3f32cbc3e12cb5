//! Query results with named columns, as the operator's queries print them: JSONL objects (one
//! per row, with a `kind`), an aligned table, or CSV.
//!
//! The columns are the SQL's own, so a query's output follows its `SELECT` list; columns that
//! hold JSON written by wd-store come out as JSON, not as strings of JSON.

use super::Store;
use crate::cli::{Format, Give, Out};
use anyhow::Result;
use rusqlite::{params_from_iter, types::Value as Sql, types::ValueRef};
use serde_json::{json, Map, Value};

/// Columns whose text is JSON written by wd-store itself (verdicts' signals, evidence, digest).
const JSON_COLS: &[&str] = &["signals", "evidence", "digest"];

/// Columns that hold epoch milliseconds: a table shows them as times.
const TIME_COLS: &[&str] = &[
    "t",
    "last_tick",
    "figures_at",
    "opened",
    "resolved",
    "last_fired",
    "first_flag_t",
    "blocked",
    "unblocked",
];

/// Rows with named columns, printed as JSONL objects, a table, or CSV. A table writes times
/// in local time, its zone named in the header (`opened CET`).
pub struct Rows {
    pub kind: &'static str,
    pub cols: Vec<&'static str>,
    pub rows: Vec<Vec<Value>>,
    /// A table at most this wide, its columns giving way as `give` says.
    pub fit: Option<Fit>,
}

/// How a table fits a terminal: at most `width` characters a line, each column named in `give`
/// giving way so (the others are kept whole; see [`crate::cli::write_fitted`]).
pub struct Fit {
    pub width: usize,
    pub give: &'static [(&'static str, Give)],
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
        Ok(Rows {
            kind,
            cols,
            rows,
            fit: None,
        })
    }

    /// Only the columns `keep`, in that order (the ones a narrow table shows).
    pub fn only(mut self, keep: &[&'static str]) -> Rows {
        let at: Vec<usize> = keep
            .iter()
            .filter_map(|k| self.cols.iter().position(|c| c == k))
            .collect();
        self.cols = at.iter().map(|&i| self.cols[i]).collect();
        for r in &mut self.rows {
            *r = at.iter().map(|&i| r[i].clone()).collect();
        }
        self
    }

    /// The value of column `col` in each row, changed by `f`.
    pub fn map_col(&mut self, col: &str, f: impl Fn(&Value) -> Value) {
        if let Some(i) = self.cols.iter().position(|c| *c == col) {
            for r in &mut self.rows {
                r[i] = f(&r[i]);
            }
        }
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
                let (head, rows) = self.for_people();
                let head: Vec<&str> = head.iter().map(String::as_str).collect();
                match &self.fit {
                    Some(fit) => {
                        let give: Vec<Give> = self
                            .cols
                            .iter()
                            .map(|c| {
                                fit.give
                                    .iter()
                                    .find(|(n, _)| n == c)
                                    .map_or(Give::KEEP, |(_, g)| *g)
                            })
                            .collect();
                        crate::cli::write_fitted(out, &head, &give, &rows, fit.width)?;
                    }
                    None => crate::cli::write_table(out, &head, &rows)?,
                }
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

impl Rows {
    /// The header and cells as a person reads them: times in local time, the zone named in
    /// the header (`opened CET`).
    fn for_people(&self) -> (Vec<String>, Vec<Vec<String>>) {
        let clock = crate::clock::Clock::system();
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .zip(&self.cols)
                    .map(|(v, c)| shown(v, c, &clock, self.fit.is_some()))
                    .collect()
            })
            .collect();
        let zone = clock.abbr(crate::cli::now_ms());
        let head: Vec<String> = self
            .cols
            .iter()
            .map(|c| {
                if TIME_COLS.contains(c) {
                    format!("{c} {zone}")
                } else {
                    c.to_string()
                }
            })
            .collect();
        (head, rows)
    }

    /// Each row as a key/value block for a person (`status`: one row of 12 columns is too
    /// wide for one line), fit to `out.width`; rows apart by a blank line.
    pub fn print_pairs(&self, out: &mut Out) -> Result<()> {
        let (head, rows) = self.for_people();
        let width = out.width;
        for (n, r) in rows.iter().enumerate() {
            if n > 0 {
                out.line("")?;
            }
            let pairs: Vec<(String, String)> =
                head.iter().cloned().zip(r.iter().cloned()).collect();
            crate::cli::write_pairs(out, &pairs, width)?;
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

/// A table cell: people read times, not epoch milliseconds; in local time (the header names
/// the zone).
/// A narrow table writes `11-30 14:43`.
fn shown(v: &Value, col: &str, clock: &crate::clock::Clock, narrow: bool) -> String {
    match v.as_i64() {
        Some(ms) if TIME_COLS.contains(&col) && ms > 1_000_000_000_000 && narrow => clock.short(ms),
        Some(ms) if TIME_COLS.contains(&col) && ms > 1_000_000_000_000 => {
            clock.full(ms)[..19].to_string()
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
