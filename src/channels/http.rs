//! What the HTTP channels share: a bounded POST of a JSON body, and secrets from the
//! environment.

use serde_json::Value;
use std::time::Duration;

fn agent(timeout: u64) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(timeout.clamp(1, 5)))
        .timeout(Duration::from_secs(timeout.max(1)))
        .build()
}

/// POSTs `body` to `url` within `timeout` seconds: "HTTP 202", or what went wrong.
pub fn post(
    timeout: u64,
    url: &str,
    body: &Value,
    bearer: Option<String>,
) -> Result<String, String> {
    let mut req = agent(timeout).post(url);
    if let Some(t) = bearer {
        req = req.set("Authorization", &format!("Bearer {t}"));
    }
    // delivery errors go to the journal and the database: credentials in the channel's URL
    // (`https://user:pw@host`, `?token=`) or echoed by the endpoint are masked first
    match req.send_json(body) {
        Ok(r) => Ok(format!("HTTP {}", r.status())),
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            Err(crate::scrub::mask_text(&format!(
                "POST {url}: HTTP {code} {}",
                text.chars().take(200).collect::<String>()
            )))
        }
        Err(e) => Err(crate::scrub::mask_text(&format!("POST {url}: {e}"))),
    }
}

/// The value of the environment variable `name` names, if one is named.
pub fn env_secret(name: &Option<String>, what: &str) -> Result<Option<String>, String> {
    match name {
        None => Ok(None),
        Some(var) => std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Some)
            .ok_or_else(|| format!("{what}: environment variable {var} is not set")),
    }
}
