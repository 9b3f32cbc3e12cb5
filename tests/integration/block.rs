//! `wd-store block-model` / `unblock-model` on a real opencode config with comments, checked by
//! a real `opencode models` before, between and after; and the inputs it must refuse.

use crate::support::{Home, Run};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

const CONFIG: &str = r#"{
  // my opencode config: hand-written, keep my comments
  "$schema": "https://opencode.ai/config.json",
  "model": "sim/sim-model",
  "enabled_providers": ["sim"],
  "autoupdate": false,
  "share": "disabled",
  /* the scripted test model */
  "provider": {
    "sim": {
      "npm": "@ai-sdk/openai-compatible", // local
      "name": "Sim",
      "options": { "baseURL": "http://127.0.0.1:9/v1", "apiKey": "k" },
      "models": {
        "sim-model": { "name": "Sim Model", "tool_call": true },
        "gpt-5-sim": { "name": "Other Sim", "tool_call": true },
      },
    },
  },
}
"#;

fn opencode_env(c: crate::support::Cmd) -> crate::support::Cmd {
    c.env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
}

/// What a real `opencode models` lists with this HOME.
fn models(home: &Home) -> Vec<String> {
    let h = home.path();
    let out =
        std::process::Command::new(std::env::var("OPENCODE_BIN").unwrap_or("opencode".into()))
            .arg("models")
            .current_dir(h)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", h)
            .env("XDG_CONFIG_HOME", h.join(".config"))
            .env("XDG_DATA_HOME", h.join(".local/share"))
            .env("XDG_STATE_HOME", h.join(".local/state"))
            .env("XDG_CACHE_HOME", h.join(".cache"))
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .output()
            .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

fn wd(home: &Home, args: &[&str]) -> Run {
    opencode_env(home.cmd("wd-store")).args(args).run()
}

fn setup(text: &str) -> (Home, std::path::PathBuf) {
    let home = Home::new();
    let dir = home.join(".config/opencode");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("opencode.jsonc");
    std::fs::write(&cfg, text).unwrap();
    (home, cfg)
}

fn blocks(home: &Home) -> i64 {
    rusqlite::Connection::open(home.join(".local/state/oc-watchdog/watchdog.db"))
        .unwrap()
        .query_row("SELECT count(*) FROM blocks", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn block_and_unblock_edit_only_the_blacklist_and_opencode_obeys() {
    let (home, cfg) = setup(CONFIG);
    assert_eq!(models(&home), ["sim/gpt-5-sim", "sim/sim-model"]);

    let r = wd(
        &home,
        &["block-model", "sim/gpt-5-sim", "--reason", "stalls in bash"],
    );
    r.ok();
    assert_eq!(r.kind("block")[0]["created"], "blacklist", "{}", r.story());
    assert!(
        r.stderr().contains("sim/gpt-5-sim blocked in"),
        "{}",
        r.story()
    );
    let after = std::fs::read_to_string(&cfg).unwrap();
    // one insertion, everything else byte for byte as it was
    let inserted = "\"blacklist\": [\"gpt-5-sim\"],\n      ";
    let at = after.find(inserted).expect("the new blacklist");
    assert_eq!(
        format!("{}{}", &after[..at], &after[at + inserted.len()..]),
        CONFIG
    );
    assert_eq!(
        std::fs::read_to_string(format!("{}.oc-watchdog.bak", cfg.display())).unwrap(),
        CONFIG
    );
    // a real opencode started afterwards no longer lists it
    assert_eq!(models(&home), ["sim/sim-model"]);
    // blocking it again changes nothing
    let r = wd(&home, &["block-model", "sim/gpt-5-sim"]);
    r.ok();
    assert!(
        r.stderr().contains("already in provider.sim.blacklist"),
        "{}",
        r.story()
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), after);
    assert_eq!(blocks(&home), 1);

    // the page lists the block with the command that undoes it
    let page = wd(&home, &["report", "--out", "-"]);
    page.ok();
    let p = page.stdout();
    assert!(p.contains("<td>stalls in bash</td>"), "{p}");
    assert!(p.contains("<code>wd-store unblock-model sim/gpt-5-sim</code>"));
    // and so does `wd-store blocks`
    let r = wd(&home, &["blocks"]);
    r.ok();
    let b = r.kind("block");
    assert_eq!(b.len(), 1, "{}", r.story());
    assert_eq!(b[0]["model"], "sim/gpt-5-sim");
    assert_eq!(b[0]["reason"], "stalls in bash");
    assert_eq!(b[0]["created"], "blacklist");
    assert_eq!(b[0]["file"], cfg.display().to_string());
    assert_eq!(b[0]["undo"], "wd-store unblock-model sim/gpt-5-sim");
    // the environment is cleared (no USER, no LOGNAME): the real user, never "unknown"
    let me = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    assert_eq!(
        b[0]["who"],
        format!("{}@{}", me.trim(), oc_watchdog::paths::hostname())
    );

    // unblock: the file is exactly what it was, and opencode lists the model again
    let r = wd(&home, &["unblock-model", "sim/gpt-5-sim"]);
    r.ok();
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), CONFIG);
    assert_eq!(models(&home), ["sim/gpt-5-sim", "sim/sim-model"]);
    let p = wd(&home, &["report", "--out", "-"]).stdout();
    assert!(!p.contains("unblock-model sim/gpt-5-sim"));
    assert_eq!(wd(&home, &["blocks"]).kind("block").len(), 0);
    let r = wd(&home, &["blocks", "--all"]);
    let b = r.kind("block");
    assert_eq!(b.len(), 1, "{}", r.story());
    assert!(b[0]["unblocked"].as_i64().is_some(), "{}", r.story());
    assert_eq!(b[0]["undo"], serde_json::Value::Null);
    // nothing left to undo
    let r = wd(&home, &["unblock-model", "sim/gpt-5-sim"]);
    r.expect_code(2);
    assert!(r
        .stderr()
        .contains("was not blocked by wd-store block-model"));
}

