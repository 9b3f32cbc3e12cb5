//! A real freedesktop notification stack for tests: a private D-Bus session bus
//! (`dbus-daemon --session`), a virtual display (Xvfb) and the dunst notification daemon, plus
//! `dbus-monitor` recording every `Notify` call with its hints (dunst's history lacks urgency).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Desktop {
    _dir: tempfile::TempDir,
    pub bus: String,
    pub display: String,
    monitor_log: PathBuf,
    kids: Vec<Child>,
}

/// The stand-in for dmenu: keeps the menu dunst offers (`menu.txt`, written whole at once) and
/// answers the first entry holding the text of `pick.txt`.
const MENU: &str = "#!/bin/sh\ncat > {DIR}/menu.tmp\nmv {DIR}/menu.tmp {DIR}/menu.txt\n\
                    grep -F -e \"$(cat {DIR}/pick.txt)\" {DIR}/menu.txt | head -n 1\n";

/// A notification as the bus saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub app: String,
    pub summary: String,
    pub body: String,
    /// 0 low, 1 normal, 2 critical.
    pub urgency: Option<u8>,
    /// The call's `expire_timeout` in ms: -1 the server's default, 0 never.
    pub expire: Option<i32>,
    /// Every string of the call: the four above, then the actions (id, label, ...) and hints.
    pub strings: Vec<String>,
}

