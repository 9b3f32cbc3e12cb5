//! The opencode TUI as a person runs it in a terminal: under tmux, on a server of its own (a
//! private socket, no user config), 160x48. The TUI takes its whole environment from the command
//! that starts it (`ocsim::opencode`, so HOME, XDG dirs and the offline switches are the same as
//! for `opencode run`): tmux's own environment is cleared and each variable handed to the pane.
//! Dropping it kills its tmux server and waits for the TUI to end (SIGKILL after 10 s).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Tui {
    /// Holds the socket (a short path: tmux's socket path is limited to about 100 bytes).
    dir: tempfile::TempDir,
    /// The opencode process in the pane (tmux runs it directly, with no shell between).
    pub pid: u32,
}

impl Tui {
    /// Starts `oc` (an `opencode` command with its working directory set, e.g.
    /// `ocsim::opencode(home, proj).args(["--prompt", "SCRIPT:reread go"])`) in a detached tmux
    /// session.
    pub fn start(oc: &Command) -> Tui {
        let dir = tempfile::tempdir().unwrap();
        let cwd = oc.get_current_dir().expect("the TUI's project directory");
        let mut tmux = Command::new("tmux");
        tmux.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("-S")
            .arg(dir.path().join("tmux.sock"))
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "oc"])
            .args(["-x", "160", "-y", "48", "-c"])
            .arg(cwd);
        for (k, v) in oc.get_envs() {
            if let Some(v) = v {
                let mut kv = k.to_os_string();
                kv.push("=");
                kv.push(v);
                tmux.arg("-e").arg(kv);
            }
        }
        // more than one word: tmux executes it as it is, no shell, no quoting
        tmux.arg("--").arg(oc.get_program()).args(oc.get_args());
        let st = tmux.status().expect("tmux (tests/setup installs it)");
        assert!(st.success(), "tmux new-session: {st}");
        let mut t = Tui { dir, pid: 0 };
        t.pid = t
            .tmux(&["display-message", "-p", "-t", "oc", "#{pane_pid}"])
            .trim()
            .parse()
            .expect("the pane's pid");
        t
    }

    fn sock(&self) -> PathBuf {
        self.dir.path().join("tmux.sock")
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("-S")
            .arg(self.sock())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows now (empty once the TUI has quit and its tmux server with it).
    pub fn pane(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "oc"])
    }

    /// Types `keys` as tmux names them (`C-c`, `Escape`, `Enter`, or plain text).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "oc"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Whether the opencode process in the pane still runs (a zombie nobody reaped yet, once
    /// tmux is gone, does not).
    pub fn running(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|s| Some(s[s.rfind(')')? + 1..].split_whitespace().next()? != "Z"))
            .unwrap_or(false)
    }

    /// Waits (at most `secs`) for the opencode process to end; panics with the pane otherwise.
    pub fn wait_gone(&self, secs: u64) {
        let t0 = Instant::now();
        while self.running() {
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "the TUI (pid {}) still runs after {secs} s:\n{}",
                self.pid,
                self.pane()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (at most `secs`) until the pane shows `needle`; returns the pane.
    pub fn wait_pane(&self, needle: &str, secs: u64) -> String {
        let t0 = Instant::now();
        loop {
            let p = self.pane();
            if p.contains(needle) {
                return p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs),
                "the TUI does not show {needle:?} after {secs} s:\n{p}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
        // the TUI takes a few seconds to close its reply on the hangup: wait, so that it does
        // not write into a HOME being removed, then make sure
        let t0 = Instant::now();
        while self.running() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if self.running() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
        }
    }
}