/// Runs block-model on `text`, expects a refusal mentioning `what`, and checks nothing was
/// written (file, backup, record).
fn refused(text: &str, model: &str, what: &str, prepare: impl Fn(&Path)) {
    let (home, cfg) = setup(text);
    prepare(&cfg);
    let r = wd(&home, &["block-model", model]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains(&cfg.display().to_string())
            && err.contains(what)
            && err.contains("nothing written"),
        "{}",
        r.story()
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), text);
    assert!(!Path::new(&format!("{}.oc-watchdog.bak", cfg.display())).exists());
    if home.join(".local/state/oc-watchdog/watchdog.db").exists() {
        assert_eq!(blocks(&home), 0);
    }
}

#[test]
fn bad_configs_read_only_files_and_unknown_models_are_refused_and_nothing_is_written() {
    // a blacklist that is not an array: opencode itself refuses the file
    let wrong = CONFIG.replace(
        "\"name\": \"Sim\",",
        "\"name\": \"Sim\", \"blacklist\": \"gpt-5-sim\",",
    );
    {
        let (home, _) = setup(&wrong);
        let said = models(&home).join("\n");
        assert!(said.contains("Configuration is invalid"), "{said}");
    }
    refused(
        &wrong,
        "sim/sim-model",
        "provider.sim.blacklist is a string; opencode wants an array of model ids",
        |_| {},
    );
    // not JSONC at all: opencode reports the same spot
    let broken = CONFIG.replace("\"autoupdate\": false,", "\"autoupdate\": false,,");
    {
        let (home, _) = setup(&broken);
        let said = models(&home).join("\n");
        assert!(said.contains("line 6, column 23"), "{said}");
    }
    refused(
        &broken,
        "sim/sim-model",
        "line 6, column 23: expected a property name, found ','",
        |_| {},
    );
    // a read-only config
    refused(CONFIG, "sim/sim-model", "the file is read-only", |p| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o444)).unwrap()
    });
    // a model opencode does not know
    refused(
        CONFIG,
        "sim/no-such-model",
        "opencode lists no model sim/no-such-model (it lists sim/gpt-5-sim, sim/sim-model)",
        |_| {},
    );
    // not PROVIDER/MODEL
    let (home, _) = setup(CONFIG);
    let r = wd(&home, &["block-model", "gpt-5-sim"]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("is not PROVIDER/MODEL"),
        "{}",
        r.story()
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Issue 30, point 5: a 0600 config holding an `apiKey` never gets a wider copy beside it.
#[test]
fn every_file_beside_a_0600_config_is_0600() {
    let (home, cfg) = setup(CONFIG);
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bak = std::path::PathBuf::from(format!("{}.oc-watchdog.bak", cfg.display()));
    // an older backup left 0644 by an earlier version
    std::fs::write(&bak, "old").unwrap();
    std::fs::set_permissions(&bak, std::fs::Permissions::from_mode(0o644)).unwrap();
    wd(&home, &["block-model", "sim/gpt-5-sim"]).ok();
    assert_eq!(std::fs::read_to_string(&bak).unwrap(), CONFIG);
    assert_eq!(mode(&bak), 0o600);
    assert_eq!(mode(&cfg), 0o600);
    assert_eq!(
        mode(&cfg.with_file_name(".opencode.jsonc.oc-watchdog.lock")),
        0o600
    );
    std::fs::remove_file(&bak).unwrap();
    wd(&home, &["unblock-model", "sim/gpt-5-sim"]).ok();
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), CONFIG);
    // issue 29: with nothing blocked any more, no backup is left beside it
    assert!(!bak.exists(), "a backup left after the last unblock");
    assert_eq!(mode(&cfg), 0o600);
}

