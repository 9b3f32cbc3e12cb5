//! The figures of issue 27 for a pipeline that watches all the time: time to alert, cost while
//! idle, memory. Real opencode 1.18.33 driven by the scripted model (tests/support), real
//! SQLite, a real D-Bus session bus with dunst, the watchdog installed into a temp HOME as a
//! user has it (release binaries, default config). Prints figures; asserts none of them.
//!
//! The pipeline under test (FOLLOW_PIPELINE):
//! * `follow`: `oc-watchdog-follow` as its service runs it (the default once deploy/ has it);
//! * `timer`: the stand-in, the timer's tick in a tight loop:
//!   `sh -c 'while :; do oc-watchdog-tick; sleep 1; done'`.
//!
//! Every process of the pipeline carries `OCWD_BENCH=<tag>` in its environment, so its
//! processes are found in /proc however they were started (the tick's short-lived stages, the
//! click helpers). CPU is utime+stime+cutime+cstime summed over them (a reaped stage counts in
//! its parent). Memory is sampled every 2 s: each process's VmRSS, and the pipeline's total two
//! ways: the sum of VmRSS (which counts the pages processes share, the C library and the three
//! wd-store stages' one binary, once per process) and the sum of PSS (Pss in smaps_rollup: a
//! shared page split among those sharing it, so the sum is what the pipeline holds).
//!
//! Phases, in this order:
//! 1. time to alert: FOLLOW_LOOPS (20) `opencode run` sessions looping (`slow_reread40`), in waves of
//!    FOLLOW_WAVE (5) at once, then one session of an `opencode serve`. t0 = the first commit in
//!    opencode's database of the call the batch verdict names as `first_flag` (its part row's
//!    time_created; its last update, time_updated, shown too), t1 = the first `Notify` naming
//!    the session on the bus (dbus-monitor's timestamp). A run is stopped once its trigger is
//!    seen. The same figures for the sessions of phase 2.
//! 2. cost with FOLLOW_BUSY (20) `opencode run` sessions looping at once, over FOLLOW_BUSY_SECS (20).
//! 3. memory: FOLLOW_MEM_SESSIONS (200) sessions coming and going over FOLLOW_MEM_SECS (90): the rows
//!    of a real looping session from phase 1, written step by step with new ids and times, each
//!    step in its own transaction as opencode does (no opencode process runs them: the hour is
//!    compressed, and they end as sessions whose process is gone).
//! 4. cost while idle: FOLLOW_IDLE_SECS (600), opencode serve idle, the database holding
//!    FOLLOW_IDLE_SESSIONS (2,000) old sessions of FOLLOW_IDLE_CALLS (50) calls each (real rows of a
//!    real `healthy` session, cloned with new ids, added just before) besides everything above.
//!
//! 5. time to alert for the other agents (issue 39): FOLLOW_AGENT_LOOPS (10) looping `claude -p`
//!    sessions and as many looping `codex exec` sessions (the real Claude Code and Codex CLI that
//!    tests/setup installs, driven by the scripted model of tests/support/agents.rs, each one
//!    running the failing test again and again), FOLLOW_AGENT_WAVE (2) of one agent at once, each
//!    in a project of its own, with the temp HOME as its HOME (its transcript where the watchdog
//!    reads it) and a TMPDIR inside it. t0 = the time of the batch verdict's `first_flag` call (its
//!    `t`: the agent's own transcript timestamp of that call), t1 = the first `Notify` naming the
//!    session on the bus; also the calls its transcript holds after the flag call, up to t1. A run
//!    is stopped (its process group killed) once its trigger is seen, else after 180 s. The
//!    agents' homes (~/.claude, ~/.codex) are made only when an agent's first loop starts, after
//!    the pipeline: as for a user who installs the agent after the watchdog, so an agent's first
//!    wave also shows how long a new agent home takes to be found.
//!
//! FOLLOW_PHASES picks phases (default `1234`; 5 takes minutes of two agents starting, so it runs
//! only when asked); `3` alone runs one looping `opencode run` to clone and then the memory
//! phase, so that an hour of it can be measured as an hour.
//!
//! ```text
//! cargo bench --bench follow
//! FOLLOW_LOOPS=5 FOLLOW_IDLE_SECS=60 FOLLOW_MEM_SESSIONS=40 cargo bench --bench follow
//! FOLLOW_PHASES=3 FOLLOW_MEM_SECS=3600 cargo bench --bench follow     # an hour of memory
//! FOLLOW_PHASES=5 FOLLOW_AGENT_LOOPS=8 cargo bench --bench follow     # Claude Code and Codex
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use rusqlite::{params, Connection, OpenFlags};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::agents::AgentModel;
use support::desktop::Desktop;
use support::{ocsim, Home};

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Settings {
    loops: u64,
    wave: u64,
    busy: u64,
    busy_secs: u64,
    mem_sessions: u64,
    mem_secs: u64,
    mem_steps: u64,
    idle_secs: u64,
    idle_sessions: u64,
    idle_calls: u64,
    agent_loops: u64,
    agent_wave: u64,
    follow: bool,
    /// The phases to run, by number.
    phases: String,
}

impl Settings {
    fn from_env() -> Settings {
        let follow = match std::env::var("FOLLOW_PIPELINE").as_deref() {
            Ok("follow") => true,
            Ok("timer") => false,
            Ok(other) => panic!("FOLLOW_PIPELINE={other:?}: follow or timer"),
            Err(_) => support::repo().join("deploy/oc-watchdog-follow").exists(),
        };
        Settings {
            loops: env_num("FOLLOW_LOOPS", 20),
            wave: env_num("FOLLOW_WAVE", 5).max(1),
            busy: env_num("FOLLOW_BUSY", 20),
            busy_secs: env_num("FOLLOW_BUSY_SECS", 20),
            mem_sessions: env_num("FOLLOW_MEM_SESSIONS", 200),
            mem_secs: env_num("FOLLOW_MEM_SECS", 90),
            mem_steps: env_num("FOLLOW_MEM_STEPS", 16),
            idle_secs: env_num("FOLLOW_IDLE_SECS", 600),
            idle_sessions: env_num("FOLLOW_IDLE_SESSIONS", 2_000),
            idle_calls: env_num("FOLLOW_IDLE_CALLS", 50),
            agent_loops: env_num("FOLLOW_AGENT_LOOPS", 10),
            agent_wave: env_num("FOLLOW_AGENT_WAVE", 2).max(1),
            follow,
            phases: std::env::var("FOLLOW_PHASES").unwrap_or_else(|_| "1234".into()),
        }
    }

    fn print(&self) {
        for (k, v) in [
            ("FOLLOW_LOOPS", self.loops),
            ("FOLLOW_WAVE", self.wave),
            ("FOLLOW_BUSY", self.busy),
            ("FOLLOW_BUSY_SECS", self.busy_secs),
            ("FOLLOW_MEM_SESSIONS", self.mem_sessions),
            ("FOLLOW_MEM_SECS", self.mem_secs),
            ("FOLLOW_MEM_STEPS", self.mem_steps),
            ("FOLLOW_IDLE_SECS", self.idle_secs),
            ("FOLLOW_IDLE_SESSIONS", self.idle_sessions),
            ("FOLLOW_IDLE_CALLS", self.idle_calls),
            ("FOLLOW_AGENT_LOOPS", self.agent_loops),
            ("FOLLOW_AGENT_WAVE", self.agent_wave),
        ] {
            println!("  {k}={v}");
        }
        println!(
            "  FOLLOW_PIPELINE={}",
            if self.follow { "follow" } else { "timer" }
        );
        println!("  FOLLOW_PHASES={}", self.phases);
    }

