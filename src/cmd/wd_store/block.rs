//! `wd-store block-model` and `unblock-model`: edit opencode's config (see [`crate::block`]),
//! say what was done on stderr and print one record of it.

use super::Ctx;
use crate::cli::{Exit, Out};
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;

/// Blocks `model` in its provider's `blacklist`.
pub fn block_model(
    cx: &mut Ctx,
    model: &str,
    reason: Option<String>,
    opencode_config: Option<PathBuf>,
    opencode: &str,
    force: bool,
    out: &mut Out,
) -> Result<Exit> {
    let mut cfg = cx.cfg.clone();
    if opencode_config.is_some() {
        cfg.report.opencode_config = opencode_config;
    }
    let o = crate::block::block(
        &mut cx.store,
        &cfg,
        model,
        reason.as_deref(),
        opencode,
        force,
        cx.now,
    )?;
    eprintln!("wd-store: {}", o.message);
    out.line(
        &json!({"kind": "block", "model": o.model, "file": o.file, "backup": o.backup,
                "created": o.created.map(|c| c.as_str())})
        .to_string(),
    )?;
    Ok(Exit::Ok)
}

/// Removes exactly what `block-model` added for `model`.
pub fn unblock_model(cx: &mut Ctx, model: &str, out: &mut Out) -> Result<Exit> {
    let o = crate::block::unblock(&mut cx.store, model, cx.now)?;
    eprintln!("wd-store: {}", o.message);
    out.line(&json!({"kind": "unblock", "model": o.model, "file": o.file}).to_string())?;
    Ok(Exit::Ok)
}
