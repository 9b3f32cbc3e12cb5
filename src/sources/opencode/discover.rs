//! Finds running opencode servers without configuration, from `/proc` (Linux): processes whose
//! executable or `argv[0]` is opencode, their socket inodes (`/proc/PID/fd/*` -> `socket:[N]`),
//! and the TCP sockets listening on a loopback or wildcard address (`/proc/net/tcp`, `tcp6`).
//!
//! opencode 1.18 listens on no fixed port: `serve` and `web` take `--port` (4096 first, else a
//! random one), the TUI and `opencode run` listen nowhere unless given `--port`. So the only
//! reliable way to find the live APIs is to ask the kernel which sockets opencode holds.
//! Only processes of the watchdog's own user are considered, and of the users the config names
//! (`[opencode] discover_uids`): as root every process is readable, and a process of another
//! user named `opencode` could otherwise be sent the server password and feed sessions in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A loopback port an opencode process listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub pid: u32,
    /// The user the process runs as.
    pub uid: u32,
    pub port: u16,
    /// `http://127.0.0.1:PORT`, or `http://[::1]:PORT` for a socket bound to `::1` only.
    pub url: String,
    /// The database this process writes: `$XDG_DATA_HOME/opencode/opencode.db` of its
    /// environment (None when its environment names neither `XDG_DATA_HOME` nor `HOME`).
    pub db: Option<PathBuf>,
}

/// Is this process opencode? Its executable (`.../opencode-ai/bin/opencode.exe` for the npm
/// install) or its `argv[0]` is named `opencode...`.
fn is_opencode(proc_dir: &Path) -> bool {
    let named = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("opencode"))
    };
    if std::fs::read_link(proc_dir.join("exe")).is_ok_and(|e| named(&e)) {
        return true;
    }
    std::fs::read(proc_dir.join("cmdline")).is_ok_and(|c| {
        let argv0 = c.split(|&b| b == 0).next().unwrap_or(&[]);
        named(Path::new(&*String::from_utf8_lossy(argv0)))
    })
}

/// The database path a process's environment points opencode at (opencode uses xdg-basedir:
/// an absolute `XDG_DATA_HOME`, else `$HOME/.local/share`).
fn db_of(proc_dir: &Path) -> Option<PathBuf> {
    let env = std::fs::read(proc_dir.join("environ")).ok()?;
    let mut home = None;
    let mut data = None;
    for kv in env.split(|&b| b == 0) {
        let kv = String::from_utf8_lossy(kv);
        if let Some(v) = kv.strip_prefix("XDG_DATA_HOME=") {
            if Path::new(v).is_absolute() {
                data = Some(PathBuf::from(v));
            }
        } else if let Some(v) = kv.strip_prefix("HOME=") {
            home = Some(PathBuf::from(v));
        }
    }
    let data = data.or_else(|| home.map(|h| h.join(".local/share")))?;
    Some(data.join("opencode/opencode.db"))
}

/// What a process holds open: its socket inodes, and the files it holds that were deleted
/// since (the kernel marks them ` (deleted)`).
fn open_files(proc_dir: &Path) -> (Vec<u64>, Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(proc_dir.join("fd")) else {
        return (Vec::new(), Vec::new());
    };
    let (mut sockets, mut deleted) = (Vec::new(), Vec::new());
    for l in rd
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
    {
        let Some(l) = l.to_str() else { continue };
        if let Some(i) = l.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
            sockets.extend(i.parse::<u64>().ok());
        } else if let Some(f) = l.strip_suffix(" (deleted)") {
            deleted.push(PathBuf::from(f));
        }
    }
    (sockets, deleted)
}

/// Is `db` (a path from the environment, maybe through symbolic links) among the deleted
/// files a process holds (paths as the kernel resolved them)?
fn holds_deleted(deleted: &[PathBuf], db: Option<&Path>) -> bool {
    let Some(db) = db.filter(|_| !deleted.is_empty()) else {
        return false;
    };
    let resolved = db
        .parent()
        .and_then(|d| std::fs::canonicalize(d).ok())
        .zip(db.file_name())
        .map(|(d, f)| d.join(f));
    deleted
        .iter()
        .any(|d| d == db || Some(d) == resolved.as_ref())
}

