//! The webhook channel: the event as JSON, POSTed to one URL, with an optional bearer token
//! from the environment.

use super::http::{env_secret, post};
use super::{env_name, ChannelUnit, ChannelConfig, ChannelTable, Sent};
use crate::event::Event;
use crate::check::Problems;
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Webhook {
    pub url: Option<String>,
    /// An environment variable whose value is sent as a bearer token.
    pub token_env: Option<String>,
}

impl ChannelUnit for Webhook {
    fn take(t: &mut ChannelTable) -> Webhook {
        Webhook {
            url: t.url.take(),
            token_env: t.token_env.take(),
        }
    }
    fn check(&self, name: &str, key: &dyn Fn(&str) -> String, p: &mut Problems) {
        match &self.url {
            None => p.add(&key("type"), format!("channel {name:?}: a webhook needs url")),
            Some(u) => p.url(&key("url"), u),
        }
        env_name(p, &key("token_env"), &self.token_env);
    }
    fn deliver(&self, ch: &ChannelConfig, ev: &Event, _: i64, _: Duration) -> Result<Sent, String> {
        let url = self.url.as_deref().ok_or("webhook without url")?;
        let token = env_secret(&self.token_env, "webhook token")?;
        let body = serde_json::to_value(ev).map_err(|e| e.to_string())?;
        post(ch.timeout_secs, url, &body, token).map(Sent::from)
    }
}
