//! Real Claude Code and Codex CLI sessions offline: the agents as npm installs them (pinned in
//! `tests/setup`), each in a private HOME, talking to the scripted fake model of
//! `agents_model.py` (the Anthropic Messages stream for Claude Code, the OpenAI Responses
//! stream for Codex), with every tool call really executed in a throw-away git project.

use super::ocsim::support_dir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The versions the tests pin (`tests/setup` installs them).
pub const CLAUDE_CODE_VERSION: &str = "2.1.332";
pub const CODEX_VERSION: &str = "0.171.0";

/// A model slug Codex does not know (`codex exec -m`): it then offers its `multi_agent_v1` tools
/// (spawn_agent, wait_agent), which it does not offer for the slug of the config, and no
/// apply_patch.
pub const CODEX_SUBAGENT_MODEL: &str = "gpt-5-sim";

/// The scripted model server, with the folder its scripts are read from.
pub struct AgentModel {
    dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

impl AgentModel {
    pub fn start() -> AgentModel {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
        let port_file = dir.path().join("port");
        let child = Command::new("python3")
            .arg(support_dir().join("agents_model.py"))
            .args(["--port", "0", "--port-file"])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 agents_model.py");
        let t0 = Instant::now();
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break p;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the agents' fake model did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        AgentModel { dir, port, child }
    }

    /// Writes the script `name` (a list of steps, see `agents_model.py`).
    pub fn script(&self, name: &str, steps: &Value) {
        std::fs::write(
            self.dir.path().join("scripts").join(format!("{name}.json")),
            steps.to_string(),
        )
        .unwrap();
    }

    /// Runs `claude -p "SCRIPT:<script> ..."` in `proj` with `home` as its HOME, to its end.
    pub fn claude(&self, home: &Path, proj: &Path, script: &str) -> std::process::Output {
        let out = self
            .claude_cmd(home, proj, script)
            .output()
            .expect("claude (npm i -g @anthropic-ai/claude-code; tests/setup installs it)");
        assert!(out.status.success(), "claude -p: {}", story(&out));
        out
    }

    /// The `claude -p` command [`AgentModel::claude`] runs, to run it otherwise.
    pub fn claude_cmd(&self, home: &Path, proj: &Path, script: &str) -> Command {
        let mut c = agent_env(Command::new("claude"), home, proj);
        c.env(
            "ANTHROPIC_BASE_URL",
            format!("http://127.0.0.1:{}", self.port),
        )
        .env("ANTHROPIC_API_KEY", "sim")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        // --dangerously-skip-permissions refuses to start as root without it
        .env("IS_SANDBOX", "1")
        .args(["-p", &format!("SCRIPT:{script} fix the tests")])
        .arg("--dangerously-skip-permissions")
        .stdin(Stdio::null());
        c
    }

    /// Runs `codex exec "SCRIPT:<script> ..."` in `proj` with `home` as its HOME (its config
    /// pointing at this model), to its end.
    pub fn codex(&self, home: &Path, proj: &Path, script: &str) -> std::process::Output {
        let out = self
            .codex_cmd(home, proj, script)
            .output()
            .expect("codex (npm i -g @openai/codex; tests/setup installs it)");
        assert!(out.status.success(), "codex exec: {}", story(&out));
        out
    }

    /// The `codex exec` command [`AgentModel::codex`] runs (its config written), to run it
    /// otherwise.
    pub fn codex_cmd(&self, home: &Path, proj: &Path, script: &str) -> Command {
        let mut c = self.codex_with(home, proj);
        c.args(["exec", "--json", &format!("SCRIPT:{script} fix the tests")]);
        c
    }

    /// `codex` in `proj` with `home` as its HOME and its config pointing at this model, the
    /// arguments left to the caller (`codex exec resume ...`, `codex app-server daemon ...`).
    pub fn codex_with(&self, home: &Path, proj: &Path) -> Command {
        let conf = home.join(".codex");
        std::fs::create_dir_all(&conf).unwrap();
        // a model slug Codex knows, so that it offers its apply_patch tool
        std::fs::write(
            conf.join("config.toml"),
            format!(
                "model = \"gpt-5.5\"\nmodel_provider = \"sim\"\napproval_policy = \"never\"\n\
                 sandbox_mode = \"danger-full-access\"\ncheck_for_update_on_startup = false\n\
                 [model_providers.sim]\nname = \"Sim\"\nbase_url = \"http://127.0.0.1:{}/v1\"\n\
                 env_key = \"SIM_API_KEY\"\nwire_api = \"responses\"\n",
                self.port
            ),
        )
        .unwrap();
        let mut c = agent_env(Command::new("codex"), home, proj);
        c.env("SIM_API_KEY", "sim").stdin(Stdio::null());
        c
    }
}

impl Drop for AgentModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent_env(mut c: Command, home: &Path, proj: &Path) -> Command {
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("PWD", proj)
        .current_dir(proj);
    c
}

fn story(out: &std::process::Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A git project at `dir` whose test fails (`mean([])` divides by zero) until `src/calc.py`
/// is fixed.
pub fn make_project(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("src/calc.py"),
        "def mean(xs):\n    return sum(xs) / len(xs)\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("tests/test_calc.py"),
        "import sys\nsys.path.insert(0, \"src\")\nfrom calc import mean\n\
         assert mean([]) == 0, \"mean of empty list\"\nprint(\"all tests passed\")\n",
    )
    .unwrap();
    for args in [
        &["init", "-q", "."][..],
        &["add", "-A"],
        &[
            "-c",
            "user.email=sim@example.invalid",
            "-c",
            "user.name=sim",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let st = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    }
    dir.to_path_buf()
}