    fn runs(&self, phase: char) -> bool {
        self.phases.contains(phase)
    }
}

// ---- processes of the pipeline ------------------------------------------------------------------

/// One process of the pipeline as /proc shows it now.
struct Proc {
    pid: u32,
    label: String,
    /// utime + stime + cutime + cstime, in clock ticks.
    cpu: u64,
    rss_kib: u64,
    /// Pss of smaps_rollup: its share of the pages it shares.
    pss_kib: u64,
    /// RssAnon: its heap, stacks and written data, apart from the pages of files it maps.
    anon_kib: u64,
}

/// Every live process whose environment holds `OCWD_BENCH=<tag>`.
fn pipeline_procs(tag: &str) -> Vec<Proc> {
    let mark = format!("OCWD_BENCH={tag}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let p = e.path();
        let Ok(environ) = std::fs::read(p.join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
            continue;
        }
        let (Ok(stat), Ok(status), Ok(cmdline)) = (
            std::fs::read_to_string(p.join("stat")),
            std::fs::read_to_string(p.join("status")),
            std::fs::read(p.join("cmdline")),
        ) else {
            continue;
        };
        // fields after the command name: state is field 3, utime 14 .. cstime 17
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if cmdline.is_empty() {
            // a zombie: its time is its parent's once reaped
            continue;
        }
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let cpu = num(11) + num(12) + num(13) + num(14);
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let (rss_kib, anon_kib) = (field("VmRSS:"), field("RssAnon:"));
        let pss_kib = std::fs::read_to_string(p.join("smaps_rollup"))
            .ok()
            .and_then(|r| {
                r.lines()
                    .find_map(|l| l.strip_prefix("Pss:"))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0);
        out.push(Proc {
            pid,
            label: label(&cmdline),
            cpu,
            rss_kib,
            pss_kib,
            anon_kib,
        });
    }
    out
}

/// `wd-store tick --follow` from a command line: the program's base name and its arguments.
fn label(cmdline: &[u8]) -> String {
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let Some((prog, rest)) = args.split_first() else {
        return "?".into();
    };
    let prog = prog.rsplit('/').next().unwrap_or(prog);
    // what names the stage: paths by their base name, flags, subcommands; values as `…`, so
    // one stage of every tick gets one label whatever its `--since` and `--also`
    let mut l = vec![prog.to_string()];
    for a in rest {
        let word = if a.starts_with('/') {
            a.rsplit('/').next().unwrap_or(a).to_string()
        } else if a.starts_with('-') || a.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            a.clone()
        } else {
            "…".into()
        };
        if !(word == "…" && l.last().is_some_and(|w| w == "…")) {
            l.push(word);
        }
    }
    l.join(" ")
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The pipeline's CPU so far (clock ticks) and how many processes it has now.
fn cpu_now(tag: &str) -> (u64, usize) {
    let ps = pipeline_procs(tag);
    (ps.iter().map(|p| p.cpu).sum(), ps.len())
}

/// A memory cgroup of its own for the pipeline, when this machine lets us make one: what it
/// charges is what systemd counts for a service (the `Memory:` of `systemctl status`): each page
/// once, its heap and the page cache it brought in, however many processes share them.
struct MemCgroup {
    dir: PathBuf,
    /// cgroup v2 names (memory.current; anon and file in memory.stat), else v1's.
    v2: bool,
}

impl MemCgroup {
    fn make(tag: &str) -> Option<MemCgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let v2 = std::fs::read_to_string(root.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"));
        let dir = if v2 {
            root.to_path_buf()
        } else {
            root.join("memory")
        }
        .join(format!("ocwd-bench-{tag}"));
        std::fs::create_dir(&dir).ok()?;
        Some(MemCgroup { dir, v2 })
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// What it charges now and the anonymous part of it, in KiB.
    fn read(&self) -> (u64, u64) {
        let num = |f: &str| {
            std::fs::read_to_string(self.dir.join(f))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).unwrap_or_default();
        let key = if self.v2 { "anon " } else { "total_rss " };
        let anon = stat
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let all = num(if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        });
        (all / 1024, anon / 1024)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // the click helpers it started may take a moment to end after their SIGTERM
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove the cgroup {}", self.dir.display());
    }
}

/// One sample: seconds since the start, and each process's pid, label, RSS, PSS and RssAnon
/// (KiB).
/// And the pipeline's cgroup's charge and its anonymous part (KiB), when it has one.
type Sample = (f64, Vec<(u32, String, u64, u64, u64)>, Option<(u64, u64)>);

/// RSS samples of the pipeline, every 2 s, and named points in time to read them at.
struct Sampler {
    t0: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    marks: Vec<(String, f64)>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(tag: &str, cgroup: Option<Arc<MemCgroup>>) -> Sampler {
        let t0 = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, tag) = (samples.clone(), stop.clone(), tag.to_string());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let ps = pipeline_procs(&tag)
                    .into_iter()
                    .map(|p| (p.pid, p.label, p.rss_kib, p.pss_kib, p.anon_kib))
                    .collect();
                let cg = cgroup.as_ref().map(|c| c.read());
                s.lock().unwrap().push((t0.elapsed().as_secs_f64(), ps, cg));
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        Sampler {
            t0,
            samples,
            marks: Vec::new(),
            stop,
            thread: Some(thread),
        }
    }

    fn mark(&mut self, name: &str) {
        self.marks
            .push((name.to_string(), self.t0.elapsed().as_secs_f64()));
    }

    /// A table: each process (by its command), its largest RSS in each window that ends at a
    /// mark, in MiB (`xN` when N processes shared the command), and the pipeline's total.
    fn print(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let samples = self.samples.lock().unwrap();
        let mut rows: BTreeMap<String, Vec<(u64, usize)>> = BTreeMap::new();
        let mut totals = vec![0u64; self.marks.len()];
        let mut pss = vec![0u64; self.marks.len()];
        let mut anon = vec![0u64; self.marks.len()];
        let (mut cg_all, mut cg_anon) =
            (vec![None; self.marks.len()], vec![None; self.marks.len()]);
        let mut anon_rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        let mut from = 0.0;
        for (w, (_, until)) in self.marks.iter().enumerate() {
            for (_, ps, cg) in samples.iter().filter(|(t, _, _)| *t > from && *t <= *until) {
                if let Some((all, an)) = cg {
                    cg_all[w] = Some(cg_all[w].unwrap_or(0).max(*all));
                    cg_anon[w] = Some(cg_anon[w].unwrap_or(0).max(*an));
                }
                totals[w] = totals[w].max(ps.iter().map(|p| p.2).sum());
                pss[w] = pss[w].max(ps.iter().map(|p| p.3).sum());
                anon[w] = anon[w].max(ps.iter().map(|p| p.4).sum());
                for (_, l, _, _, a) in ps {
                    let row = anon_rows
                        .entry(l.to_string())
                        .or_insert_with(|| vec![0; self.marks.len()]);
                    row[w] = row[w].max(*a);
                }
                let mut by: HashMap<&str, (u64, usize)> = HashMap::new();
                for (_, l, rss, _, _) in ps {
                    let e = by.entry(l).or_default();
                    e.0 = e.0.max(*rss);
                    e.1 += 1;
                }
                for (l, (rss, n)) in by {
                    let row = rows
                        .entry(l.to_string())
                        .or_insert_with(|| vec![(0, 0); self.marks.len()]);
                    row[w].0 = row[w].0.max(rss);
                    row[w].1 = row[w].1.max(n);
                }
            }
            from = *until;
        }
        let mib = |k: u64| k as f64 / 1024.0;
        println!("  windows (each ends at its mark; largest VmRSS seen in it, MiB):");
        for (i, (name, t)) in self.marks.iter().enumerate() {
            println!("    [{i}] {name} (t={t:.0}s)");
        }
        print!("    {:<50}", "process");
        for i in 0..self.marks.len() {
            print!("{:>10}", format!("[{i}]"));
        }
        println!();
        for (l, cells) in &rows {
            print!("    {l:<50}");
            for (rss, n) in cells {
                let c = match n {
                    0 => "-".to_string(),
                    1 => format!("{:.1}", mib(*rss)),
                    n => format!("{:.1}x{n}", mib(*rss)),
                };
                print!("{c:>10}");
            }
            println!();
        }
        for (name, sums) in [
            ("pipeline total, sum of VmRSS (largest sample)", &totals),
            ("pipeline total, sum of PSS (largest sample)", &pss),
            ("pipeline total, sum of RssAnon (largest sample)", &anon),
        ] {
            print!("    {name:<50}");
            for t in sums {
                print!("{:>10}", format!("{:.1}", mib(*t)));
            }
            println!();
        }
        if cg_all.iter().any(Option::is_some) {
            for (name, row) in [
                ("pipeline's cgroup, charged (largest sample)", &cg_all),
                ("pipeline's cgroup, anonymous (largest sample)", &cg_anon),
            ] {
                print!("    {name:<50}");
                for v in row {
                    let c = v.map_or("-".to_string(), |k| format!("{:.1}", mib(k)));
                    print!("{c:>10}");
                }
                println!();
            }
        }
        println!(
            "  the same windows, largest RssAnon of each process (heap and written data), MiB:"
        );
        for (l, cells) in &anon_rows {
            print!("    {l:<50}");
            for a in cells {
                print!("{:>10}", format!("{:.1}", mib(*a)));
            }
            println!();
        }
    }
}

