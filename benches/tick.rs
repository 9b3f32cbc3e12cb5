//! Benchmark of one whole watchdog tick on a big opencode history: a database of 2,000
//! sessions and 500,000 tool calls (real rows of a real scripted `opencode run` session,
//! cloned with new ids), of which 20 sessions changed since the last tick. Each measured tick
//! is `oc-watchdog-tick` as the timer runs it (five processes started, the database found at
//! opencode's own path, `/proc` scanned for servers, the watchdog store written), after 20
//! sessions were touched. Prints the median and best of the ticks, and the readers alone.
//! Override the size with BENCH_SESSIONS / BENCH_CALLS (per session) / BENCH_CHANGED.
//!
//!     cargo bench --bench tick

#[path = "../tests/support/mod.rs"]
mod support;

use rusqlite::{params, Connection};
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use support::ocsim::Sim;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A message and its parts `(id, data)`: one real assistant step with a tool call.
type Step = (String, Vec<String>);

fn template_steps(c: &Connection, session: &str) -> Vec<Step> {
    let mut st = c
        .prepare("SELECT id, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
        .unwrap();
    let msgs: Vec<(String, String)> = st
        .query_map([session], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut steps = Vec::new();
    for (id, data) in msgs {
        let mut ps = c
            .prepare("SELECT data FROM part WHERE message_id = ?1 ORDER BY id")
            .unwrap();
        let parts: Vec<String> = ps
            .query_map([&id], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        if parts.iter().any(|p| p.contains("\"type\":\"tool\"")) {
            steps.push((data, parts));
        }
    }
    steps
}

/// Clones the template session into `sessions` sessions of `calls` steps each; all of them
/// last updated `old` ms ago. Returns the new ids.
fn clone_history(
    db: &Path,
    template: &str,
    sessions: usize,
    calls: usize,
    now: i64,
) -> Vec<String> {
    let c = Connection::open(db).unwrap();
    c.execute_batch("PRAGMA synchronous = OFF").unwrap();
    let steps = template_steps(&c, template);
    assert!(!steps.is_empty());
    let tx = c.unchecked_transaction().unwrap();
    let mut ids = Vec::new();
    {
        let mut ses = tx
            .prepare(
                "INSERT INTO session (id, project_id, workspace_id, parent_id, slug, directory, path, title, version, share_url,
                    summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output,
                    tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created,
                    time_updated, time_compacting, time_archived)
                 SELECT ?1, project_id, workspace_id, NULL, slug || ?2, directory, path, 'bench ' || ?2, version, share_url,
                    summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output,
                    tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, ?4,
                    ?4, time_compacting, time_archived FROM session WHERE id = ?3",
            )
            .unwrap();
        let mut msg = tx
            .prepare("INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)")
            .unwrap();
        let mut part = tx
            .prepare("INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)")
            .unwrap();
        for s in 0..sessions {
            // 2 days old, one session a minute apart
            let t0 = now - 2 * 86_400_000 + s as i64 * 60_000;
            let sid = format!("ses_bench{s:05}xxxxxxxxxxxxxxx");
            ses.execute(params![sid, s.to_string(), template, t0])
                .unwrap();
            for k in 0..calls {
                let (data, parts) = &steps[k % steps.len()];
                let mid = format!("msg_bench{s:05}{k:06}xxxxxxxxx");
                let t = t0 + k as i64;
                msg.execute(params![mid, sid, t, data]).unwrap();
                for (j, pdata) in parts.iter().enumerate() {
                    part.execute(params![
                        format!("prt_bench{s:05}{k:06}{j:02}xxxxxxx"),
                        mid,
                        sid,
                        t,
                        pdata
                    ])
                    .unwrap();
                }
            }
            ids.push(sid);
        }
    }
    tx.commit().unwrap();
    ids
}

fn main() {
    let sessions = env("BENCH_SESSIONS", 2_000);
    let calls = env("BENCH_CALLS", 250);
    let changed = env("BENCH_CHANGED", 20);

    // real rows: a real scripted session (reads, an edit, a write, bash, a commit...)
    let mut sim = Sim::start();
    let healthy = sim.run("healthy");
    let src_db = sim.db_path();
    sim.stop();

    let home = support::Home::new();
    let db = home.join(".local/share/opencode/opencode.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    Connection::open(&src_db)
        .unwrap()
        .execute("VACUUM INTO ?1", [db.to_str().unwrap()])
        .unwrap();
    let now = now_ms();
    let t0 = Instant::now();
    let ids = clone_history(&db, &healthy.id, sessions, calls, now);
    let size = std::fs::metadata(&db).unwrap().len();
    let tool_parts: i64 = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT count(*) FROM part WHERE data LIKE '%\"type\":\"tool\"%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    println!(
        "history: {sessions} sessions, {tool_parts} tool calls ({} MB) built in {:.0} s",
        size >> 20,
        t0.elapsed().as_secs_f64()
    );

    // the watchdog installed as a user has it (release binaries), one tick to start from
    let bins = Path::new(env!("CARGO_BIN_EXE_oc-sessions"))
        .parent()
        .unwrap();
    let run = |prog: &str, args: &[&str]| {
        let h = home.path();
        let out = support::installed_cmd(prog, h).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{prog}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(
        support::repo().join("deploy/install").to_str().unwrap(),
        &["--from", bins.to_str().unwrap()],
    );
    let tick = home.join(".local/bin/oc-watchdog-tick");
    let touch = |round: usize| {
        let c = Connection::open(&db).unwrap();
        let t = now_ms();
        for i in 0..changed {
            let id = &ids[(round * changed + i * 97) % ids.len()];
            c.execute(
                "UPDATE session SET time_updated = ?2 WHERE id = ?1",
                params![id, t],
            )
            .unwrap();
        }
    };
    let mut times = Vec::new();
    let mut judged = 0;
    for round in 0..7 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        touch(round);
        let t0 = Instant::now();
        run(tick.to_str().unwrap(), &[]);
        let secs = t0.elapsed().as_secs_f64();
        if round > 0 {
            times.push(secs);
        }
        let c = Connection::open(home.join(".local/state/oc-watchdog/watchdog.db")).unwrap();
        judged = c
            .query_row(
                "SELECT sessions FROM ticks ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
    }
    times.sort_by(f64::total_cmp);
    println!(
        "whole tick (oc-watchdog-tick, 5 processes, {changed} sessions changed, {judged} judged): median {:.3} s, best {:.3} s over {} ticks",
        times[times.len() / 2],
        times[0],
        times.len()
    );
    // the readers alone, on the same 20 changed sessions
    touch(99);
    let since = (now_ms() - 1_000).to_string();
    let t0 = Instant::now();
    let listed = run(
        home.join(".local/bin/oc-sessions").to_str().unwrap(),
        &["--since", &since],
    );
    let t_list = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let out = Command::new(home.join(".local/bin/oc-calls"))
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut ch| {
            use std::io::Write;
            ch.stdin.take().unwrap().write_all(&listed.stdout)?;
            ch.wait_with_output()
        })
        .unwrap();
    let t_calls = t0.elapsed().as_secs_f64();
    let n_calls = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("{\"kind\":\"call\""))
        .count();
    println!(
        "oc-sessions --since (index of {sessions} sessions, {changed} read): {:.3} s; oc-calls on them ({n_calls} calls): {:.3} s",
        t_list, t_calls
    );
}
