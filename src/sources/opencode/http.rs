//! A small client for `opencode serve`'s classic HTTP API: optional basic auth
//! (`OPENCODE_SERVER_PASSWORD`, `OPENCODE_SERVER_USERNAME`, of the watchdog's own environment),
//! sent only once the server answered 401 (a server that asks for nothing is never given the
//! password), errors naming URL and status, and
//! bounds a hung or hostile server cannot get past:
//! * one overall deadline per server (all requests of one command to it share it, body reads
//!   included), so a server that accepts and never answers, or trickles its body, costs at most
//!   that long;
//! * a cap on each response body, parsed as it streams in (never buffered whole);
//! * redirects followed only to the same scheme, host and port.
//!
//! Only a refused connection means "no server there"; every other failure is a fault the
//! watchdog reports as blind.

use anyhow::{anyhow, Result};
use base64::Engine;
use serde_json::Value;
use std::cell::Cell;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What went wrong talking to a server: not there at all, or there but unreadable.
#[derive(Debug)]
pub enum Fault {
    /// Connection refused: nothing listens there, so "no opencode".
    Absent(String),
    /// It answered, but not as opencode 1.18.x does, or too slowly, or too much: blind.
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

impl std::error::Error for Fault {}

/// The bounds of talking to one server (`[opencode] server_deadline_secs`, `body_cap_mib`,
/// `parsed_cap_mib`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub deadline: Duration,
    pub body_cap: u64,
    /// What one answer may take once parsed ([`PARSED_MAX`] unless configured).
    pub parsed_cap: u64,
}

impl Limits {
    /// The bounds `[opencode]` sets.
    pub fn of(c: &crate::config::OpencodeConfig) -> Limits {
        Limits {
            deadline: Duration::from_secs(c.server_deadline_secs.get()),
            body_cap: c.body_cap_mib.get().saturating_mul(1 << 20),
            parsed_cap: c.parsed_cap_mib.get().saturating_mul(1 << 20),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            body_cap: 256 << 20,
            parsed_cap: PARSED_MAX,
        }
    }
}

#[derive(Clone)]
pub struct Client {
    pub base: String,
    agent: ureq::Agent,
    auth: Option<String>,
    /// Has the server asked for the credentials (a 401)? Only then are they sent; shared by
    /// this client's clones.
    asked: Arc<AtomicBool>,
    limits: Limits,
    /// When this client's overall deadline passes; shared by its clones.
    until: Arc<Instant>,
}

/// Connecting is local and quick; a slow connect still counts against the deadline.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);

/// Same-origin redirects followed at most this many times.
const MAX_REDIRECTS: usize = 3;

/// A reader that fails once more than `cap` bytes have come through.
struct Capped<R> {
    inner: R,
    left: u64,
}

const OVER_CAP: &str = "oc-watchdog: body over cap";

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            self.left = 0;
            return Err(std::io::Error::other(OVER_CAP));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The most memory one server answer may take once parsed by default (`parsed_cap_mib`), as
/// estimated while it streams in:
/// [`VALUE_COST`] bytes a JSON value, each string and object key its length besides, and the
/// text of the token being read twice over (serde_json gathers a string in a buffer that grows
/// by doubling before it is a value). A parsed value costs far more than its text (`[0,0,…]` is
/// 2 bytes a value as text and 32 or more parsed, with the list's growth on top): a cap on
/// bytes alone let a 128 MiB body take gigabytes, and a cap of 4M values let an answer of small
/// key/value pairs take 266 MB and a 250 MB string 518 MB. 40 MiB holds a session of thousands
/// of tool calls with their outputs; four hostile servers read at once stay near 200 MB in all.
pub const PARSED_MAX: u64 = 40 << 20;

/// What a parsed value costs besides its text: a `Value` (32 bytes) and its share of the list
/// or map that holds it.
const VALUE_COST: u64 = 48;

const OVER_PARSED: &str = "oc-watchdog: over the parse budget";