// ---- the machine: the watchdog installed into a temp HOME, a desktop, opencode ----------------

struct Machine {
    home: Home,
    desk: Desktop,
    monitor_log: PathBuf,
    /// Our dbus-monitor, started again when something outside ends it (seen: other sessions'
    /// cleanups on a shared machine), and how often that happened.
    monitor: Mutex<(Child, u32)>,
    tag: String,
    kids: Vec<Child>,
    pipeline: Option<Child>,
    /// The pipeline's own memory cgroup, when one could be made.
    cgroup: Option<Arc<MemCgroup>>,
}

impl Machine {
    fn install() -> Machine {
        let desk = Desktop::private();
        let home = Home::new();
        let monitor_log = home.join("notify.log");
        std::fs::File::create(&monitor_log).unwrap();
        let monitor = monitor(&desk.bus, &monitor_log);
        let m = Machine {
            tag: format!("{}-{}", std::process::id(), now_ms()),
            home,
            desk,
            monitor_log,
            monitor: Mutex::new((monitor, 0)),
            kids: Vec::new(),
            pipeline: None,
            cgroup: None,
        };
        let bins = Path::new(env!("CARGO_BIN_EXE_oc-sessions"))
            .parent()
            .unwrap()
            .to_path_buf();
        m.sh(&format!(
            "{} --from {} >/dev/null",
            support::repo().join("deploy/install").display(),
            bins.display()
        ));
        m
    }

    fn cmd(&self, prog: &str) -> Command {
        let h = self.home.path();
        let mut c = crate::support::installed_cmd(prog, h);
        c.env("DBUS_SESSION_BUS_ADDRESS", &self.desk.bus)
            .env("DISPLAY", &self.desk.display);
        c
    }