/// Listening sockets reachable over loopback, by inode: `(port, host to connect to)`.
/// Lines look like `0: 0100007F:1000 00000000:0000 0A ... uid timeout inode ...`; state `0A` is
/// LISTEN. Addresses are hex in host byte order per 32-bit word.
pub fn parse_listening(tcp: &str, v6: bool) -> HashMap<u64, (u16, &'static str)> {
    let mut out = HashMap::new();
    for line in tcp.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[3] != "0A" {
            continue;
        }
        let Some((addr, port)) = f[1].split_once(':') else {
            continue;
        };
        let (Ok(port), Ok(inode)) = (u16::from_str_radix(port, 16), f[9].parse::<u64>()) else {
            continue;
        };
        let host = if v6 {
            match addr {
                // `::` (any) or `::1` (loopback)
                "00000000000000000000000000000000" => "127.0.0.1",
                "00000000000000000000000001000000" => "[::1]",
                // ::ffff:127.x.x.x
                a if a.len() == 32
                    && a.starts_with("0000000000000000FFFF0000")
                    && a.ends_with("7F") =>
                {
                    "127.0.0.1"
                }
                _ => continue,
            }
        } else {
            // 0.0.0.0 (any) or 127.x.x.x (the low byte of the word is the first octet)
            if addr == "00000000" || (addr.len() == 8 && addr.ends_with("7F")) {
                "127.0.0.1"
            } else {
                continue;
            }
        };
        out.insert(inode, (port, host));
    }
    out
}

/// A running opencode process: where it works, which database it writes, where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    /// The user it runs as (the owner of `/proc/PID`).
    pub uid: u32,
    /// Its working directory: the project of a TUI or an `opencode run`.
    pub cwd: Option<PathBuf>,
    pub db: Option<PathBuf>,
    /// Loopback URLs it listens on (none for the TUI and `opencode run` by default).
    pub urls: Vec<(u16, String)>,
    /// Its parent's pid (0 when unreadable).
    pub ppid: u32,
    /// When it started, epoch ms (from `/proc/PID/stat` and the boot time).
    pub started: Option<i64>,
    /// It is an `opencode run`: `Some` with the session it was told to continue (`-s ID`),
    /// if any. Such a process runs one session (and that session's subagents).
    pub run: Option<Option<String>>,
    /// It holds its database open, but that file was deleted or replaced since it opened it
    /// (`/proc/PID/fd/N -> .../opencode.db (deleted)`): it writes where nobody can read.
    pub db_deleted: bool,
}

/// The user this process runs as (the owner of `/proc/self`).
pub fn own_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Every opencode process under `proc` (normally `/proc`) that runs as one of `uids`, in pid
/// order.
pub fn processes(proc: &Path, uids: &[u32]) -> Vec<Process> {
    use std::os::unix::fs::MetadataExt;
    let mut socks = HashMap::new();
    for (file, v6) in [("net/tcp", false), ("net/tcp6", true)] {
        if let Ok(text) = std::fs::read_to_string(proc.join(file)) {
            socks.extend(parse_listening(&text, v6));
        }
    }
    let boot = boot_ms(proc);
    let me = std::process::id();
    let mut pids: Vec<u32> = std::fs::read_dir(proc)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&p| p != me)
        .collect();
    pids.sort_unstable();
    let mut out = Vec::new();
    for pid in pids {
        let dir = proc.join(pid.to_string());
        let Some(uid) = std::fs::metadata(&dir).ok().map(|m| m.uid()) else {
            continue;
        };
        if !uids.contains(&uid) || !is_opencode(&dir) {
            continue;
        }
        let (sockets, deleted) = open_files(&dir);
        let db = db_of(&dir);
        let mut ports: Vec<(u16, &str)> = sockets
            .iter()
            .filter_map(|i| socks.get(i).copied())
            .collect();
        ports.sort_unstable();
        ports.dedup();
        out.push(Process {
            pid,
            uid,
            started: started_ms(&dir, boot),
            run: std::fs::read(dir.join("cmdline"))
                .ok()
                .and_then(|c| run_args(&c)),
            ppid: ppid_of(&dir),
            cwd: std::fs::read_link(dir.join("cwd")).ok(),
            db_deleted: holds_deleted(&deleted, db.as_deref()),
            db,
            urls: ports
                .into_iter()
                .map(|(port, host)| (port, format!("http://{host}:{port}")))
                .collect(),
        });
    }
    drop_forks(out)
}

/// When the machine booted, epoch ms (`btime` of `/proc/stat`).
fn boot_ms(proc: &Path) -> Option<i64> {
    let stat = std::fs::read_to_string(proc.join("stat")).ok()?;
    let secs: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(secs * 1000)
}

/// When a process started, epoch ms: `starttime`, the 22nd field of `/proc/PID/stat`, counts
/// clock ticks since boot, 100 a second (Linux's USER_HZ, fixed for user space).
fn started_ms(proc_dir: &Path, boot: Option<i64>) -> Option<i64> {
    let s = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let ticks: i64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(boot? + ticks * 10)
}