/// What one parse may still spend of its budget, and the text read since the last value
/// was made (the token being read).
struct Spend {
    left: Cell<u64>,
    token: Cell<u64>,
}

impl Spend {
    /// A value made, costing `n`: false when the budget cannot pay it.
    fn take(&self, n: u64) -> bool {
        self.token.set(0);
        match self.left.get().checked_sub(n) {
            Some(l) => {
                self.left.set(l);
                true
            }
            None => {
                self.left.set(0);
                false
            }
        }
    }
    /// `n` more bytes of text read: false once the token being read could not be made a value
    /// within what is left.
    fn read(&self, n: u64) -> bool {
        let t = self.token.get() + n;
        self.token.set(t);
        t.saturating_mul(2) <= self.left.get()
    }
}

/// A reader that stops a token (a string, most likely) too long to be parsed within the budget
/// before it is gathered whole.
struct Counted<'a, R> {
    inner: R,
    spend: &'a Spend,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if !self.spend.read(n as u64) {
            return Err(std::io::Error::other(OVER_PARSED));
        }
        Ok(n)
    }
}

/// Parses one JSON document from `r` as it streams in (serde's [`serde_json::Deserializer`]),
/// spending `cap` bytes as it goes: past it the parse stops at once with an error holding
/// `OVER_PARSED`, before the memory is spent.
fn parse_bounded<R: Read>(r: R, cap: u64) -> serde_json::Result<Value> {
    use serde::de::DeserializeSeed;
    let spend = Spend {
        left: Cell::new(cap),
        token: Cell::new(0),
    };
    let body = Counted {
        inner: r,
        spend: &spend,
    };
    let mut de =
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(64 << 10, body));
    let v = Budget(&spend).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// A [`Value`] built while spending the budget.
#[derive(Clone, Copy)]
struct Budget<'a>(&'a Spend);

