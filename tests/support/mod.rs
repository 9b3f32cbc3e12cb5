//! Test helpers: commands run with a cleared environment and temp HOME/XDG dirs, a harness that
//! prints command, status, stdout and stderr when an expectation fails, and (in `ocsim`) a real
//! `opencode serve` driven by the scripted fake model.
#![allow(dead_code)]

pub mod agents;
pub mod desktop;
pub mod ocsim;
pub mod secrets;
pub mod stub;
pub mod tui;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A temp HOME with XDG dirs inside it.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    /// A fresh HOME, removed when dropped, unless `OC_TEST_KEEP` is set (to look into a
    /// failure: the failing test's messages name the paths).
    pub fn new() -> Home {
        let dir = tempfile::Builder::new()
            .disable_cleanup(std::env::var_os("OC_TEST_KEEP").is_some())
            .tempdir()
            .unwrap();
        for d in [".config", ".local/share", ".local/state", ".cache"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Home { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn join(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    /// A command of this crate with a clean environment pointing at this HOME.
    pub fn cmd(&self, bin: &str) -> Cmd {
        Cmd::new(bin, self.path())
    }
}

/// `prog` as a user who installed the watchdog into `home` runs it: a cleared environment but
/// for HOME, the XDG directories under it, and PATH with `~/.local/bin` first.
pub fn installed_cmd(prog: &str, home: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(prog);
    c.env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                home.join(".local/bin").display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"));
    c
}

pub struct Cmd {
    inner: std::process::Command,
    shown: String,
    stdin: Option<Vec<u8>>,
}

impl Cmd {
    pub fn new(bin: &str, home: &Path) -> Cmd {
        let exe = assert_cmd::cargo::cargo_bin(bin);
        let mut c = std::process::Command::new(exe);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_STATE_HOME", home.join(".local/state"))
            .env("XDG_CACHE_HOME", home.join(".cache"));
        for k in ["DBUS_SESSION_BUS_ADDRESS", "DISPLAY"] {
            if let Some(v) = std::env::var_os(k) {
                c.env(k, v);
            }
        }
        Cmd {
            inner: c,
            shown: bin.to_string(),
            stdin: None,
        }
    }
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<str>>(mut self, args: I) -> Cmd {
        for a in args {
            self.shown.push(' ');
            self.shown.push_str(a.as_ref());
            self.inner.arg(a.as_ref());
        }
        self
    }
    pub fn env(mut self, k: &str, v: impl AsRef<std::ffi::OsStr>) -> Cmd {
        self.inner.env(k, v);
        self
    }
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Cmd {
        self.stdin = Some(data.into());
        self
    }
    /// Starts it with stdin, stdout and stderr piped, for a test that talks to it as it runs.
    pub fn spawn(mut self) -> std::process::Child {
        use std::process::Stdio;
        self.inner
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    }
    /// Starts it reading `stdin` (another command's stdout, for a pipeline), stdout piped,
    /// stderr where given.
    pub fn spawn_from(
        mut self,
        stdin: std::process::Stdio,
        stderr: std::fs::File,
    ) -> std::process::Child {
        self.inner
            .stdin(stdin)
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn")
    }
    /// Starts it reading `stdin` (another command's stdout, for a pipeline), stdout and stderr
    /// piped.
    pub fn spawn_reading(mut self, stdin: std::process::Stdio) -> std::process::Child {
        use std::process::Stdio;
        self.inner
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
    }
    pub fn run(mut self) -> Run {
        use std::io::Write;
        use std::process::Stdio;
        self.inner
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = self.inner.spawn().expect("spawn");
        let input = self.stdin.take().unwrap_or_default();
        let mut sin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let _ = sin.write_all(&input);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        Run {
            shown: self.shown,
            out,
        }
    }
}

/// A finished command. Its checks panic with the whole story.
pub struct Run {
    pub shown: String,
    pub out: Output,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    pub fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    pub fn story(&self) -> String {
        format!(
            "command: {}\nstatus: {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.shown,
            self.out.status,
            self.stdout(),
            self.stderr()
        )
    }
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code(),
            code,
            "unexpected exit status\n{}",
            self.story()
        );
        self
    }
    #[track_caller]
    pub fn ok(&self) -> &Run {
        self.expect_code(0)
    }
    /// stdout parsed as JSON Lines.
    #[track_caller]
    pub fn records(&self) -> Vec<Value> {
        self.stdout()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("bad JSONL line {l:?}: {e}\n{}", self.story()))
            })
            .collect()
    }
    pub fn kind(&self, kind: &str) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| r["kind"] == kind)
            .collect()
    }
}

/// `deploy/install ARGS` for a user whose HOME is `home`, with nothing else of this
/// environment; what it said on stderr. It must succeed.
pub fn deploy_install(home: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(repo().join("deploy/install"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", home)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "deploy/install {args:?}: {said}");
    said
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