/// Whether a command line (NUL-separated) is `opencode run`, and the session it names with
/// The options of opencode 1.18.33's own command line (`opencode --help`) that take a value as
/// the next word (`--prompt run` is a TUI told to say "run", not an `opencode run`). The stop
/// plugin (deploy/oc-watchdog-stop.js) reads its own command line the same way.
const TAKES_VALUE: &[&str] = &[
    "--log-level",
    "--port",
    "--hostname",
    "--mdns-domain",
    "--cors",
    "-m",
    "--model",
    "-s",
    "--session",
    "--prompt",
    "--agent",
    "--replay-limit",
];

/// `-s`/`--session`: `Some(None)` for a run of a new session. The subcommand is the first word
/// after the program that is not an option (`--log-level` and `--print-logs` may come first).
pub fn run_args(cmdline: &[u8]) -> Option<Option<String>> {
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .skip(1)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        i += if TAKES_VALUE.contains(&args[i].as_str()) {
            2
        } else {
            1
        };
    }
    if args.get(i).map(String::as_str) != Some("run") {
        return None;
    }
    let mut session = None;
    let mut rest = args[i + 1..].iter();
    while let Some(a) = rest.next() {
        if a == "-s" || a == "--session" {
            session = rest.next().cloned();
        } else if let Some(v) = a.strip_prefix("--session=") {
            session = Some(v.to_string());
        }
    }
    Some(session)
}

