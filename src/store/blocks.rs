//! The `blocks` table: models `wd-store block-model` blocked in opencode's config, and how
//! each was undone (see [`crate::block`] for the blocking itself).

use super::rows::Rows;
use super::Store;
use anyhow::Result;
use rusqlite::types::Value as Sql;

/// Blocked models, newest first, with the command that undoes each; `all` also lists the
/// blocks already undone.
pub fn list(store: &Store, all: bool) -> Result<Rows> {
    Rows::query(
        store,
        "block",
        "SELECT model, t AS blocked, who, reason, file, created, unblocked, unblocked_by,
                CASE WHEN unblocked IS NULL THEN 'wd-store unblock-model ' || model END AS undo
         FROM blocks WHERE ?1 OR unblocked IS NULL ORDER BY t DESC, id DESC",
        &[Sql::Integer(all as i64)],
    )
}
