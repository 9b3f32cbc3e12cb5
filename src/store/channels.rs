//! The `channels` table: run-time settings (enabled, min severity) that override a configured
//! channel's, and the channels as they are in effect: the config merged with those overrides.

use super::Store;
use crate::channels::{ChannelConfig, ChannelType, EffectiveChannel};
use crate::config::{Config, Severity};
use anyhow::{bail, Context, Result};
use rusqlite::{params, OptionalExtension};
use serde::Serialize;

/// A configured channel with its run-time overrides applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChannelRow {
    pub name: String,
    /// The channel type (`desktop`, `webhook`, ...).
    #[serde(rename = "type")]
    pub kind: ChannelType,
    pub enabled: bool,
    pub min_severity: String,
    pub rate_limit_secs: u64,
    /// Whether a run-time setting changed `enabled` or `min_severity`.
    pub overridden: bool,
}

impl ChannelRow {
    /// The channel type's name as the config spells it (`desktop`, `webhook`, ...).
    pub fn type_name(&self) -> String {
        serde_json::to_value(self.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    }
}

/// The config's channels, in config order, with their run-time overrides applied: the rows of
/// [`effective_channels`], which wd-alert routes by, as wd-store and the page show them.
pub fn effective(store: &Store, cfg: &Config) -> Result<Vec<ChannelRow>> {
    Ok(effective_channels(store, &cfg.channels)?
        .into_iter()
        .map(|e| ChannelRow {
            name: e.cfg.name.clone(),
            kind: e.cfg.kind(),
            enabled: e.enabled,
            min_severity: e.min.as_str().to_string(),
            rate_limit_secs: e.cfg.rate_limit_secs,
            overridden: e.overridden,
        })
        .collect())
}

/// The configured channels with their run-time settings applied: what wd-alert routes and
/// delivers by, and what the page shows.
pub fn effective_channels(
    store: &Store,
    channels: &[ChannelConfig],
) -> Result<Vec<EffectiveChannel>> {
    channels
        .iter()
        .map(|c| {
            let (en, sev) = store.channel_override(&c.name)?;
            Ok(EffectiveChannel {
                cfg: c.clone(),
                overridden: en.is_some() || sev.is_some(),
                enabled: en.unwrap_or(c.enabled),
                min: sev
                    .map(|s| Severity::parse(&s))
                    .transpose()?
                    .unwrap_or(c.min_severity),
            })
        })
        .collect()
}

/// Changes a configured channel's run-time settings (at least one of them).
pub fn set(
    store: &mut Store,
    cfg: &Config,
    name: &str,
    enabled: Option<bool>,
    min_severity: Option<String>,
    now: i64,
) -> Result<()> {
    if !cfg.channels.iter().any(|c| c.name == name) {
        let known: Vec<&str> = cfg.channels.iter().map(|c| c.name.as_str()).collect();
        bail!(
            "no channel {name:?} in the config (channels: {})",
            known.join(", ")
        );
    }
    if enabled.is_none() && min_severity.is_none() {
        bail!("nothing to set: give --enabled and/or --min-severity");
    }
    if let Some(s) = &min_severity {
        Severity::parse(s)?;
    }
    let tx = store.write()?;
    tx.execute(
        "INSERT INTO channels (name, enabled, min_severity, updated) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (name) DO UPDATE SET enabled = coalesce(?2, enabled),
             min_severity = coalesce(?3, min_severity), updated = ?4",
        params![name, enabled, min_severity, now],
    )?;
    tx.commit().context("saving channel settings")?;
    Ok(())
}

impl Store {
    /// Channel overrides: (enabled, min_severity) set at run time.
    pub fn channel_override(&self, name: &str) -> Result<(Option<bool>, Option<String>)> {
        Ok(self
            .conn
            .query_row(
                "SELECT enabled, min_severity FROM channels WHERE name = ?1",
                params![name],
                |r| Ok((r.get::<_, Option<bool>>(0)?, r.get::<_, Option<String>>(1)?)),
            )
            .optional()?
            .unwrap_or((None, None)))
    }
}