    /// Runs a shell command in the machine's environment; its stdout, or a panic with stderr.
    fn sh(&self, script: &str) -> String {
        let out = self.cmd("sh").args(["-c", script]).output().unwrap();
        assert!(
            out.status.success(),
            "{script}: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn db(&self) -> PathBuf {
        self.home.join(".local/share/opencode/opencode.db")
    }

    fn ro(&self) -> Connection {
        let c = Connection::open_with_flags(self.db(), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c
    }

    fn project(&self, name: &str) -> PathBuf {
        let p = self.home.join(&format!("work/{name}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        ocsim::make_project(&p);
        p
    }

    /// The pipeline's command line, as printed and as run.
    fn pipeline_command(&self, follow: bool) -> String {
        if !follow {
            return "sh -c 'while :; do oc-watchdog-tick; sleep 1; done'".into();
        }
        // as deploy/install installed it, else the repository's (finding ours on PATH)
        if self.home.join(".local/bin/oc-watchdog-follow").exists() {
            "oc-watchdog-follow".into()
        } else {
            support::repo()
                .join("deploy/oc-watchdog-follow")
                .display()
                .to_string()
        }
    }

    fn start_pipeline(&mut self, follow: bool) {
        let script = self.pipeline_command(follow);
        let log = std::fs::File::create(self.home.join("pipeline.log")).unwrap();
        // the follow script itself leads the process group (as systemd starts it), the stand-in
        // loop's shell leads its own
        let mut c = if follow {
            let exe = if script.contains('/') {
                PathBuf::from(&script)
            } else {
                self.home.join(".local/bin").join(&script)
            };
            self.cgroup = MemCgroup::make(&self.tag).map(Arc::new);
            match &self.cgroup {
                // the shell joins the cgroup and becomes the script, so every stage starts in it
                Some(cg) => {
                    let mut c = self.cmd("sh");
                    c.args(["-c", r#"echo $$ > "$1" && exec "$0""#])
                        .arg(&exe)
                        .arg(cg.procs());
                    c
                }
                None => self.cmd(exe.to_str().unwrap()),
            }
        } else {
            let mut c = self.cmd("sh");
            c.args(["-c", "while :; do oc-watchdog-tick; sleep 1; done"]);
            c
        };
        let child = c
            .env("OCWD_BENCH", &self.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.pipeline = Some(child);
    }

    fn stop_pipeline(&mut self) {
        if let Some(mut p) = self.pipeline.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &format!("-{}", p.id())])
                .status();
            let t0 = Instant::now();
            while p.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = p.kill();
            let _ = p.wait();
        }
        // what the pipeline started outside its group (click helpers), by pid
        for p in pipeline_procs(&self.tag) {
            let _ = Command::new("kill")
                .arg(p.pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// Every `Notify` on the bus so far: its time (ms) and its text.
    fn notifies(&self) -> Vec<(i64, String)> {
        let mut mon = self.monitor.lock().unwrap();
        if let Ok(Some(st)) = mon.0.try_wait() {
            mon.1 += 1;
            println!("    (dbus-monitor ended ({st}), from outside; started again: Notify calls meanwhile are missed)");
            mon.0 = monitor(&self.desk.bus, &self.monitor_log);
        }
        drop(mon);
        let text = std::fs::read_to_string(&self.monitor_log).unwrap_or_default();
        text.split("method call time=")
            .skip(1)
            .filter(|b| b.contains("member=Notify"))
            .filter_map(|b| {
                let t: f64 = b.split_whitespace().next()?.parse().ok()?;
                Some(((t * 1000.0) as i64, b.to_string()))
            })
            .collect()
    }

    /// The first `Notify` that names `session`.
    fn notified(&self, session: &str) -> Option<i64> {
        self.notifies()
            .into_iter()
            .filter(|(_, b)| b.contains(session))
            .map(|(t, _)| t)
            .min()
    }

    /// The newest session of `proj` created at `since` or later.
    fn session_of(&self, proj: &Path, since: i64) -> Option<String> {
        self.ro()
            .query_row(
                "SELECT id FROM session WHERE directory = ?1 AND time_created >= ?2
                 ORDER BY time_created DESC LIMIT 1",
                params![proj.to_str().unwrap(), since - 2_000],
                |r| r.get(0),
            )
            .ok()
    }

    fn tool_calls(&self, session: &str) -> i64 {
        self.ro()
            .query_row(
                "SELECT count(*) FROM part WHERE session_id = ?1 AND data LIKE '%\"type\":\"tool\"%'",
                [session],
                |r| r.get(0),
            )
            .unwrap_or(0)
    }

    /// The batch verdicts of every session active in the last `since`: session -> first_flag.
    fn first_flags(&self, since: &str) -> HashMap<String, Value> {
        let out = self.sh(&format!(
            "oc-sessions --since {since} | oc-calls | progress-detect"
        ));
        out.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "verdict" && !v["first_flag"].is_null())
            .map(|v| {
                (
                    v["session"].as_str().unwrap().to_string(),
                    v["first_flag"].clone(),
                )
            })
            .collect()
    }

    /// The start times (ms) of the calls of every session active in the last `since`, as
    /// `oc-calls` reads them (for Claude Code and Codex: their transcripts' timestamps).
    fn call_times(&self, since: &str) -> HashMap<String, Vec<i64>> {
        let out = self.sh(&format!("oc-sessions --since {since} | oc-calls"));
        let mut calls: HashMap<String, Vec<i64>> = HashMap::new();
        for v in out
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["kind"] == "call")
        {
            if let (Some(s), Some(t)) = (v["session"].as_str(), v["t"].as_i64()) {
                calls.entry(s.to_string()).or_default().push(t);
            }
        }
        calls
    }

    fn opencode_run(&self, proj: &Path, script: &str, name: &str) -> Child {
        ocsim::opencode(self.home.path(), proj)
            .args(["run", &format!("SCRIPT:{script} go")])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(self.home.join(&format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(self.home.join(&format!("{name}.err"))).unwrap())
            .spawn()
            .expect("opencode run")
    }
}

/// dbus-monitor of the `Notify` calls on `bus`, appending to `log` (its lines carry the time).
fn monitor(bus: &str, log: &Path) -> Child {
    Command::new("dbus-monitor")
        .arg("interface='org.freedesktop.Notifications',member='Notify'")
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .stdout(std::fs::OpenOptions::new().append(true).open(log).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("dbus-monitor")
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.stop_pipeline();
        if let Ok(mut mon) = self.monitor.lock() {
            let _ = mon.0.kill();
            let _ = mon.0.wait();
        }
        for k in &mut self.kids {
            // opencode serve ignores SIGTERM while busy; SIGINT stops it
            let _ = Command::new("kill")
                .args(["-INT", &k.id().to_string()])
                .status();
        }
        std::thread::sleep(Duration::from_millis(500));
        for k in &mut self.kids {
            let _ = k.kill();
            let _ = k.wait();
        }
    }
}

// ---- opencode's rows, cloned -------------------------------------------------------------------

/// One assistant step of a real session: its message and parts, their times moved to 0.
struct Step {
    message: Value,
    parts: Vec<Value>,
}

/// Adds `delta` to every number in every `time` object, at any depth.
fn shift_times(v: &mut Value, delta: i64) {
    match v {
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k == "time" {
                    if let Value::Object(t) = x {
                        for n in t.values_mut() {
                            if let Some(i) = n.as_i64() {
                                *n = json!(i + delta);
                            }
                        }
                    }
                } else {
                    shift_times(x, delta);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| shift_times(x, delta)),
        _ => {}
    }
}

/// The tool steps of `session`, in order, with times relative to the step's message.
fn tool_steps(c: &Connection, session: &str) -> Vec<Step> {
    let mut st = c
        .prepare("SELECT id, time_created, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
        .unwrap();
    let msgs: Vec<(String, i64, String)> = st
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut steps = Vec::new();
    for (id, t, data) in msgs {
        let mut ps = c
            .prepare("SELECT data FROM part WHERE message_id = ?1 ORDER BY id")
            .unwrap();
        let parts: Vec<String> = ps
            .query_map([&id], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        if !parts.iter().any(|p| p.contains("\"type\":\"tool\"")) {
            continue;
        }
        let mut message: Value = serde_json::from_str(&data).unwrap();
        shift_times(&mut message, -t);
        let parts = parts
            .iter()
            .map(|p| {
                let mut v: Value = serde_json::from_str(p).unwrap();
                shift_times(&mut v, -t);
                v
            })
            .collect();
        steps.push(Step { message, parts });
    }
    steps
}

/// Writes sessions cloned from a template session: the session row by
/// `INSERT .. SELECT` from the template's, each step's message and parts with new ids and times.
struct Cloner<'c> {
    c: &'c Connection,
    template: String,
    steps: Vec<Step>,
}

impl<'c> Cloner<'c> {
    fn new(c: &'c Connection, template: &str) -> Cloner<'c> {
        let steps = tool_steps(c, template);
        assert!(!steps.is_empty(), "template {template} has no tool steps");
        Cloner {
            c,
            template: template.to_string(),
            steps,
        }
    }

    fn session(&self, id: &str, title: &str, t: i64) {
        let cols: Vec<String> = self
            .c
            .prepare("SELECT name FROM pragma_table_info('session')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let exprs: Vec<&str> = cols
            .iter()
            .map(|c| match c.as_str() {
                "id" => "?2",
                "title" => "?3",
                "slug" => "slug || '-' || ?2",
                "parent_id" => "NULL",
                "time_created" | "time_updated" => "?4",
                other => other,
            })
            .collect();
        let sql = format!(
            "INSERT INTO session ({}) SELECT {} FROM session WHERE id = ?1",
            cols.join(", "),
            exprs.join(", ")
        );
        self.c
            .prepare_cached(&sql)
            .unwrap()
            .execute(params![self.template, id, title, t])
            .unwrap();
    }

    /// Step `k` of session `sid` at time `t` (ms): its message and parts, session.time_updated.
    fn step(&self, sid: &str, tag: &str, k: usize, t: i64) {
        let s = &self.steps[k % self.steps.len()];
        let mid = format!("msg_{tag}{k:06}xxxxxxxx");
        let mut m = s.message.clone();
        shift_times(&mut m, t);
        self.c
            .prepare_cached("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)")
            .unwrap()
            .execute(params![mid, sid, t, m.to_string()])
            .unwrap();
        for (j, p) in s.parts.iter().enumerate() {
            let mut p = p.clone();
            shift_times(&mut p, t);
            self.c
                .prepare_cached("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)")
                .unwrap()
                .execute(params![format!("prt_{tag}{k:06}{j:02}xxxxxx"), mid, sid, t, p.to_string()])
                .unwrap();
        }
        self.c
            .prepare_cached("UPDATE session SET time_updated = ?2 WHERE id = ?1")
            .unwrap()
            .execute(params![sid, t])
            .unwrap();
    }
}

// ---- the other agents: Claude Code and Codex CLI --------------------------------------------------

/// The failing test a looping agent runs again and again (the project of
/// `support::agents::make_project`).
const AGENT_TEST: &str = "python3 tests/test_calc.py";

/// An agent of phase 5: its command line, its loop script, where its transcript names a session.
#[derive(Clone, Copy)]
enum Agent {
    ClaudeCode,
    Codex,
}

impl Agent {
    fn label(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude -p",
            Agent::Codex => "codex exec",
        }
    }

    fn script(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "cloop",
            Agent::Codex => "xloop",
        }
    }

    /// Its loop: the test, 300 times (a loop is stopped at its alert long before).
    fn write_script(self, model: &AgentModel) {
        let call = match self {
            Agent::ClaudeCode => {
                json!({"tool": "Bash", "args": {"command": AGENT_TEST, "description": "run"}})
            }
            Agent::Codex => json!({"tool": "exec_command", "args": {"cmd": AGENT_TEST}}),
        };
        model.script(self.script(), &Value::Array(vec![call; 300]));
    }

    fn command(self, model: &AgentModel, home: &Path, proj: &Path) -> Command {
        match self {
            Agent::ClaudeCode => model.claude_cmd(home, proj, self.script()),
            Agent::Codex => model.codex_cmd(home, proj, self.script()),
        }
    }

    /// The session the agent runs in `proj`, by its transcript (whose records carry the
    /// project as `cwd`): Claude Code's file stem, the thread id Codex's rollout name ends with;
    /// the ids `oc-sessions` gives them.
    fn session_in(self, home: &Path, proj: &Path) -> Option<String> {
        let cwd = format!("\"cwd\":\"{}\"", proj.display());
        let mine = |p: &Path| {
            p.extension().is_some_and(|x| x == "jsonl")
                && std::fs::read_to_string(p).is_ok_and(|t| t.contains(&cwd))
        };
        let stem = |p: &Path| p.file_stem()?.to_str().map(String::from);
        match self {
            Agent::ClaudeCode => std::fs::read_dir(home.join(".claude/projects"))
                .ok()?
                .flatten()
                .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
                .map(|f| f.path())
                .find(|p| mine(p))
                .and_then(|p| stem(&p)),
            Agent::Codex => {
                // sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl
                let mut dirs = vec![home.join(".codex/sessions")];
                while let Some(d) = dirs.pop() {
                    for p in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                        let p = p.path();
                        if p.is_dir() {
                            dirs.push(p);
                        } else if mine(&p) {
                            let s = stem(&p)?;
                            return s.get(s.len().checked_sub(36)?..).map(String::from);
                        }
                    }
                }
                None
            }
        }
    }
}

/// A looping agent run of phase 5, watched for its alert.
struct AgentRun {
    name: String,
    proj: PathBuf,
    session: Option<String>,
    notified: Option<i64>,
    /// The agent, leading a process group of its own (Codex runs a native child).
    child: Option<Child>,
    ended: Option<std::process::ExitStatus>,
}

impl AgentRun {
    fn start(m: &Machine, model: &AgentModel, agent: Agent, name: &str, tmp: &Path) -> AgentRun {
        let proj = support::agents::make_project(&m.home.join(&format!("work/{name}")));
        let child = agent
            .command(model, m.home.path(), &proj)
            .env("TMPDIR", tmp)
            .stdout(std::fs::File::create(m.home.join(&format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(m.home.join(&format!("{name}.err"))).unwrap())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("{} (tests/setup installs it): {e}", agent.label()));
        AgentRun {
            name: name.to_string(),
            proj,
            session: None,
            notified: None,
            child: Some(child),
            ended: None,
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.wait();
        }
    }
}

/// Waits until each run was notified (then kills it), ended without one, or `limit` passed.
fn watch_agents(m: &Machine, agent: Agent, rs: &mut [AgentRun], limit: Duration) {
    let t0 = Instant::now();
    loop {
        let mut open = 0;
        for r in rs.iter_mut() {
            if r.session.is_none() {
                r.session = agent.session_in(m.home.path(), &r.proj);
            }
            if r.notified.is_none() {
                if let Some(s) = &r.session {
                    r.notified = m.notified(s);
                }
            }
            if r.notified.is_some() {
                r.stop();
            }
            if r.ended.is_none() {
                r.ended = r.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            }
            if r.notified.is_none() && r.ended.is_none() {
                open += 1;
            }
        }
        if open == 0 || t0.elapsed() > limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An agent loop's figures: t1 - t0, t0 the transcript's time of the flag call, and the calls
/// it started after the flag call up to t1.
struct AgentLatency {
    name: String,
    session: String,
    flag_index: u64,
    secs: f64,
    calls_after: usize,
    calls: usize,
}

fn agent_latencies(
    rs: &[AgentRun],
    flags: &HashMap<String, Value>,
    calls: &HashMap<String, Vec<i64>>,
) -> Vec<AgentLatency> {
    let mut out = Vec::new();
    for r in rs {
        let ended = r
            .ended
            .map(|st| format!("; it ended by itself: {st}"))
            .unwrap_or_default();
        let Some(s) = &r.session else {
            println!("    {}: no transcript appeared{ended}", r.name);
            continue;
        };
        let times = calls.get(s).map(Vec::as_slice).unwrap_or_default();
        let Some(f) = flags.get(s) else {
            println!(
                "    {} ({s}): never flagged by the batch detector ({} calls){ended}",
                r.name,
                times.len()
            );
            continue;
        };
        let Some(t1) = r.notified else {
            println!(
                "    {} ({s}): flagged, but no Notify named it{ended}",
                r.name
            );
            continue;
        };
        let t0 = f["t"].as_i64().unwrap_or_default();
        out.push(AgentLatency {
            name: r.name.clone(),
            session: s.clone(),
            flag_index: f["index"].as_u64().unwrap_or(0),
            secs: (t1 - t0) as f64 / 1000.0,
            calls_after: times.iter().filter(|&&t| t > t0 && t <= t1).count(),
            calls: times.len(),
        });
    }
    out
}

fn print_agent_latencies(title: &str, ls: &[AgentLatency]) {
    println!("  {title}");
    for l in ls {
        println!(
            "    {:<10} {} flag at call {:>2} of {:>2}: t1-t0 {:>6.2} s, {} calls after the flag call",
            l.name, l.session, l.flag_index, l.calls, l.secs, l.calls_after
        );
    }
    spread(
        "time to alert, t1 - first_flag.t",
        ls.iter().map(|l| l.secs).collect(),
        " s",
    );
    spread(
        "calls after the flag call",
        ls.iter().map(|l| l.calls_after as f64).collect(),
        "",
    );
}

// ---- figures -----------------------------------------------------------------------------------

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[i.clamp(1, sorted.len()) - 1]
}

fn spread(name: &str, mut v: Vec<f64>, unit: &str) {
    if v.is_empty() {
        println!("  {name}: no samples");
        return;
    }
    v.sort_by(f64::total_cmp);
    println!(
        "  {name}: p50 {:.2}{unit}, p95 {:.2}{unit}, max {:.2}{unit}, min {:.2}{unit} (n={})",
        pct(&v, 50.0),
        pct(&v, 95.0),
        v[v.len() - 1],
        v[0],
        v.len()
    );
}

/// A session watched for its alert.
struct Watched {
    name: String,
    proj: PathBuf,
    started: i64,
    session: Option<String>,
    notified: Option<i64>,
    child: Option<Child>,
    /// How its run ended, when it ended before we stopped it.
    ended: Option<std::process::ExitStatus>,
}

impl Watched {
    fn new(name: &str, proj: PathBuf, child: Option<Child>) -> Watched {
        Watched {
            name: name.to_string(),
            proj,
            started: now_ms(),
            session: None,
            notified: None,
            child,
            ended: None,
        }
    }

    fn how_ended(&self) -> String {
        self.ended
            .map(|st| format!("; its run ended by itself: {st}"))
            .unwrap_or_default()
    }

    fn stop(&mut self) {
        if self.ended.is_some() {
            self.child = None;
        }
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let t0 = Instant::now();
            while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits until each watched session was notified (then stops its run, with `stop_on_alert`),
/// its run ended without one, or `limit` passed.
fn watch(m: &Machine, ws: &mut [Watched], limit: Duration, stop_on_alert: bool) {
    let t0 = Instant::now();
    loop {
        let mut open = 0;
        for w in ws.iter_mut() {
            if w.session.is_none() {
                w.session = m.session_of(&w.proj, w.started);
            }
            if w.notified.is_none() {
                if let Some(s) = &w.session {
                    w.notified = m.notified(s);
                }
            }
            if w.notified.is_some() && stop_on_alert {
                w.stop();
            }
            if w.ended.is_none() {
                w.ended = w.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            }
            if w.notified.is_none() && w.ended.is_none() {
                open += 1;
            }
        }
        if open == 0 || t0.elapsed() > limit {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One alert's figures: t1 - t0 with t0 the flag call's first commit (part.time_created: the
/// detector flags on a call as soon as its row shows it, pending or running) and with t0 its
/// last one (part.time_updated, later when the call was still running at the alert: it can
/// come out negative, and a run stopped at its alert aborts its running call), and the tool
/// calls committed after the flag point up to the notification.
struct Latency {
    name: String,
    session: String,
    flag_index: u64,
    by_updated: f64,
    by_created: f64,
    calls_after: i64,
}

fn latencies(m: &Machine, ws: &[Watched], flags: &HashMap<String, Value>) -> Vec<Latency> {
    let c = m.ro();
    let mut out = Vec::new();
    for w in ws {
        let Some(s) = &w.session else {
            println!("    {}: no session appeared{}", w.name, w.how_ended());
            continue;
        };
        let Some(f) = flags.get(s) else {
            println!(
                "    {} ({s}): never flagged by the batch detector ({} calls){}",
                w.name,
                m.tool_calls(s),
                w.how_ended()
            );
            continue;
        };
        let Some(t1) = w.notified else {
            println!(
                "    {} ({s}): flagged, but no Notify named it{}",
                w.name,
                w.how_ended()
            );
            continue;
        };
        let id = f["id"].as_str().unwrap_or_default();
        let Ok((created, updated)): rusqlite::Result<(i64, i64)> = c.query_row(
            "SELECT time_created, time_updated FROM part WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        ) else {
            println!("    {} ({s}): first_flag {id} has no part row", w.name);
            continue;
        };
        let calls_after: i64 = c
            .query_row(
                "SELECT count(*) FROM part WHERE session_id = ?1 AND data LIKE '%\"type\":\"tool\"%'
                 AND time_created > ?2 AND time_created <= ?3",
                params![s, created, t1],
                |r| r.get(0),
            )
            .unwrap();
        out.push(Latency {
            name: w.name.clone(),
            session: s.clone(),
            flag_index: f["index"].as_u64().unwrap_or(0),
            by_updated: (t1 - updated) as f64 / 1000.0,
            by_created: (t1 - created) as f64 / 1000.0,
            calls_after,
        });
    }
    out
}

fn print_latencies(title: &str, ls: &[Latency]) {
    println!("  {title}");
    for l in ls {
        println!(
            "    {:<10} {} flag at call {:>2}: t1-t0 {:>6.2} s (from the row's last update {:>6.2} s), {} calls after the flag point",
            l.name, l.session, l.flag_index, l.by_created, l.by_updated, l.calls_after
        );
    }
    spread(
        "time to alert, t1 - part.time_created",
        ls.iter().map(|l| l.by_created).collect(),
        " s",
    );
    spread(
        "           (t1 - part.time_updated)",
        ls.iter().map(|l| l.by_updated).collect(),
        " s",
    );
    spread(
        "calls after the flag point",
        ls.iter().map(|l| l.calls_after as f64).collect(),
        "",
    );
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn first_line(prog: &str, args: &[&str]) -> String {
    Command::new(prog)
        .args(args)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_else(|e| format!("({prog}: {e})"))
}

/// CPU of the pipeline over `f`, in % of one core, with the wall time and the process count.
fn cpu_over(tag: &str, f: impl FnOnce()) -> (f64, f64, usize, usize) {
    let (c0, n0) = cpu_now(tag);
    let t0 = Instant::now();
    f();
    let (c1, n1) = cpu_now(tag);
    let secs = t0.elapsed().as_secs_f64();
    let used = c1.saturating_sub(c0) as f64 / clock_ticks();
    (100.0 * used / secs, secs, n0, n1)
}

/// Adds `n` sessions of `calls` steps each, two days old, cloned from `template`, in one
/// transaction; prints what the database then holds. Returns its session count.
fn old_history(m: &Machine, template: &str, n: u64, calls: u64) -> i64 {
    let t = Instant::now();
    {
        let c = Connection::open(m.db()).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        let cl = Cloner::new(&c, template);
        let tx = c.unchecked_transaction().unwrap();
        let old = now_ms() - 2 * 86_400_000;
        for i in 0..n {
            let sid = format!("ses_idle{i:05}xxxxxxxxxxxxxxxx");
            let t0 = old + i as i64 * 60_000;
            cl.session(&sid, &format!("idle {i}"), t0);
            for k in 0..calls as usize {
                cl.step(&sid, &format!("idle{i:05}"), k, t0 + k as i64 * 1000);
            }
        }
        tx.commit().unwrap();
    }
    let (sessions, parts): (i64, i64) = m
        .ro()
        .query_row(
            "SELECT (SELECT count(*) FROM session), (SELECT count(*) FROM part)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    println!(
        "  opencode database: {sessions} sessions, {parts} parts, {} MiB ({n} old ones cloned from a real `healthy` run in {:.0} s)",
        std::fs::metadata(m.db()).unwrap().len() >> 20,
        t.elapsed().as_secs_f64()
    );
    sessions
}

fn main() {
    let s = Settings::from_env();
    let started = Instant::now();
    println!("follow bench (issue 27): the watchdog watching all the time");
    println!("  started {}", first_line("date", &["-u", "+%F %T UTC"]));
    println!("  {}", first_line("uname", &["-srm"]));
    println!(
        "  {} cores, load {}, opencode {}",
        first_line("nproc", &[]),
        loadavg(),
        first_line(
            &std::env::var("OPENCODE_BIN").unwrap_or_else(|_| "opencode".into()),
            &["--version"]
        )
    );
    println!("  environment:");
    s.print();

    let mut m = Machine::install();
    println!(
        "  watchdog: deploy/install --from {} into a temp HOME {}, default config",
        Path::new(env!("CARGO_BIN_EXE_oc-sessions"))
            .parent()
            .unwrap()
            .display(),
        m.home.path().display()
    );
    println!(
        "  desktop: dbus-daemon --session at {}, dunst on Xvfb {}, dbus-monitor for Notify",
        m.desk.bus, m.desk.display
    );
    let fake = ocsim::Fake::start();
    fake.configure(m.home.path());

    // a real session to clone: the history of 2,000 old sessions
    let base = m.project("base");
    let mut run = m.opencode_run(&base, "healthy", "healthy");
    let _ = run.wait();
    let healthy = m
        .session_of(&base, 0)
        .expect("opencode run healthy made no session");
    let projects: Vec<PathBuf> = (0..s.loops.max(s.busy))
        .map(|i| m.project(&format!("loop{i:02}")))
        .collect();

    println!(
        "  pipeline under test: {} (env OCWD_BENCH=<tag> marks its processes)",
        m.pipeline_command(s.follow)
    );
    m.start_pipeline(s.follow);
    let mut sampler = Sampler::start(&m.tag, m.cgroup.clone());
    match &m.cgroup {
        Some(cg) => println!("  memory cgroup of its own: {}", cg.dir.display()),
        None => println!("  no memory cgroup of its own could be made: no cgroup figures"),
    }
    std::thread::sleep(Duration::from_secs(5));
    sampler.mark("pipeline started");

    // 1. time to alert
    let mut watched: Vec<Watched> = Vec::new();
    let mut served: Vec<Watched> = Vec::new();
    let (mut runs, mut serves) = (Vec::new(), Vec::new());
    if s.runs('1') {
        println!("\n1. time to alert: {} `opencode run` loops (slow_reread40), {} at once; t0 = commit of the verdict's first_flag call, t1 = Notify on the bus", s.loops, s.wave);
        for w0 in (0..s.loops).step_by(s.wave as usize) {
            let mut wave: Vec<Watched> = (w0..(w0 + s.wave).min(s.loops))
                .map(|i| {
                    let name = format!("run{i:02}");
                    let p = projects[i as usize].clone();
                    let child = m.opencode_run(&p, "slow_reread40", &name);
                    Watched::new(&name, p, Some(child))
                })
                .collect();
            watch(&m, &mut wave, Duration::from_secs(180), true);
            wave.iter_mut().for_each(Watched::stop);
            watched.extend(wave);
        }
        sampler.mark("after the run loops");

        // one session of an `opencode serve`, left idle for phase 4
        let sp = m.project("served");
        let port = ocsim::random_port();
        let serve = ocsim::opencode(m.home.path(), &sp)
            .args([
                "serve",
                "--hostname",
                "127.0.0.1",
                "--port",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(m.home.join("serve.err")).unwrap())
            .spawn()
            .expect("opencode serve");
        m.kids.push(serve);
        let url = format!("http://127.0.0.1:{port}");
        let t0 = Instant::now();
        while ureq::get(&format!("{url}/global/health"))
            .timeout(Duration::from_secs(2))
            .call()
            .is_err()
        {
            assert!(t0.elapsed() < Duration::from_secs(60), "serve not healthy");
            std::thread::sleep(Duration::from_millis(200));
        }
        served.push(Watched::new("serve", sp.clone(), None));
        let (code, ses) = ocsim::http("POST", &format!("{url}/session"), Some(&json!({})));
        assert_eq!(code, 200, "{ses}");
        let sid = ses["id"].as_str().unwrap().to_string();
        let (code, v) = ocsim::http(
            "POST",
            &format!("{url}/session/{sid}/prompt_async"),
            Some(&json!({"parts": [{"type": "text", "text": "SCRIPT:slow_reread40 go"}]})),
        );
        assert!(code < 300, "{v}");
        watch(&m, &mut served, Duration::from_secs(90), false);
        ocsim::http("POST", &format!("{url}/session/{sid}/abort"), None);
        sampler.mark("after the serve loop");

        let flags = m.first_flags("2h");
        runs = latencies(&m, &watched, &flags);
        print_latencies(&format!("{} `opencode run` loops:", s.loops), &runs);
        serves = latencies(&m, &served, &flags);
        print_latencies("one `opencode serve` session:", &serves);
    }

    // 2. cost with sessions looping at once
    let mut busy: Vec<Watched> = Vec::new();
    let (mut under_load, mut pct_busy) = (Vec::new(), None);
    if s.runs('2') {
        println!(
        "\n2. cost with {} `opencode run` sessions looping at once (lc_goes_on, 50 reads 0.5 s apart)",
        s.busy
    );
        busy = (0..s.busy)
            .map(|i| {
                let name = format!("busy{i:02}");
                let p = projects[i as usize].clone();
                let child = m.opencode_run(&p, "lc_goes_on", &name);
                Watched::new(&name, p, Some(child))
            })
            .collect();
        // twenty opencode processes starting at once take a while on two cores
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(240) {
            for w in busy.iter_mut().filter(|w| w.session.is_none()) {
                w.session = m.session_of(&w.proj, w.started);
            }
            if busy
                .iter()
                .all(|w| w.session.as_deref().is_some_and(|s| m.tool_calls(s) > 0))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let looping = |busy: &[Watched]| {
            busy.iter()
                .filter(|w| w.session.as_deref().is_some_and(|s| m.tool_calls(s) > 0))
                .count()
        };
        let calls0: i64 = busy
            .iter()
            .filter_map(|w| w.session.as_deref())
            .map(|s| m.tool_calls(s))
            .sum();
        let at_start = looping(&busy);
        let (pct, secs, n0, n1) = cpu_over(&m.tag, || {
            std::thread::sleep(Duration::from_secs(s.busy_secs))
        });
        pct_busy = Some(pct);
        let calls1: i64 = busy
            .iter()
            .filter_map(|w| w.session.as_deref())
            .map(|s| m.tool_calls(s))
            .sum();
        let mut running = 0;
        for w in busy.iter_mut() {
            if let Some(c) = w.child.as_mut() {
                running += usize::from(c.try_wait().ok().flatten().is_none());
            }
        }
        println!(
        "  pipeline CPU: {pct:.2}% of one core over {secs:.1} s ({at_start} sessions looping at the start, {running} runs still going at the end, {} calls made meanwhile, {n0}->{n1} pipeline processes, load {})",
        calls1 - calls0,
        loadavg()
    );
        watch(&m, &mut busy, Duration::from_secs(30), false);
        busy.iter_mut().for_each(Watched::stop);
        sampler.mark("after the busy loops");
        let flags = m.first_flags("2h");
        under_load = latencies(&m, &busy, &flags);
        print_latencies(
            &format!("the same {} sessions' alerts (while all loop):", s.busy),
            &under_load,
        );
    }

    // 3. memory over sessions coming and going: the rows of the real loop with most calls
    if s.runs('3') {
        if watched.is_empty() && busy.is_empty() && served.is_empty() {
            // the other phases did not run: one real loop to clone
            let p = projects[0].clone();
            let child = m.opencode_run(&p, "slow_reread40", "template");
            let mut one = vec![Watched::new("template", p, Some(child))];
            watch(&m, &mut one, Duration::from_secs(180), true);
            one.iter_mut().for_each(Watched::stop);
            watched.extend(one);
            sampler.mark("after the loop to clone");
        }
        let (template, name) = watched
            .iter()
            .chain(&served)
            .chain(&busy)
            .filter_map(|w| w.session.as_ref().map(|s| (s.clone(), w.name.clone())))
            .max_by_key(|(s, _)| m.tool_calls(s))
            .filter(|(s, _)| m.tool_calls(s) > 0)
            .expect("no loop session with tool calls to clone");
        println!(
        "\n3. memory: {} sessions coming and going over {} s ({} steps each, one every 500 ms; rows of {name}'s real loop, compressed from an hour, no opencode process behind them)",
        s.mem_sessions, s.mem_secs, s.mem_steps,
    );
        {
            let c = Connection::open(m.db()).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            let cl = Cloner::new(&c, &template);
            let n = s.mem_sessions as usize;
            let steps = s.mem_steps as usize;
            let span = (s.mem_secs as f64 * 1000.0 - steps as f64 * 500.0).max(0.0);
            let begin = Instant::now();
            let start_of =
                |i: usize| Duration::from_millis((span * i as f64 / n.max(1) as f64) as u64);
            let mut next = vec![0usize; n];
            let mut ended = 0;
            let quarter = (n / 4).max(1);
            while ended < n {
                let now = begin.elapsed();
                for (i, next) in next.iter_mut().enumerate() {
                    let k = *next;
                    if k >= steps || now < start_of(i) + Duration::from_millis(500 * k as u64) {
                        continue;
                    }
                    let sid = format!("ses_mem{i:05}xxxxxxxxxxxxxxxxx");
                    let tx = c.unchecked_transaction().unwrap();
                    if k == 0 {
                        cl.session(&sid, &format!("mem {i}"), now_ms());
                    }
                    cl.step(&sid, &format!("mem{i:05}"), k, now_ms());
                    tx.commit().unwrap();
                    *next += 1;
                    if *next == steps {
                        ended += 1;
                        if ended % quarter == 0 || ended == n {
                            sampler.mark(&format!("{ended}/{n} sessions ended"));
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        std::thread::sleep(Duration::from_secs(30));
        sampler.mark("30 s after the last");
        let alerted = m
            .notifies()
            .iter()
            .filter(|(_, b)| b.contains("ses_mem"))
            .count();
        println!("  Notify calls naming those sessions: {alerted}");
    }

    // 4. cost while idle, over a big history (added only now: `opencode run` starting on a
    // 300 MB database under this machine's load made no call in two minutes)
    let mut pct_idle = None;
    if s.runs('4') {
        println!(
        "\n4. cost while idle: {} s, opencode serve idle, {} old sessions added to the database",
        s.idle_secs, s.idle_sessions
    );
        let sessions = old_history(&m, &healthy, s.idle_sessions, s.idle_calls);
        std::thread::sleep(Duration::from_secs(15));
        sampler.mark("history added");
        let (pct, secs, n0, n1) = cpu_over(&m.tag, || {
            std::thread::sleep(Duration::from_secs(s.idle_secs))
        });
        pct_idle = Some(pct);
        println!(
        "  pipeline CPU: {pct:.3}% of one core over {secs:.0} s, {sessions} sessions in the database ({n0}->{n1} pipeline processes, load {})",
        loadavg()
    );
        sampler.mark("after the idle period");
    }

    // 5. time to alert for Claude Code and Codex
    let mut agent_figures: Vec<(Agent, Vec<AgentLatency>)> = Vec::new();
    if s.runs('5') {
        println!(
            "\n5. time to alert, other agents: {n} `claude -p` and {n} `codex exec` loops (the test run again and again), {} of one agent at once; t0 = the transcript's time of the verdict's first_flag call, t1 = Notify on the bus",
            s.agent_wave,
            n = s.agent_loops
        );
        let model = AgentModel::start();
        let tmp = m.home.join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        let mut all: Vec<(Agent, Vec<AgentRun>)> = Vec::new();
        for agent in [Agent::ClaudeCode, Agent::Codex] {
            agent.write_script(&model);
            let prefix = &agent.script()[..1];
            let mut done = Vec::new();
            for w0 in (0..s.agent_loops).step_by(s.agent_wave as usize) {
                let mut wave: Vec<AgentRun> = (w0..(w0 + s.agent_wave).min(s.agent_loops))
                    .map(|i| {
                        AgentRun::start(&m, &model, agent, &format!("{prefix}loop{i:02}"), &tmp)
                    })
                    .collect();
                watch_agents(&m, agent, &mut wave, Duration::from_secs(180));
                wave.iter_mut().for_each(AgentRun::stop);
                done.extend(wave);
            }
            sampler.mark(&format!("after the {} loops", agent.label()));
            all.push((agent, done));
        }
        let flags = m.first_flags("2h");
        let calls = m.call_times("2h");
        for (agent, rs) in &all {
            let ls = agent_latencies(rs, &flags, &calls);
            print_agent_latencies(&format!("{} `{}` loops:", rs.len(), agent.label()), &ls);
            agent_figures.push((*agent, ls));
        }
        println!("  load {}", loadavg());
    }

    println!("\nmemory of the pipeline's processes over the run");
    sampler.print();
    let notes = m.notifies().len();
    let restarts = m.monitor.lock().unwrap().1;
    if restarts > 0 {
        println!("dbus-monitor was ended from outside {restarts} times (and started again)");
    }
    let log = std::fs::read_to_string(m.home.join("pipeline.log")).unwrap_or_default();
    println!(
        "\n{notes} Notify calls in all; pipeline stderr {} lines ({} MiB); ran {:.0} s",
        log.lines().count(),
        log.len() >> 20,
        started.elapsed().as_secs_f64()
    );
    for l in log
        .lines()
        .filter(|l| !l.starts_with("oc-watchdog: dedup="))
        .take(10)
    {
        println!("  stderr: {l}");
    }
    println!("\nsummary ({}):", m.pipeline_command(s.follow));
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            "n/a".to_string()
        } else {
            format!(
                "p50 {:.2} s, p95 {:.2} s, max {:.2} s (n={})",
                pct(&v, 50.0),
                pct(&v, 95.0),
                v[v.len() - 1],
                v.len()
            )
        }
    };
    println!(
        "  time to alert, opencode run: {} (target p50 <= 2 s, p95 <= 5 s)",
        med(runs.iter().map(|l| l.by_created).collect())
    );
    println!(
        "  time to alert, opencode serve: {}",
        med(serves.iter().map(|l| l.by_created).collect())
    );
    println!(
        "  time to alert, {} looping at once: {}",
        s.busy,
        med(under_load.iter().map(|l| l.by_created).collect())
    );
    for (agent, ls) in &agent_figures {
        println!(
            "  time to alert, {}: {} (target p95 <= 5 s)",
            agent.label(),
            med(ls.iter().map(|l| l.secs).collect())
        );
    }
    if let Some(pct) = pct_idle {
        println!("  CPU idle: {pct:.3}% of one core (target <= 0.5%)");
    }
    if let Some(pct) = pct_busy {
        println!(
            "  CPU with {} looping: {pct:.2}% of one core (target <= 5%)",
            s.busy
        );
    }
    drop(fake);
}