/// The parent pid from `/proc/PID/stat` (the fourth field, after the parenthesised name, which
/// may itself hold spaces and parentheses).
fn ppid_of(proc_dir: &Path) -> u32 {
    std::fs::read_to_string(proc_dir.join("stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// A child of an opencode process caught between fork and exec (opencode starting a tool, a
/// shell, an LSP) is still "opencode", with its parent's environment and sockets. It is that
/// parent, not a second server: drop every process whose parent is in the list with the same
/// database and at least its listening ports. Seen under load as a served `pids` of two.
fn drop_forks(procs: Vec<Process>) -> Vec<Process> {
    let by_pid: HashMap<u32, &Process> = procs.iter().map(|p| (p.pid, p)).collect();
    let is_fork = |p: &Process| {
        by_pid.get(&p.ppid).is_some_and(|parent| {
            parent.pid != p.pid
                && parent.db == p.db
                && p.urls.iter().all(|u| parent.urls.contains(u))
        })
    };
    let keep: Vec<bool> = procs.iter().map(|p| !is_fork(p)).collect();
    procs
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect()
}

/// Every loopback port an opencode process listens on, in pid then port order.
pub fn listeners(procs: &[Process]) -> Vec<Listener> {
    procs
        .iter()
        .flat_map(|p| {
            p.urls.iter().map(|(port, url)| Listener {
                pid: p.pid,
                uid: p.uid,
                port: *port,
                url: url.clone(),
                db: p.db.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `opencode run` and the session it names, from a command line as /proc has it.
    #[test]
    fn an_opencode_run_and_its_session_are_read_from_its_command_line() {
        let run = |words: &[&str]| run_args(words.join("\0").as_bytes());
        assert_eq!(run(&["opencode", "run", "SCRIPT:x go"]), Some(None));
        assert_eq!(
            run(&[
                "opencode",
                "--log-level",
                "DEBUG",
                "run",
                "-s",
                "ses_a",
                "go on"
            ]),
            Some(Some("ses_a".into()))
        );
        assert_eq!(
            run(&["opencode", "--print-logs", "run", "--session=ses_b"]),
            Some(Some("ses_b".into()))
        );
        assert_eq!(run(&["opencode", "serve", "--port", "0"]), None);
        assert_eq!(run(&["opencode"]), None);
        assert_eq!(run(&["opencode", "/w/proj"]), None);
        // a TUI told to say "run", or run with an agent named so, is no `opencode run`
        assert_eq!(run(&["opencode", "--prompt", "run"]), None);
        assert_eq!(run(&["opencode", "--agent", "run", "/w/proj"]), None);
        assert_eq!(
            run(&["opencode", "--port", "4097", "run", "go"]),
            Some(None)
        );
    }

    fn proc_entry(root: &Path, pid: u32, ppid: u32, exe: &str, home: &str, sockets: &[u64]) {
        let dir = root.join(pid.to_string());
        std::fs::create_dir_all(dir.join("fd")).unwrap();
        std::os::unix::fs::symlink(exe, dir.join("exe")).unwrap();
        std::fs::write(
            dir.join("stat"),
            format!("{pid} (opencode (x) y) S {ppid} {pid} {pid} 0 -1 4194560"),
        )
        .unwrap();
        std::fs::write(dir.join("environ"), format!("PATH=/bin\0HOME={home}\0")).unwrap();
        std::os::unix::fs::symlink("/tmp", dir.join("cwd")).unwrap();
        for (n, inode) in sockets.iter().enumerate() {
            std::os::unix::fs::symlink(format!("socket:[{inode}]"), dir.join(format!("fd/{n}")))
                .unwrap();
        }
    }

    #[test]
    fn a_child_caught_between_fork_and_exec_is_its_parent_not_a_second_server() {
        let root = std::env::temp_dir().join(format!("oc-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("net")).unwrap();
        std::fs::write(
            root.join("net/tcp"),
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1000 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 501 1 0 100 0 0 10 0
   1: 0100007F:1001 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 502 1 0 100 0 0 10 0
",
        )
        .unwrap();
        let exe = "/usr/lib/node_modules/opencode-ai/bin/opencode";
        proc_entry(&root, 100, 1, exe, "/home/a", &[501]); // opencode serve --port 4096
        proc_entry(&root, 101, 100, exe, "/home/a", &[501]); // its fork, before exec
        proc_entry(&root, 102, 100, exe, "/home/b", &[]); // a child with another HOME: its own
        proc_entry(&root, 103, 100, exe, "/home/a", &[501, 502]); // listens on more: its own
        proc_entry(&root, 200, 1, exe, "/home/a", &[]); // a TUI
        let me = own_uid().unwrap();
        let got: Vec<(u32, u32, usize)> = processes(&root, &[me])
            .iter()
            .map(|p| (p.pid, p.ppid, p.urls.len()))
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            got,
            vec![(100, 1, 1), (102, 100, 0), (103, 100, 2), (200, 1, 0)]
        );
    }

    #[test]
    fn listening_loopback_and_wildcard_sockets_are_read_from_proc_net_tcp() {
        // real lines: 127.0.0.1:4096 and 0.0.0.0:2024 listening, one established, one on 10.0.0.5
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1000 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12243 1 0000000040bb5f8f 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1587 1 000000009687bd76 100 0 0 10 0
   2: 0100007F:1000 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 13001 1 0000000040bb5f8f 20 4 30 10 -1
   3: 0500000A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 13002 1 0000000040bb5f8f 100 0 0 10 0
";
        let got = parse_listening(tcp, false);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&12243], (4096, "127.0.0.1"));
        assert_eq!(got[&1587], (2024, "127.0.0.1"));
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F92 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 778 1 0 100 0 0 10 0
   2: 20010DB8000000000000000000000001:1F93 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 779 1 0 100 0 0 10 0
";
        let got = parse_listening(tcp6, true);
        assert_eq!(got.len(), 2);
        assert_eq!(got[&777], (8081, "[::1]"));
        assert_eq!(got[&778], (8082, "127.0.0.1"));
    }

    #[test]
    fn a_database_deleted_or_replaced_under_its_opencode_is_seen_in_its_open_files() {
        let root = std::env::temp_dir().join(format!("oc-proc-del-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("net")).unwrap();
        let exe = "/usr/lib/node_modules/opencode-ai/bin/opencode";
        let home = root.join("home");
        let data = home.join(".local/share/opencode");
        std::fs::create_dir_all(&data).unwrap();
        let db = std::fs::canonicalize(&data).unwrap().join("opencode.db");
        let fd = |pid: u32, n: u32, target: String| {
            std::os::unix::fs::symlink(target, root.join(format!("{pid}/fd/{n}"))).unwrap()
        };
        // as the kernel shows them: the file it opened, and ` (deleted)` once it is gone
        proc_entry(&root, 300, 1, exe, home.to_str().unwrap(), &[]);
        fd(300, 7, db.display().to_string());
        proc_entry(&root, 301, 1, exe, home.to_str().unwrap(), &[]);
        fd(301, 7, format!("{} (deleted)", db.display()));
        // a deleted file of its own that is not the database
        proc_entry(&root, 302, 1, exe, home.to_str().unwrap(), &[]);
        fd(
            302,
            9,
            format!(
                "{}/opencode.db-old (deleted)",
                db.parent().unwrap().display()
            ),
        );
        let me = own_uid().unwrap();
        let got: Vec<(u32, bool)> = processes(&root, &[me])
            .iter()
            .map(|p| (p.pid, p.db_deleted))
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(got, vec![(300, false), (301, true), (302, false)]);
    }
}
