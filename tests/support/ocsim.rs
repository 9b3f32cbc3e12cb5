//! A real `opencode serve` (npm `opencode-ai`, pinned by `.ci/run`) in a temp HOME and project,
//! talking to the scripted fake model (`fake_model.py`, which speaks the OpenAI protocol over
//! real HTTP). Scenarios are the scripts in `scenarios.py`.

use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub struct Sim {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub proj: PathBuf,
    pub url: String,
    pub port: u16,
    pub fake_port: u16,
    oc: Option<Child>,
    fake: Option<Child>,
}

/// What a scenario left behind.
#[derive(Debug, Clone)]
pub struct Ran {
    pub id: String,
    pub children: Vec<String>,
}

#[derive(Default, Clone)]
pub struct Opts {
    pub title: Option<String>,
    pub agent: Option<String>,
    pub model: Option<(String, String)>,
    /// Further scripts sent as later prompts of the same session.
    pub then: Vec<String>,
    /// Compact (POST /summarize) before each later prompt.
    pub summarize_between: bool,
    /// Abort once this much time has passed and a tool is running.
    pub abort_after: Option<Duration>,
}

pub fn support_dir() -> PathBuf {
    super::repo().join("tests/support")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The scripted fake model on its own (for `opencode run`, which needs no server).
pub struct Fake {
    _dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl Fake {
    pub fn start() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("fake.port");
        let child = Command::new("python3")
            .arg(support_dir().join("fake_model.py"))
            .args(["--port", "0", "--port-file"])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 fake_model.py");
        let t0 = Instant::now();
        let port = loop {
            if let Ok(s) = std::fs::read_to_string(&port_file) {
                if let Ok(p) = s.trim().parse() {
                    break p;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "fake model did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Fake {
            _dir: dir,
            port,
            child,
        }
    }

    /// Writes opencode's config for this fake model into `home` (`~/.config/opencode`).
    pub fn configure(&self, home: &Path) {
        std::fs::create_dir_all(home.join(".config/opencode")).unwrap();
        std::fs::write(
            home.join(".config/opencode/opencode.json"),
            serde_json::to_string_pretty(&opencode_config(self.port)).unwrap(),
        )
        .unwrap();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes a scenario project (a git repo with the files the scripts read) at `dir`.
pub fn make_project(dir: &Path) {
    let st = Command::new("python3")
        .arg(support_dir().join("scenarios.py"))
        .arg("make-project")
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success(), "make-project failed");
}

/// An `opencode` command (`run`, `serve`, `export`...) working in `proj` with `home` as its
/// HOME and XDG dirs, offline.
pub fn opencode(home: &Path, proj: &Path) -> Command {
    let mut c = Command::new(std::env::var("OPENCODE_BIN").unwrap_or_else(|_| "opencode".into()));
    // opencode takes its project from $PWD, not from the working directory
    c.current_dir(proj)
        .env("PWD", proj)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env_remove("OPENCODE_SERVER_PASSWORD");
    c
}

/// A free loopback port (for a server nobody configured).
pub fn random_port() -> u16 {
    free_port()
}

fn opencode_config(fake_port: u16) -> Value {
    let model = json!({"name": "Sim Model", "tool_call": true, "attachment": false, "reasoning": false,
                       "temperature": true, "limit": {"context": 200000, "output": 8192},
                       "cost": {"input": 1.0, "output": 2.0}});
    json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "sim/sim-model", "small_model": "sim/sim-model", "enabled_providers": ["sim"],
        "autoupdate": false, "share": "disabled", "lsp": false, "formatter": false,
        "permission": {"*": "allow", "external_directory": "allow", "doom_loop": "allow", "question": "deny"},
        "agent": {"asker": {"description": "build-like agent that asks before bash", "mode": "primary",
                            "permission": {"bash": "ask"}}},
        "provider": {"sim": {"npm": "@ai-sdk/openai-compatible", "name": "Sim (scripted)",
            "options": {"baseURL": format!("http://127.0.0.1:{fake_port}/v1"), "apiKey": "sim-key"},
            "models": {"sim-model": model.clone(), "gpt-5-sim": model}}}
    })
}

pub fn http(method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(60))
        .build();
    let req = agent.request(method, url);
    let res = match body {
        Some(b) => req.send_json(b),
        None => req.call(),
    };
    match res {
        Ok(r) => {
            let code = r.status();
            let text = r.into_string().unwrap_or_default();
            (code, serde_json::from_str(&text).unwrap_or(Value::Null))
        }
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            (
                code,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        }
        Err(e) => panic!("{method} {url}: {e}"),
    }
}

/// `opencode serve` on `port` for this HOME and project, its log to `log`.
fn serve(home: &Path, proj: &Path, port: u16, log: &Path) -> Child {
    Command::new(std::env::var("OPENCODE_BIN").unwrap_or_else(|_| "opencode".into()))
        .args([
            "serve",
            "--hostname",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--print-logs",
        ])
        .current_dir(proj)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env_remove("OPENCODE_SERVER_PASSWORD")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("opencode serve (npm install -g opencode-ai@1.18.33)")
}

impl Sim {
    /// Starts a fresh opencode server and fake model.
    pub fn start() -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let proj = dir.path().join("proj");
        for d in [".config/opencode", ".local/share", ".local/state", ".cache"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        let st = Command::new("python3")
            .arg(support_dir().join("scenarios.py"))
            .arg("make-project")
            .arg(&proj)
            .status()
            .unwrap();
        assert!(st.success(), "make-project failed");
        Sim::launch(dir, home, proj)
    }

    /// Starts opencode again on the HOME (and its sibling project) of an earlier, stopped Sim.
    pub fn start_in(home: PathBuf) -> Sim {
        let proj = home.parent().unwrap().join("proj");
        Sim::launch(tempfile::tempdir().unwrap(), home, proj)
    }

    fn launch(dir: tempfile::TempDir, home: PathBuf, proj: PathBuf) -> Sim {
        let port_file = dir.path().join("fake.port");
        let fake = Command::new("python3")
            .arg(support_dir().join("fake_model.py"))
            .args(["--port", "0", "--port-file"])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("fake.log")).unwrap())
            .spawn()
            .expect("python3 fake_model.py");
        let t0 = Instant::now();
        let fake_port: u16 = loop {
            if let Ok(s) = std::fs::read_to_string(&port_file) {
                break s.trim().parse().unwrap();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "fake model did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        std::fs::write(
            home.join(".config/opencode/opencode.json"),
            serde_json::to_string_pretty(&opencode_config(fake_port)).unwrap(),
        )
        .unwrap();
        let port = free_port();
        let oc = serve(&home, &proj, port, &dir.path().join("serve.log"));
        // If the test process dies without dropping us, take the servers down with it.
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {me} 2>/dev/null; do sleep 1; done; kill -INT {oc} 2>/dev/null; kill {fk} 2>/dev/null; sleep 5; kill -9 {oc} 2>/dev/null",
                me = std::process::id(),
                oc = oc.id(),
                fk = fake.id()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let sim = Sim {
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
            home,
            proj,
            port,
            fake_port,
            oc: Some(oc),
            fake: Some(fake),
        };
        sim.wait_healthy();
        sim
    }

    /// One server for the whole test binary (scenarios are independent sessions).
    pub fn shared() -> &'static Sim {
        static SIM: OnceLock<Sim> = OnceLock::new();
        SIM.get_or_init(Sim::start)
    }

    fn wait_healthy(&self) {
        let t0 = Instant::now();
        loop {
            let ok = ureq::get(&format!("{}/global/health", self.url))
                .timeout(Duration::from_secs(2))
                .call()
                .is_ok();
            if ok {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "opencode serve did not become healthy; see {}",
                self.log_path().display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Makes a generated script available to the fake model as `SCRIPT:<name>`.
    pub fn add_script(&self, name: &str, steps: &Value) {
        let dir = self._dir.path().join("scripts");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.json")), steps.to_string()).unwrap();
    }

    pub fn log_path(&self) -> PathBuf {
        self._dir.path().join("serve.log")
    }

    pub fn db_path(&self) -> PathBuf {
        self.home.join(".local/share/opencode/opencode.db")
    }

    pub fn get(&self, path: &str) -> Value {
        let (code, v) = http("GET", &format!("{}{}", self.url, path), None);
        assert_eq!(code, 200, "GET {path}: {v}");
        v
    }

    pub fn run(&self, script: &str) -> Ran {
        self.run_with(script, Opts::default())
    }

    /// Creates a session, prompts it with the script, waits until it is idle again.
    pub fn run_with(&self, script: &str, o: Opts) -> Ran {
        let body = match &o.title {
            Some(t) => json!({ "title": t }),
            None => json!({}),
        };
        let (code, ses) = http("POST", &format!("{}/session", self.url), Some(&body));
        assert_eq!(code, 200, "create session: {ses}");
        let id = ses["id"].as_str().unwrap().to_string();
        let mut scripts = vec![script.to_string()];
        scripts.extend(o.then.iter().cloned());
        for (i, s) in scripts.iter().enumerate() {
            if i > 0 && o.summarize_between {
                let (code, v) = http(
                    "POST",
                    &format!("{}/session/{id}/summarize", self.url),
                    Some(&json!({"providerID": "sim", "modelID": "sim-model"})),
                );
                assert!(code < 300, "summarize: {code} {v}");
                self.wait_idle(&id, None);
            }
            self.prompt(&id, s, &o);
            self.wait_idle(&id, if i == 0 { o.abort_after } else { None });
        }
        let kids = self.get(&format!("/session/{id}/children"));
        let children = kids
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["id"].as_str().unwrap().to_string())
            .collect();
        Ran { id, children }
    }

    pub fn prompt(&self, id: &str, script: &str, o: &Opts) {
        let mut body = json!({"parts": [{"type": "text", "text": format!("SCRIPT:{script} go")}]});
        if let Some(a) = &o.agent {
            body["agent"] = json!(a);
        }
        if let Some((p, m)) = &o.model {
            body["model"] = json!({"providerID": p, "modelID": m});
        }
        let (code, v) = http(
            "POST",
            &format!("{}/session/{id}/prompt_async", self.url),
            Some(&body),
        );
        assert!(code < 300, "prompt_async: {code} {v}");
    }

    /// Waits until the session has been busy and is idle again (or 5 s passed without busy).
    pub fn wait_idle(&self, id: &str, abort_after: Option<Duration>) {
        let t0 = Instant::now();
        let mut seen_busy = false;
        let mut aborted = false;
        loop {
            std::thread::sleep(Duration::from_millis(150));
            let st = self.get("/session/status");
            let busy = st.get(id).is_some();
            seen_busy |= busy;
            if let Some(after) = abort_after {
                if !aborted && t0.elapsed() > after && self.has_running_tool(id) {
                    http("POST", &format!("{}/session/{id}/abort", self.url), None);
                    aborted = true;
                }
            }
            if !busy && (seen_busy || t0.elapsed() > Duration::from_secs(5)) {
                // parts may lag the status by a moment
                std::thread::sleep(Duration::from_millis(400));
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "session {id} still busy after 10 minutes"
            );
        }
    }

    fn has_running_tool(&self, id: &str) -> bool {
        let msgs = self.get(&format!("/session/{id}/message"));
        msgs.as_array().into_iter().flatten().any(|m| {
            m["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["type"] == "tool" && p["state"]["status"] == "running")
        })
    }

    pub fn delete(&self, id: &str) {
        let (code, v) = http("DELETE", &format!("{}/session/{id}", self.url), None);
        assert!(code < 300, "delete {id}: {code} {v}");
    }

    pub fn stop(&mut self) {
        self.stop_server();
        if let Some(mut f) = self.fake.take() {
            let _ = f.kill();
            let _ = f.wait();
        }
    }

    /// Stops `opencode serve` only: the fake model still answers an `opencode run`, and only
    /// the database tells about its sessions.
    pub fn stop_server(&mut self) {
        if let Some(mut oc) = self.oc.take() {
            // opencode serve ignores SIGTERM while busy; SIGINT stops it.
            let _ = Command::new("kill")
                .args(["-INT", &oc.id().to_string()])
                .status();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) {
                if oc.try_wait().ok().flatten().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = oc.kill();
            let _ = oc.wait();
        }
    }

    /// Stops `opencode serve` and starts it again on the same port, HOME and database (its
    /// event streams end; what it holds only in memory, such as session statuses, is gone).
    pub fn restart_server(&mut self) {
        self.stop_server();
        self.oc = Some(serve(
            &self.home,
            &self.proj,
            self.port,
            &self._dir.path().join("serve-again.log"),
        ));
        self.wait_healthy();
    }

    pub fn proj(&self) -> &Path {
        &self.proj
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}
