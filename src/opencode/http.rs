//! A small client for `opencode serve`'s classic HTTP API: bounded timeouts, optional basic
//! auth (`OPENCODE_SERVER_PASSWORD`, `OPENCODE_SERVER_USERNAME`), errors naming URL and status.

use anyhow::{anyhow, Result};
use base64::Engine;
use serde_json::Value;
use std::time::Duration;

/// What went wrong talking to a server: not there at all, or there but unreadable.
#[derive(Debug)]
pub enum Fault {
    /// Connection refused, no route, or no answer before the timeout: treat as "no opencode".
    Absent(String),
    /// It answered, but not as opencode 1.18.x does: the watchdog is blind.
    Broken(String),
    /// HTTP 404: the thing asked for is not there (a deleted session).
    NotFound(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Absent(s) | Fault::Broken(s) | Fault::NotFound(s) => f.write_str(s),
        }
    }
}

#[derive(Clone)]
pub struct Client {
    pub base: String,
    agent: ureq::Agent,
    auth: Option<String>,
}

/// Timeouts: connecting is local and quick; a hung server is given up after `read`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Client {
    pub fn new(base: &str) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .timeout_read(READ_TIMEOUT)
            .timeout_write(READ_TIMEOUT)
            .build();
        let auth = std::env::var("OPENCODE_SERVER_PASSWORD")
            .ok()
            .filter(|p| !p.is_empty())
            .map(|pw| {
                let user = std::env::var("OPENCODE_SERVER_USERNAME")
                    .ok()
                    .filter(|u| !u.is_empty())
                    .unwrap_or_else(|| "opencode".into());
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
                format!("Basic {token}")
            });
        Client {
            base: base.trim_end_matches('/').to_string(),
            agent,
            auth,
        }
    }

    /// GET a JSON document.
    pub fn get(&self, path: &str) -> Result<Value, Fault> {
        let url = format!("{}{}", self.base, path);
        let mut req = self.agent.get(&url);
        if let Some(a) = &self.auth {
            req = req.set("Authorization", a);
        }
        match req.call() {
            Ok(resp) => resp.into_json::<Value>().map_err(|e| classify_io(&url, e)),
            Err(ureq::Error::Status(404, _)) => {
                Err(Fault::NotFound(format!("GET {url}: HTTP 404")))
            }
            Err(ureq::Error::Status(code, _)) => {
                Err(Fault::Broken(format!("GET {url}: HTTP {code}")))
            }
            Err(ureq::Error::Transport(t)) => Err(Fault::Absent(format!("GET {url}: {t}"))),
        }
    }

    /// POST a JSON body; returns the HTTP status.
    pub fn post(&self, path: &str, body: &Value) -> Result<u16> {
        let url = format!("{}{}", self.base, path);
        let mut req = self.agent.post(&url);
        if let Some(a) = &self.auth {
            req = req.set("Authorization", a);
        }
        match req.send_json(body) {
            Ok(r) => Ok(r.status()),
            Err(ureq::Error::Status(code, _)) => Err(anyhow!("POST {url}: HTTP {code}")),
            Err(e) => Err(anyhow!("POST {url}: {e}")),
        }
    }
}

fn classify_io(url: &str, e: std::io::Error) -> Fault {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            Fault::Absent(format!("GET {url}: no answer within {READ_TIMEOUT:?}"))
        }
        _ => Fault::Broken(format!("GET {url}: not JSON: {e}")),
    }
}