impl Desktop {
    pub fn shared() -> &'static Desktop {
        static D: OnceLock<Desktop> = OnceLock::new();
        D.get_or_init(|| Desktop::start(None))
    }

    /// A stack of its own, for a test that freezes its daemon (the shared one serves others).
    pub fn private() -> Desktop {
        Desktop::start(None)
    }

    /// A stack of its own whose dunst opens its context menu (a person's shortcut for it,
    /// `dunstctl context`) in a stand-in for dmenu that picks the entry [`Desktop::choose`]
    /// names, as a person picks one of a popup's actions: dunst then sends `ActionInvoked` for
    /// that action, as it does for a click.
    pub fn with_menu() -> Desktop {
        Desktop::start(Some(MENU))
    }

    /// Opens dunst's context menu and picks the entry that contains `label`; what the menu
    /// offered (one line an action: `#LABEL (SUMMARY) [ID,ACTION]`).
    pub fn choose(&self, label: &str) -> String {
        let dir = self._dir.path();
        let menu = dir.join("menu.txt");
        let _ = std::fs::remove_file(&menu);
        std::fs::write(dir.join("pick.txt"), label).unwrap();
        let out = Command::new("dunstctl")
            .arg("context")
            .env("DBUS_SESSION_BUS_ADDRESS", &self.bus)
            .output()
            .unwrap();
        assert!(out.status.success(), "dunstctl context: {out:?}");
        let t0 = Instant::now();
        loop {
            if let Ok(m) = std::fs::read_to_string(&menu) {
                return m;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "dunst opened no context menu"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the notification daemon (SIGSTOP): it still owns `org.freedesktop.Notifications`,
    /// so the bus accepts every call and routes it there, and nothing ever answers.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Lets the daemon run again (SIGCONT); it answers what queued up meanwhile.
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let dunst = self.kids[1].id().to_string();
        let ok = Command::new("kill")
            .args([sig, dunst.as_str()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {dunst}");
    }

    fn start(dmenu: Option<&str>) -> Desktop {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("dbus-daemon")
            .args(["--session", "--fork", "--print-address=1", "--print-pid=2"])
            .output()
            .expect("dbus-daemon");
        let bus = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap()
            .trim()
            .to_string();
        let bus_pid = String::from_utf8_lossy(&out.stderr).trim().to_string();
        // Xvfb picks a free display and says which (`-displayfd`): two stacks in one test run,
        // or two test runs on one machine, never share (and kill) each other's display
        let mut xvfb = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-screen",
                "0",
                "800x600x24",
                "-nolisten",
                "tcp",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("Xvfb: {e} (apt-get install xvfb)"));
        let mut n = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(xvfb.stdout.take().unwrap()),
            &mut n,
        )
        .unwrap();
        let display = format!(":{}", n.trim());
        assert!(display.len() > 1, "Xvfb named no display");
        let spawn = |cmd: &mut Command| -> Child {
            cmd.env("DBUS_SESSION_BUS_ADDRESS", &bus)
                .env("DISPLAY", &display)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{cmd:?}: {e} (apt-get install dbus xvfb dunst)"))
        };
        let mut kids = vec![xvfb];
        let mut dunst = Command::new("dunst");
        if let Some(script) = dmenu {
            let menu = dir.path().join("dmenu");
            std::fs::write(&menu, script.replace("{DIR}", dir.path().to_str().unwrap())).unwrap();
            std::fs::set_permissions(&menu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let rc = dir.path().join("dunstrc");
            std::fs::write(&rc, format!("[global]\n    dmenu = {}\n", menu.display())).unwrap();
            dunst.arg("-config").arg(rc);
        }
        kids.push(spawn(&mut dunst));
        let monitor_log = dir.path().join("monitor.log");
        let log = std::fs::File::create(&monitor_log).unwrap();
        kids.push(
            Command::new("dbus-monitor")
                .arg("interface='org.freedesktop.Notifications',member='Notify'")
                .env("DBUS_SESSION_BUS_ADDRESS", &bus)
                .stdout(log)
                .stderr(Stdio::null())
                .spawn()
                .expect("dbus-monitor"),
        );
        // dunst owns the name once it answers
        let t0 = Instant::now();
        loop {
            let ok = Command::new("dunstctl")
                .arg("count")
                .env("DBUS_SESSION_BUS_ADDRESS", &bus)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "dunst did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let pids: Vec<String> = kids.iter().map(|k| k.id().to_string()).collect();
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill {} {bus_pid} 2>/dev/null",
                std::process::id(),
                pids.join(" ")
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        Desktop {
            _dir: dir,
            bus,
            display,
            monitor_log,
            kids,
        }
    }

    /// Every Notify call so far, parsed from dbus-monitor's text.
    pub fn seen(&self) -> Vec<Seen> {
        let text = std::fs::read_to_string(&self.monitor_log).unwrap_or_default();
        let mut out = Vec::new();
        for block in text.split("method call").skip(1) {
            if !block.contains("member=Notify") {
                continue;
            }
            // strings run from `string "` to a quote that ends a line (bodies span lines)
            let mut strings: Vec<String> = Vec::new();
            let mut rest = block;
            while let Some(i) = rest.find("string \"") {
                let after = &rest[i + 8..];
                let end = after.find("\"\n").unwrap_or(after.len());
                strings.push(after[..end].to_string());
                rest = &after[end.min(after.len())..];
            }
            // app_name, app_icon, summary, body, then action and hint strings
            let urgency = block
                .split("string \"urgency\"")
                .nth(1)
                .and_then(|rest| rest.split("variant").nth(1))
                .and_then(|v| v.split_whitespace().nth(1))
                .and_then(|b| b.parse().ok());
            // the last argument, after the hints
            let expire = block
                .rsplit("int32 ")
                .next()
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok());
            out.push(Seen {
                expire,
                app: strings.first().cloned().unwrap_or_default(),
                summary: strings.get(2).cloned().unwrap_or_default(),
                body: strings.get(3).cloned().unwrap_or_default(),
                urgency,
                strings,
            });
        }
        out
    }

    /// Waits for notifications whose summary or body contains `needle`.
    pub fn wait_for(&self, needle: &str, n: usize) -> Vec<Seen> {
        let t0 = Instant::now();
        loop {
            let got: Vec<Seen> = self
                .seen()
                .into_iter()
                .filter(|s| s.summary.contains(needle) || s.body.contains(needle))
                .collect();
            if got.len() >= n || t0.elapsed() > Duration::from_secs(5) {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Summaries dunst itself holds (displayed or in history), read with dunstctl.
    pub fn dunst_summaries(&self) -> Vec<String> {
        self.dunst_history()
            .iter()
            .filter_map(|e| e["summary"]["data"].as_str().map(String::from))
            .collect()
    }

    /// What dunst holds (displayed or in history), as `dunstctl history` gives each: its
    /// `summary`, `body` and `message` (the markup dunst renders, its format filled in).
    pub fn dunst_history(&self) -> Vec<serde_json::Value> {
        let run = |args: &[&str]| {
            Command::new("dunstctl")
                .args(args)
                .env("DBUS_SESSION_BUS_ADDRESS", &self.bus)
                .output()
                .unwrap()
        };
        run(&["close-all"]);
        std::thread::sleep(Duration::from_millis(200));
        let h = run(&["history"]);
        let v: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap_or_default();
        v["data"][0].as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Desktop {
    fn drop(&mut self) {
        for k in &mut self.kids {
            let _ = k.kill();
        }
    }
}
