//! The `blocks` table: models `wd-store block-model` blocked in opencode's config, and how
//! each was undone (see [`crate::block`] for the blocking itself).

use super::rows::Rows;
use super::Store;
use anyhow::Result;
use rusqlite::types::Value as Sql;

/// Blocked models, newest first, with the command that undoes each; `all` also lists the
/// blocks already undone.
pub fn list(store: &Store, all: bool) -> Result<Rows> {
    let mut rows = Rows::query(
        store,
        "block",
        "SELECT model, t AS blocked, who, reason, file, created, unblocked, unblocked_by,
                CASE WHEN unblocked IS NULL THEN model END AS undo
         FROM blocks WHERE ?1 OR unblocked IS NULL ORDER BY t DESC, id DESC",
        &[Sql::Integer(all as i64)],
    )?;
    // the model id as one quoted word: it came from a provider or a project's opencode.json
    rows.map_col("undo", |m| match m.as_str() {
        Some(m) => crate::cli::shell_line("wd-store", &["unblock-model", m]).into(),
        None => serde_json::Value::Null,
    });
    Ok(rows)
}
