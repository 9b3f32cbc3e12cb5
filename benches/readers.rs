//! Benchmark of reading 50 sessions of 200 tool calls each, over HTTP from a real
//! `opencode serve` and from its SQLite database. The sessions are real rows multiplied: one
//! real scripted session's messages and parts are cloned in opencode's own database (new ids, in
//! order), then opencode is restarted on it and serves them.
//!
//!     cargo bench --bench readers

#[path = "../tests/support/mod.rs"]
mod support;

use rusqlite::{params, Connection};
use std::time::Instant;
use support::ocsim::Sim;

const SESSIONS: usize = 50;
const CALLS: usize = 200;

fn clone_sessions(db: &std::path::Path, template: &str) -> Vec<String> {
    let c = Connection::open(db).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    let tx = c.unchecked_transaction().unwrap();
    // the template's assistant steps, each [step-start, tool, step-finish]
    // (message id, created, data, its parts as (id, data))
    type Step = (String, i64, String, Vec<(String, String)>);
    let mut steps: Vec<Step> = Vec::new();
    {
        let mut st = tx
            .prepare("SELECT id, time_created, data FROM message WHERE session_id = ?1 ORDER BY time_created, id")
            .unwrap();
        let msgs: Vec<(String, i64, String)> = st
            .query_map([template], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for (id, t, data) in msgs {
            let mut ps = tx
                .prepare("SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id")
                .unwrap();
            let parts: Vec<(String, String)> = ps
                .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            if parts.iter().any(|p| p.1.contains("\"type\":\"tool\"")) {
                steps.push((id, t, data, parts));
            }
        }
    }
    assert!(!steps.is_empty());
    let mut ids = Vec::new();
    for s in 0..SESSIONS {
        let sid = format!("ses_bench{s:04}xxxxxxxxxxxxxxx");
        tx.execute(
            "INSERT INTO session (id, project_id, workspace_id, parent_id, slug, directory, path, title, version, share_url,
                summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output,
                tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created,
                time_updated, time_compacting, time_archived)
             SELECT ?1, project_id, workspace_id, NULL, slug || ?2, directory, path, 'bench ' || ?2, version, share_url,
                summary_additions, summary_deletions, summary_files, summary_diffs, metadata, cost, tokens_input, tokens_output,
                tokens_reasoning, tokens_cache_read, tokens_cache_write, revert, permission, agent, model, time_created,
                time_updated, time_compacting, time_archived FROM session WHERE id = ?3",
            params![sid, s.to_string(), template],
        )
        .unwrap();
        for k in 0..CALLS {
            let (_, t, data, parts) = &steps[k % steps.len()];
            let mid = format!("msg_bench{s:04}{k:06}xxxxxxxxxx");
            let t = t + k as i64;
            tx.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?3, ?4)",
                params![mid, sid, t, data],
            )
            .unwrap();
            for (j, (_, pdata)) in parts.iter().enumerate() {
                tx.execute(
                    "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?1, ?2, ?3, ?4, ?4, ?5)",
                    params![format!("prt_bench{s:04}{k:06}{j:02}xxxxxxxx"), mid, sid, t, pdata],
                )
                .unwrap();
            }
        }
        ids.push(sid);
    }
    tx.commit().unwrap();
    ids
}

fn time(home: &support::Home, args: &[String]) -> (usize, f64) {
    let t0 = Instant::now();
    let r = home.cmd("oc-calls").args(args).run();
    let secs = t0.elapsed().as_secs_f64();
    r.ok();
    (r.kind("call").len(), secs)
}

fn main() {
    let mut sim = Sim::start();
    let ran = sim.run("reread");
    let db = sim.db_path();
    let home_dir = sim.home.clone();
    sim.stop();
    let ids = clone_sessions(&db, &ran.id);
    // serve the same home again
    let sim2 = Sim::start_in(home_dir);
    let home = support::Home::new();
    let mut http_args = vec!["--server".to_string(), sim2.url.clone()];
    http_args.extend(ids.iter().cloned());
    let mut db_args = vec!["--db".to_string(), db.display().to_string()];
    db_args.extend(ids.iter().cloned());
    // warm both paths once, then take the best of three
    time(&home, &http_args);
    time(&home, &db_args);
    let best = |a: &[String]| {
        (0..3)
            .map(|_| time(&home, a))
            .fold((0, f64::MAX), |x, y| if y.1 < x.1 { y } else { x })
    };
    let (n_http, t_http) = best(&http_args);
    let (n_db, t_db) = best(&db_args);
    println!("{SESSIONS} sessions x {CALLS} calls of real opencode rows");
    println!(
        "over HTTP (opencode serve 1.18.33): {n_http} calls in {t_http:.2} s = {:.0} calls/s",
        n_http as f64 / t_http
    );
    println!(
        "from the SQLite database:           {n_db} calls in {t_db:.2} s = {:.0} calls/s",
        n_db as f64 / t_db
    );
}
