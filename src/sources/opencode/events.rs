//! A server's event stream, followed: `GET /global/event` (every project of that opencode
//! process) read in a thread of its own for as long as the server is followed, so that
//! `oc-sessions --follow` reads a session of a server at the next poll after the server said it
//! changed, as it does for a database row (a server with no database the watchdog can read: in
//! a container, on another host). Only which session an event names is kept, found in the
//! line's text; nothing of its content is parsed or kept (parts carry tool output).
//!
//! A stream that ends, fails, or ends no line for [`IDLE`] (opencode sends a heartbeat every
//! 10 s or so; a server that trickles one endless line is as dead) is connected again after
//! 1 s, then twice as long each time up to [`BACKOFF_MAX`]. Once connected again it says so
//! ([`Heard::resumed`]): what the server said meanwhile is lost, so the follower reads
//! everything anew. A stream that names more than [`HEARD_MAX`] sessions between two polls
//! says so too ([`Heard::flooded`]), keeping none past the cap: one full read costs less than
//! reading that many sessions one by one, and memory stays bounded whatever a server sends.
//! A server without the stream (404) is read at full reads only, as before.

use super::http::{Client, Fault};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A stream silent this long is dead: connected again.
pub const IDLE: Duration = Duration::from_secs(30);
/// The longest wait between two attempts to connect.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);
/// What is kept of a line: the session id comes in its first hundred bytes.
const LINE_CAP: usize = 4096;
/// The most sessions kept between two polls; past it the follower reads everything.
pub const HEARD_MAX: usize = 1000;

/// What a stream said since it was last asked.
#[derive(Debug, Default, PartialEq)]
pub struct Heard {
    /// The sessions its events named.
    pub sessions: BTreeSet<String>,
    /// It was connected again after it ended or failed: events may have been missed.
    pub resumed: bool,
    /// It named more than [`HEARD_MAX`] sessions: those past the cap were not kept.
    pub flooded: bool,
}

/// One server's stream, followed until this is dropped.
pub struct EventStream {
    pub url: String,
    heard: Arc<Mutex<Heard>>,
    stop: Arc<AtomicBool>,
}

impl EventStream {
    /// Follows `client`'s server in a thread of its own.
    pub fn follow(client: Client) -> EventStream {
        EventStream::follow_with(client, IDLE)
    }