impl Budget<'_> {
    fn take<E: serde::de::Error>(self, text: usize) -> Result<(), E> {
        if self.0.take(VALUE_COST + text as u64) {
            Ok(())
        } else {
            Err(E::custom(OVER_PARSED))
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Budget<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Budget<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        self.take(0)?;
        Ok(Value::Bool(b))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Value, E> {
        self.take(0)?;
        Ok(Value::from(n))
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Value, E> {
        self.take(0)?;
        Ok(Value::from(n))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        self.take(0)?;
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.take(s.len())?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        self.take(s.len())?;
        Ok(Value::String(s))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.take(0)?;
        Ok(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.take(0)?;
        let mut v = Vec::new();
        while let Some(x) = a.next_element_seed(self)? {
            v.push(x);
        }
        Ok(Value::Array(v))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.take(0)?;
        let mut m = serde_json::Map::new();
        while let Some(k) = a.next_key::<String>()? {
            // a key is text held like a string value, and its entry in the map
            self.take(k.len())?;
            let v = a.next_value_seed(self)?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }
}

/// `scheme://host:port` of a URL (the default port spelt out), for the same-origin check.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let hostport = rest.split(['/', '?', '#']).next()?;
    let hostport = hostport.rsplit('@').next()?;
    let has_port = match hostport.rfind(']') {
        Some(i) => hostport[i..].contains(':'),
        None => hostport.contains(':'),
    };
    let hp = if has_port {
        hostport.to_ascii_lowercase()
    } else {
        let port = if scheme.eq_ignore_ascii_case("https") {
            443
        } else {
            80
        };
        format!("{}:{port}", hostport.to_ascii_lowercase())
    };
    Some(format!("{}://{hp}", scheme.to_ascii_lowercase()))
}

impl Client {
    /// A client with the default limits, its deadline starting now.
    pub fn new(base: &str) -> Client {
        Client::with_limits(base, Limits::default())
    }

    pub fn with_limits(base: &str, limits: Limits) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .redirects(0)
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
            asked: Arc::default(),
            limits,
            until: Arc::new(Instant::now() + limits.deadline),
        }
    }

    /// The `Authorization` header to send: only once the server answered 401.
    fn credentials(&self) -> Option<&String> {
        self.auth
            .as_ref()
            .filter(|_| self.asked.load(Ordering::Relaxed))
    }

    /// A 401: should the request be tried again with the credentials (there are some, and they
    /// were not sent yet)?
    fn ask(&self) -> bool {
        self.auth.is_some() && !self.asked.swap(true, Ordering::Relaxed)
    }

    fn late(&self, url: &str) -> Fault {
        Fault::Broken(format!(
            "GET {url}: no complete answer within {}s (the overall deadline per server)",
            self.limits.deadline.as_secs_f64()
        ))
    }

    /// GET a JSON document, parsed as it streams in.
    pub fn get(&self, path: &str) -> Result<Value, Fault> {
        let mut url = format!("{}{}", self.base, path);
        for _ in 0..=MAX_REDIRECTS {
            let left = self.until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.late(&url));
            }
            let mut req = self.agent.get(&url).timeout(left);
            if let Some(a) = self.credentials() {
                req = req.set("Authorization", a);
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(401, _)) if self.ask() => continue,
                Err(ureq::Error::Status(404, _)) => {
                    return Err(Fault::NotFound(format!("GET {url}: HTTP 404")))
                }
                Err(ureq::Error::Status(code, _)) => {
                    return Err(Fault::Broken(format!("GET {url}: HTTP {code}")))
                }
                Err(ureq::Error::Transport(t)) => return Err(self.transport(&url, t)),
            };
            if (300..400).contains(&resp.status()) {
                let to = resp.header("location").unwrap_or("").to_string();
                let next = if to.starts_with('/') {
                    format!("{}{to}", origin(&url).unwrap_or_default())
                } else {
                    to.clone()
                };
                if origin(&next).is_none() || origin(&next) != origin(&url) {
                    return Err(Fault::Broken(format!(
                        "GET {url}: HTTP {} redirect to {to:?} not followed (another host)",
                        resp.status()
                    )));
                }
                url = next;
                continue;
            }
            let body = Capped {
                inner: resp.into_reader(),
                left: self.limits.body_cap,
            };
            return parse_bounded(body, self.limits.parsed_cap).map_err(|e| {
                if e.to_string().contains(OVER_PARSED) {
                    return Fault::Broken(format!(
                        "GET {url}: answer too large to hold: it would take more than {} parsed (parsed_cap_mib)",
                        mib(self.limits.parsed_cap)
                    ));
                }
                if e.is_io() {
                    let msg = e.to_string();
                    if msg.contains(OVER_CAP) {
                        return Fault::Broken(format!(
                            "GET {url}: body over the cap of {} (body_cap_mib)",
                            mib(self.limits.body_cap)
                        ));
                    }
                    if Instant::now() >= *self.until || msg.contains("timed out") {
                        return self.late(&url);
                    }
                    return Fault::Broken(format!("GET {url}: {e}"));
                }
                Fault::Broken(format!("GET {url}: not JSON: {e}"))
            });
        }
        Err(Fault::Broken(format!(
            "GET {url}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    fn transport(&self, url: &str, t: ureq::Transport) -> Fault {
        let refused = {
            let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&t);
            let mut found = false;
            while let Some(e) = src {
                if let Some(io) = e.downcast_ref::<std::io::Error>() {
                    if io.kind() == std::io::ErrorKind::ConnectionRefused {
                        found = true;
                    }
                }
                src = e.source();
            }
            found
        };
        if refused {
            Fault::Absent(format!("GET {url}: connection refused"))
        } else if Instant::now() >= *self.until || t.to_string().contains("timed out") {
            self.late(url)
        } else {
            Fault::Broken(format!("GET {url}: {t}"))
        }
    }

    /// GET a stream of lines (opencode's `text/event-stream`) for as long as it lasts: `opened`
    /// once the server answered 200, then `line` with each line's first `cap` bytes (the rest
    /// of a longer line is dropped unread into memory), until `line` returns false or the
    /// stream ends (`Ok`). No overall deadline, unlike [`Client::get`]: a stream that completes
    /// no line for `idle` is taken for dead (opencode sends a heartbeat every 10 s or so), also
    /// when it trickles bytes of a line that never ends.
    pub fn stream_lines(
        &self,
        path: &str,
        idle: Duration,
        cap: usize,
        opened: &mut dyn FnMut(),
        line: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<(), Fault> {
        let url = format!("{}{}", self.base, path);
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .timeout_read(idle)
            .redirects(0)
            .build();
        let resp = loop {
            let mut req = agent.get(&url);
            if let Some(a) = self.credentials() {
                req = req.set("Authorization", a);
            }
            match req.call() {
                Ok(r) if r.status() == 200 => break r,
                Ok(r) => return Err(Fault::Broken(format!("GET {url}: HTTP {}", r.status()))),
                Err(ureq::Error::Status(401, _)) if self.ask() => continue,
                Err(ureq::Error::Status(404, _)) => {
                    return Err(Fault::NotFound(format!("GET {url}: HTTP 404")))
                }
                Err(ureq::Error::Status(code, _)) => {
                    return Err(Fault::Broken(format!("GET {url}: HTTP {code}")))
                }
                Err(ureq::Error::Transport(t)) => {
                    return Err(match self.transport(&url, t) {
                        Fault::Absent(m) => Fault::Absent(m),
                        _ => Fault::Broken(format!("GET {url}: the stream could not be opened")),
                    })
                }
            }
        };
        opened();
        let mut body = std::io::BufReader::with_capacity(64 << 10, resp.into_reader());
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            match read_line_capped(&mut body, &mut buf, cap, Instant::now() + idle) {
                Ok(0) => return Ok(()),
                Ok(_) if line(&buf) => {}
                Ok(_) => return Ok(()),
                Err(e) => return Err(Fault::Broken(format!("GET {url}: {e}"))),
            }
        }
    }

    /// POST a JSON body; returns the HTTP status.
    pub fn post(&self, path: &str, body: &Value) -> Result<u16> {
        let url = format!("{}{}", self.base, path);
        let send = || {
            let mut req = self.agent.post(&url).timeout(self.limits.deadline);
            if let Some(a) = self.credentials() {
                req = req.set("Authorization", a);
            }
            req.send_json(body).map_err(Box::new)
        };
        let sent = match send() {
            Err(e) if matches!(*e, ureq::Error::Status(401, _)) && self.ask() => send(),
            r => r,
        };
        match sent.map_err(|e| *e) {
            Ok(r) => Ok(r.status()),
            Err(ureq::Error::Status(code, _)) => Err(anyhow!("POST {url}: HTTP {code}")),
            Err(e) => Err(anyhow!("POST {url}: {e}")),
        }
    }
}