/// A stand-in for `opencode` that edits the config the way a user's editor would (while the
/// real `opencode models` it then runs takes its seconds), `times` times over.
fn editing_opencode(home: &Home, cfg: &Path, times: usize) -> std::path::PathBuf {
    let real = std::env::var("OPENCODE_BIN").unwrap_or("opencode".into());
    let bin = home.join("editing-opencode");
    let counter = home.join("edits");
    std::fs::write(
        &bin,
        format!(
            "#!/bin/sh\n\
             n=$(cat {c} 2>/dev/null || echo 0)\n\
             if [ \"$n\" -lt {times} ]; then\n\
               echo $((n + 1)) > {c}\n\
               sed -i \"s|\\\"share\\\": \\\"disabled\\\",|\\\"share\\\": \\\"disabled\\\", // edit $n|\" {f}\n\
             fi\n\
             exec {real} \"$@\"\n",
            c = counter.display(),
            f = cfg.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// An edit made while `opencode models` runs is kept, and the block applied to it.
#[test]
fn an_edit_during_block_model_is_kept_and_the_block_applied_to_it() {
    let (home, cfg) = setup(CONFIG);
    let bin = editing_opencode(&home, &cfg, 1);
    let r = opencode_env(home.cmd("wd-store"))
        .args(["block-model", "sim/gpt-5-sim"])
        .env("OPENCODE_BIN", &bin)
        .run();
    r.ok();
    let after = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        after.contains("\"share\": \"disabled\", // edit 0"),
        "{after}"
    );
    assert!(after.contains("\"blacklist\": [\"gpt-5-sim\"]"), "{after}");
    assert_eq!(models(&home), ["sim/sim-model"]);
}

/// Two blocks at once: both models end up in the file, as `wd-store blocks` records them.
#[test]
fn two_blocks_at_once_keep_both_models() {
    let (home, cfg) = setup(CONFIG);
    let a = opencode_env(home.cmd("wd-store"))
        .args(["block-model", "sim/gpt-5-sim"])
        .spawn();
    // sim/sim-model is opencode's default here: refused unless forced (issue 29)
    let b = opencode_env(home.cmd("wd-store"))
        .args(["block-model", "--force", "sim/sim-model"])
        .spawn();
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = std::fs::read_to_string(&cfg).unwrap();
    assert!(after.contains("\"gpt-5-sim\""), "{after}");
    assert!(
        after.contains("\"sim-model\"]") || after.contains("\"sim-model\","),
        "{after}"
    );
    assert_eq!(blocks(&home), 2);
    assert_eq!(models(&home), Vec::<String>::new());
}

#[test]
fn opencodes_default_or_an_agents_model_is_refused_naming_the_setting_unless_forced() {
    // issue 29: blocking the config's default `model` made every new `opencode run` fail with
    // "UnknownError ... Unexpected server error"
    refused(
        CONFIG,
        "sim/sim-model",
        "sim/sim-model is opencode's default: `model` in ",
        |_| {},
    );
    let agent = CONFIG.replace(
        "\"autoupdate\": false,",
        "\"autoupdate\": false,\n  \"agent\": { \"plan\": { \"model\": \"sim/gpt-5-sim\" } },",
    );
    refused(
        &agent,
        "sim/gpt-5-sim",
        "sim/gpt-5-sim is opencode's default: `agent.plan.model` in ",
        |_| {},
    );
    let (home, cfg) = setup(&agent);
    let r = wd(&home, &["block-model", "sim/gpt-5-sim"]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("or block it anyway with --force"),
        "{}",
        r.story()
    );
    // forced: blocked, and a real opencode no longer lists it
    let r = wd(&home, &["block-model", "sim/gpt-5-sim", "--force"]);
    r.ok();
    assert_eq!(models(&home), ["sim/sim-model"]);
    let backup = format!("{}.oc-watchdog.bak", cfg.display());
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), agent);
    // the page's blocked-models section says it refuses a default
    let p = wd(&home, &["report", "--out", "-"]).stdout();
    assert!(
        p.contains("refuses opencode's default model"),
        "{}",
        &p[p.find("id=\"blocked\"").unwrap_or(0)..][..600.min(p.len())]
    );
    // unblocked: the file is what it was, and no backup is left (it held that same text)
    wd(&home, &["unblock-model", "sim/gpt-5-sim"]).ok();
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), agent);
    assert!(!Path::new(&backup).exists(), "unblock-model left {backup}");
    assert_eq!(models(&home), ["sim/gpt-5-sim", "sim/sim-model"]);
}