    /// [`EventStream::follow`], taking a stream that ends no line for `idle` for dead.
    pub fn follow_with(client: Client, idle: Duration) -> EventStream {
        let heard = Arc::new(Mutex::new(Heard::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let url = client.base.clone();
        let (h, s) = (heard.clone(), stop.clone());
        std::thread::spawn(move || follow(&client, idle, &h, &s));
        EventStream { url, heard, stop }
    }

    /// What it said since the last call.
    pub fn take(&self) -> Heard {
        std::mem::take(&mut *self.heard.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The thread ends at its next line, silence or attempt.
impl Drop for EventStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn follow(client: &Client, idle: Duration, heard: &Mutex<Heard>, stop: &AtomicBool) {
    let note = |f: &dyn Fn(&mut Heard)| f(&mut heard.lock().unwrap_or_else(|e| e.into_inner()));
    let mut wait = Duration::from_secs(1);
    let mut connected_before = false;
    while !stop.load(Ordering::Relaxed) {
        let ended = client.stream_lines(
            "/global/event",
            idle,
            LINE_CAP,
            &mut || {
                if connected_before {
                    note(&|h| h.resumed = true);
                }
                connected_before = true;
                wait = Duration::from_secs(1);
            },
            &mut |line| {
                if let Some(id) = session_of(line) {
                    note(&|h| {
                        if h.sessions.len() < HEARD_MAX || h.sessions.contains(&id) {
                            h.sessions.insert(id.clone());
                        } else {
                            h.flooded = true;
                        }
                    });
                }
                !stop.load(Ordering::Relaxed)
            },
        );
        if let Err(Fault::NotFound(_)) = ended {
            return;
        }
        let until = Instant::now() + wait;
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
        wait = (wait * 2).min(BACKOFF_MAX);
    }
}

/// The session an event line names (`data: {..."sessionID":"ses_..."...}`), if any.
pub fn session_of(line: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"sessionID\":\"";
    let text = line.strip_prefix(b"data:")?;
    let at = text.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let id: &[u8] = &text[at..];
    let len = id
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
        .count();
    let ok = id.get(len) == Some(&b'"') && id.starts_with(b"ses_") && len <= 64;
    ok.then(|| String::from_utf8_lossy(&id[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as opencode 1.18.33's `GET /global/event` sends them (captures/sse, compacted).
    #[test]
    fn the_session_of_an_event_line_is_read_from_its_text() {
        let part = r#"data: {"directory":"/tmp/ocsim/proj","project":"107cdeae0cf2fdf11ca82e17c7e8c754d22fc55a","payload":{"id":"evt_22e1572ca001rP83eQQ8QupmFi","type":"message.part.updated","properties":{"sessionID":"ses_dd1ea8e13ffeJWKqM6AZARTDSd","part":{"type":"text","text":"SCRIPT:smoke Read the README."}}}}"#;
        assert_eq!(
            session_of(part.as_bytes()).as_deref(),
            Some("ses_dd1ea8e13ffeJWKqM6AZARTDSd")
        );
        let status = r#"data: {"directory":"/tmp/ocsim/proj","project":"107c","payload":{"id":"evt_22e1572f2001iKsrf3nElPnr34","type":"session.status","properties":{"sessionID":"ses_dd1ea8e13ffeJWKqM6AZARTDSd","status":{"type":"busy"}}}}"#;
        assert_eq!(
            session_of(status.as_bytes()).as_deref(),
            Some("ses_dd1ea8e13ffeJWKqM6AZARTDSd")
        );
        for none in [
            r#"data: {"payload":{"id":"evt_22e156ddf001aVqk7JobSqvH8G","type":"server.connected","properties":{}}}"#,
            r#"data: {"payload":{"type":"server.heartbeat","properties":{}}}"#,
            "",
            ": a comment",
            // cut short by the line cap, or not an id
            r#"data: {"payload":{"properties":{"sessionID":"ses_dd1ea8e13ffe"#,
            r#"data: {"payload":{"properties":{"sessionID":"x\"y"}}}"#,
        ] {
            assert_eq!(session_of(none.as_bytes()), None, "{none}");
        }
    }

    /// A server that ends the stream: the thread connects again and says so; dropped, it stops
    /// trying. A stand-in server speaking HTTP/1.1 over a real socket.
    #[test]
    fn a_stream_that_ends_is_connected_again_and_says_it_resumed() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = std::thread::spawn(move || {
            for id in ["ses_a", "ses_b"] {
                let (mut c, _) = listener.accept().unwrap();
                let mut req = [0u8; 1024];
                let n = c.read(&mut req).unwrap();
                assert!(String::from_utf8_lossy(&req[..n]).starts_with("GET /global/event "));
                let body = format!(
                    "data: {{\"payload\":{{\"type\":\"session.idle\",\"properties\":{{\"sessionID\":\"{id}\"}}}}}}\n\n"
                );
                write!(
                    c,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
        });
        let s = EventStream::follow(Client::new(&url));
        let t0 = Instant::now();
        let mut all = Heard::default();
        while !(all.resumed && all.sessions.len() == 2) {
            assert!(t0.elapsed() < Duration::from_secs(10), "{all:?}");
            let h = s.take();
            all.sessions.extend(h.sessions);
            all.resumed |= h.resumed;
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            all.sessions.into_iter().collect::<Vec<_>>(),
            ["ses_a", "ses_b"]
        );
        served.join().unwrap();
        drop(s);
    }

    /// What the stand-in writes on one connection after the 200.
    type Serve = Box<dyn FnOnce(&mut std::net::TcpStream) + Send>;

    /// A stand-in server speaking HTTP/1.1 over a real socket: for each connection in turn,
    /// the 200 of an event stream, then what `serve` writes.
    fn stand_in(serves: Vec<Serve>) -> (String, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let served = std::thread::spawn(move || {
            for serve in serves {
                let (mut c, _) = listener.accept().unwrap();
                let mut req = [0u8; 1024];
                let _ = c.read(&mut req).unwrap();
                c.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                    .unwrap();
                serve(&mut c);
            }
        });
        (url, served)
    }

    fn event(id: &str) -> String {
        format!("data: {{\"payload\":{{\"type\":\"session.idle\",\"properties\":{{\"sessionID\":\"{id}\"}}}}}}\n\n")
    }

    /// Everything `s` says until `done` holds of it, or 10 s.
    fn heard_until(s: &EventStream, done: impl Fn(&Heard) -> bool) -> Heard {
        let t0 = Instant::now();
        let mut all = Heard::default();
        while !done(&all) && t0.elapsed() < Duration::from_secs(10) {
            let h = s.take();
            all.sessions.extend(h.sessions);
            all.resumed |= h.resumed;
            all.flooded |= h.flooded;
            std::thread::sleep(Duration::from_millis(50));
        }
        all
    }

    /// A server that trickles one byte of a line that never ends, every 50 ms: each read
    /// answers well within the idle time, so only a deadline on the line can tell the stream
    /// is dead (it followed the trickle for ever, hearing nothing more from that server).
    #[test]
    fn a_stream_trickling_one_endless_line_is_taken_for_dead_and_connected_again() {
        use std::io::Write;
        let (url, served) = stand_in(vec![
            Box::new(|c| {
                c.write_all(event("ses_a").as_bytes()).unwrap();
                c.write_all(b"data: ").unwrap();
                // until the client hangs up
                while c.write_all(b"x").and_then(|()| c.flush()).is_ok() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }),
            Box::new(|c| c.write_all(event("ses_b").as_bytes()).unwrap()),
        ]);
        let s = EventStream::follow_with(Client::new(&url), Duration::from_secs(1));
        let all = heard_until(&s, |h| h.resumed && h.sessions.len() == 2);
        assert_eq!(
            (all.sessions.into_iter().collect::<Vec<_>>(), all.resumed),
            (vec!["ses_a".to_string(), "ses_b".to_string()], true)
        );
        drop(s);
        served.join().unwrap();
    }

    /// A server that names 5,000 sessions at once (a burst, or a server feeding ids): no more
    /// than HEARD_MAX are kept, and the follower is told to read everything instead.
    #[test]
    fn a_stream_naming_more_sessions_than_a_poll_reads_asks_for_a_full_read() {
        use std::io::Write;
        let (url, served) = stand_in(vec![Box::new(|c| {
            let burst: String = (0..5000).map(|i| event(&format!("ses_{i:05}"))).collect();
            c.write_all(burst.as_bytes()).unwrap();
        })]);
        let s = EventStream::follow_with(Client::new(&url), Duration::from_secs(1));
        let all = heard_until(&s, |h| h.flooded);
        assert_eq!((all.sessions.len(), all.flooded), (HEARD_MAX, true));
        drop(s);
        served.join().unwrap();
    }

    /// A 16 MiB line (a part carrying a big tool output, or a hostile server) is passed over
    /// at the line cap, and the event after it is heard.
    #[test]
    fn an_event_after_a_16_mib_line_is_heard() {
        use std::io::Write;
        let (url, served) = stand_in(vec![Box::new(|c| {
            let mut big = b"data: ".to_vec();
            big.resize(16 << 20, b'y');
            big.push(b'\n');
            c.write_all(&big).unwrap();
            c.write_all(event("ses_after").as_bytes()).unwrap();
        })]);
        let s = EventStream::follow_with(Client::new(&url), Duration::from_secs(5));
        let all = heard_until(&s, |h| !h.sessions.is_empty());
        assert_eq!(all.sessions.into_iter().collect::<Vec<_>>(), ["ses_after"]);
        drop(s);
        served.join().unwrap();
    }
}
