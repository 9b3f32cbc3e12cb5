//! A tiny HTTP/1.1 server for protocol tests: canned responses by method and path, and a log of
//! every request (request line, headers, body) so tests can check what was sent.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// When it was read, ms since the epoch.
    pub at_ms: i64,
}

#[derive(Clone)]
pub enum Reply {
    Json(u16, String),
    /// Accept the connection and never answer.
    Hang,
    /// Answer after a delay.
    Delay(u64, u16, String),
    /// Send the headers of a JSON answer, then one byte of body every `ms`, forever.
    Trickle(u64),
    /// A 200 answer whose body is a JSON list `[0,0,0,...]` of about this many bytes, written
    /// as the client reads it (`Stub::sent` counts the bytes that went out).
    Big(u64),
    /// A redirect: status and `Location`.
    Redirect(u16, String),
    /// The first reply until a request whose path starts with this one has come, then the
    /// second (a server whose answers change with what it was asked).
    After(String, Box<Reply>, Box<Reply>),
}

pub struct Stub {
    pub url: String,
    pub port: u16,
    pub log: Arc<Mutex<Vec<Request>>>,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    /// Required `Authorization` header; others get 401.
    auth: Arc<Mutex<Option<String>>>,
    /// (requests in flight now, most ever in flight at once).
    pub inflight: Arc<Mutex<(usize, usize)>>,
    /// Body bytes written by `Big` replies.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
}

impl Stub {
    pub fn start() -> Stub {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let routes: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let auth: Arc<Mutex<Option<String>>> = Arc::default();
        let inflight: Arc<Mutex<(usize, usize)>> = Arc::default();
        let sent: Arc<std::sync::atomic::AtomicU64> = Arc::default();
        let (lg, rt, au, inf, sn) = (
            log.clone(),
            routes.clone(),
            auth.clone(),
            inflight.clone(),
            sent.clone(),
        );
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (lg, rt, au, inf, sn) =
                    (lg.clone(), rt.clone(), au.clone(), inf.clone(), sn.clone());
                std::thread::spawn(move || serve(s, lg, rt, au, sn, &inf));
            }
        });
        Stub {
            url: format!("http://127.0.0.1:{port}"),
            port,
            log,
            routes,
            auth,
            inflight,
            sent,
        }
    }

    /// `route("GET /session", Reply::Json(200, "[]"))`; a path without query matches any query.
    pub fn route(&self, key: &str, r: Reply) -> &Stub {
        self.routes.lock().unwrap().insert(key.to_string(), r);
        self
    }

    pub fn json(&self, key: &str, body: &str) -> &Stub {
        self.route(key, Reply::Json(200, body.to_string()))
    }

    pub fn require_auth(&self, header: &str) {
        *self.auth.lock().unwrap() = Some(header.to_string());
    }

    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

fn serve(
    s: TcpStream,
    log: Arc<Mutex<Vec<Request>>>,
    routes: Arc<Mutex<HashMap<String, Reply>>>,
    auth: Arc<Mutex<Option<String>>>,
    sent: Arc<std::sync::atomic::AtomicU64>,
    inflight: &Mutex<(usize, usize)>,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let full = parts.next().unwrap_or("").to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let n: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; n];
    let _ = r.read_exact(&mut body);
    let body = String::from_utf8_lossy(&body).into_owned();
    let path = full.split('?').next().unwrap_or("").to_string();
    log.lock().unwrap().push(Request {
        method: method.clone(),
        path: full.clone(),
        headers: headers.clone(),
        body,
        at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    });
    // in flight from its request read to its reply's first byte: counted by connection, the
    // next request of a client answered could come before this thread was scheduled again
    {
        let mut f = inflight.lock().unwrap();
        f.0 += 1;
        f.1 = f.1.max(f.0);
    }
    let need = auth.lock().unwrap().clone();
    let reply = if need.is_some() && headers.get("authorization") != need.as_ref() {
        Reply::Json(401, "{\"error\":\"unauthorized\"}".into())
    } else {
        let rt = routes.lock().unwrap();
        rt.get(&format!("{method} {full}"))
            .or_else(|| rt.get(&format!("{method} {path}")))
            .cloned()
            .unwrap_or(Reply::Json(404, "{\"error\":\"not found\"}".into()))
    };
    let reply = match reply {
        Reply::After(seen, before, after) => {
            let log = log.lock().unwrap();
            // this request is logged already: only an earlier one switches
            let earlier = &log[..log.len() - 1];
            if earlier.iter().any(|r| r.path.starts_with(&seen)) {
                *after
            } else {
                *before
            }
        }
        r => r,
    };
    let mut s = s;
    let reply = match reply {
        Reply::Delay(ms, code, body) => {
            std::thread::sleep(Duration::from_millis(ms));
            Reply::Json(code, body)
        }
        r => r,
    };
    inflight.lock().unwrap().0 -= 1;
    match reply {
        Reply::Hang => std::thread::sleep(Duration::from_secs(60)),
        Reply::Trickle(ms) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n["
            );
            for _ in 0..100_000 {
                std::thread::sleep(Duration::from_millis(ms));
                if s.write_all(b"0,").and_then(|_| s.flush()).is_err() {
                    break;
                }
            }
        }
        Reply::Big(bytes) => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n[",
                bytes + 2
            );
            let chunk = "0,".repeat(32 << 10);
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                let piece = if n == chunk.len() {
                    &chunk[..]
                } else {
                    &chunk[..n]
                };
                if s.write_all(piece.as_bytes()).is_err() {
                    return;
                }
                sent.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                left -= n as u64;
            }
            let _ = s.write_all(b"0]");
        }
        Reply::Redirect(code, to) => {
            let _ = write!(
                s,
                "HTTP/1.1 {code} X\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
        Reply::Delay(..) | Reply::After(..) => unreachable!(),
        Reply::Json(code, body) => {
            let _ = write!(
                s,
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    }
}