/// Reads one line (with its `\n`, if any) into `buf`, keeping its first `cap` bytes and
/// passing over the rest; the bytes the line took, 0 at the end of the stream. A line still
/// not ended at `until` is an error (`TimedOut`): a peer that trickles one endless line is as
/// dead as a silent one.
fn read_line_capped(
    r: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
    until: Instant,
) -> std::io::Result<usize> {
    let mut took = 0;
    loop {
        if took > 0 && Instant::now() > until {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no line ended in time",
            ));
        }
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(took);
        }
        let (used, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let keep = used.min(cap.saturating_sub(buf.len()));
        buf.extend_from_slice(&chunk[..keep]);
        r.consume(used);
        took += used;
        if done {
            return Ok(took);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_kept_up_to_its_cap_and_the_next_line_is_whole() {
        let long = "x".repeat(100_000);
        let text = format!("data: a\n{long}\ndata: b");
        let mut r = std::io::BufReader::with_capacity(1024, text.as_bytes());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        loop {
            buf.clear();
            let far = Instant::now() + Duration::from_secs(60);
            let n = read_line_capped(&mut r, &mut buf, 10, far).unwrap();
            if n == 0 {
                break;
            }
            lines.push((n, String::from_utf8(buf.clone()).unwrap()));
        }
        assert_eq!(
            lines,
            [
                (8, "data: a\n".to_string()),
                (100_001, "x".repeat(10)),
                (7, "data: b".to_string())
            ]
        );
    }

    fn parse(body: &[u8]) -> serde_json::Result<Value> {
        parse_bounded(body, PARSED_MAX)
    }

    #[test]
    fn a_body_parses_as_serde_json_does_and_stops_at_the_parse_budget() {
        let text = r#"{"a":[1,-2,3.5,"x",null,true,{"b":{}}],"c":"\u00e9"}"#;
        assert_eq!(
            parse(text.as_bytes()).unwrap(),
            serde_json::from_str::<Value>(text).unwrap()
        );
        // a list of zeros: the list and each zero cost VALUE_COST
        let zeros = |n: u64| format!("[{}0]", "0,".repeat(n as usize - 1));
        let fit = PARSED_MAX / VALUE_COST - 1;
        assert_eq!(
            parse(zeros(fit).as_bytes())
                .unwrap()
                .as_array()
                .unwrap()
                .len() as u64,
            fit
        );
        let e = parse(zeros(fit + 1).as_bytes()).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains(OVER_PARSED), "{e}");
        // a string is stopped while it is read, before it is gathered whole
        let long = |n: u64| format!("\"{}\"", "a".repeat(n as usize));
        assert_eq!(
            parse(long(PARSED_MAX / 4).as_bytes())
                .unwrap()
                .as_str()
                .map(str::len),
            Some(PARSED_MAX as usize / 4)
        );
        let e = parse(long(PARSED_MAX / 2 + 1).as_bytes())
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_io() && e.to_string().contains(OVER_PARSED), "{e}");
        // small keys: each entry costs its key's length and VALUE_COST twice
        let object = |n: u64| {
            let pairs: Vec<String> = (0..n).map(|i| format!("\"{i:07}\":0")).collect();
            format!("{{{}}}", pairs.join(","))
        };
        let pairs = (PARSED_MAX - VALUE_COST) / (2 * VALUE_COST + 7);
        let parsed = parse(object(pairs).as_bytes()).map(|v| v.as_object().unwrap().len());
        assert_eq!(parsed.ok(), Some(pairs as usize));
        let e = parse(object(pairs + 1).as_bytes()).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains(OVER_PARSED), "{e}");
        assert!(parse(&b"[1] 2"[..]).is_err(), "trailing text is refused");
    }

    #[test]
    fn the_configs_bounds_default_to_the_clients() {
        let c = crate::config::Config::parse("").unwrap();
        let l = Limits::of(&c.opencode);
        assert_eq!(
            (l.deadline, l.body_cap, l.parsed_cap),
            (Limits::default().deadline, 256 << 20, PARSED_MAX)
        );
        let c = crate::config::Config::parse("[opencode]\nbody_cap_mib = 2\n").unwrap();
        assert_eq!(Limits::of(&c.opencode).body_cap, 2 << 20);
    }

    #[test]
    fn origins_spell_out_default_ports_and_ignore_paths() {
        assert_eq!(
            origin("http://127.0.0.1:4096/session?x=1").as_deref(),
            Some("http://127.0.0.1:4096")
        );
        assert_eq!(
            origin("http://Example.org/a").as_deref(),
            Some("http://example.org:80")
        );
        assert_eq!(
            origin("http://[::1]:80/").as_deref(),
            Some("http://[::1]:80")
        );
        assert_ne!(
            origin("http://127.0.0.1:4096/"),
            origin("http://127.0.0.2:4096/")
        );
        assert_eq!(origin("/relative"), None);
    }
}
