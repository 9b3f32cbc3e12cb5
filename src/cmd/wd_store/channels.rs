//! `wd-store channels`: the channels in effect, or `channels set` to change one at run time.

use super::{ChannelCmd, Ctx};
use crate::cli::{Exit, Out};
use crate::store::channels;
use crate::store::rows::Rows;
use anyhow::Result;

/// Lists the channels, after applying `set` when given.
pub fn run(cx: &mut Ctx, set: Option<ChannelCmd>, out: &mut Out) -> Result<Exit> {
    if let Some(ChannelCmd::Set {
        name,
        enabled,
        min_severity,
    }) = set
    {
        channels::set(&mut cx.store, &cx.cfg, &name, enabled, min_severity, cx.now)?;
    }
    list(cx, out)
}

fn list(cx: &Ctx, out: &mut Out) -> Result<Exit> {
    let cols = vec![
        "name",
        "type",
        "enabled",
        "min_severity",
        "rate_limit_secs",
        "overridden",
    ];
    let mut rows = Vec::new();
    for c in channels::effective(&cx.store, &cx.cfg)? {
        let v = serde_json::to_value(&c)?;
        rows.push(cols.iter().map(|k| v[*k].clone()).collect());
    }
    Rows {
        kind: "channel",
        rows,
        cols,
        fit: None,
    }
    .print(cx.format, out)?;
    Ok(Exit::Ok)
}
