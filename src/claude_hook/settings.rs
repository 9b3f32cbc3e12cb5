//! The hook's entry in Claude Code's user settings (`~/.claude/settings.json`, or
//! `$CLAUDE_CONFIG_DIR/settings.json`): `wd-store claude-hook install` adds it, `uninstall` takes
//! it away, as `deploy/install --with-stop-plugin` and `--uninstall` run them.
//!
//! Install adds one matcher group to `hooks.PreToolUse` (`{"matcher": "*", "hooks": [{"type":
//! "command", "command": "<dir of this wd-store>/wd-claude-hook", "timeout": 5}]}`) and leaves the user's
//! own settings and hooks as they were in content. The file's bytes before are kept in the
//! watchdog's state directory with the bytes written, so that uninstall, when the file is still
//! what install wrote, puts the user's bytes back exactly (or removes the file install created).
//! When the user (or Claude Code) changed the file since, uninstall removes only the watchdog's
//! entry and keeps the rest in content: serde_json, as this project builds it (without
//! `preserve_order`, which would change the key order of every record the commands write),
//! writes keys in sorted order, so that file's keys come back sorted.

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The settings file Claude Code reads for the user.
pub fn settings_file() -> PathBuf {
    crate::paths::claude_code_dir().join("settings.json")
}

fn kept_dir() -> PathBuf {
    crate::paths::state_dir()
}

/// What the user's file held before install (absent: there was no file).
const BEFORE: &str = "claude-settings.before";
/// Marks that there was no file before install.
const NONE_BEFORE: &str = "claude-settings.none";
/// What install wrote.
const WROTE: &str = "claude-settings.wrote";

/// Whether a hook command is this watchdog's (its binary, wherever installed).
fn is_ours(command: &str) -> bool {
    command.trim_end().ends_with(super::BINARY)
}

/// Whether the settings hold the watchdog's PreToolUse hook.
pub fn has_hook(settings: &Value) -> bool {
    settings["hooks"]["PreToolUse"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().into_iter().flatten())
        .any(|h| h["command"].as_str().is_some_and(is_ours))
}

/// Whether the hook is installed for this user (in Claude Code's user settings).
pub fn installed() -> bool {
    crate::paths::read_own_small(&settings_file(), 4 << 20)
        .ok()
        .flatten()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .is_some_and(|v| has_hook(&v))
}

/// The settings with the hook added (`command` runs it).
pub fn with_hook(mut settings: Value, command: &str) -> Result<Value> {
    let Some(top) = settings.as_object_mut() else {
        bail!("it is not a JSON object");
    };
    let hooks = top
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(hooks) = hooks.as_object_mut() else {
        bail!("its \"hooks\" is not an object");
    };
    let pre = hooks
        .entry("PreToolUse")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(pre) = pre.as_array_mut() else {
        bail!("its \"hooks.PreToolUse\" is not a list");
    };
    pre.push(json!({"matcher": "*",
                    "hooks": [{"type": "command", "command": command, "timeout": 5}]}));
    Ok(settings)
}

/// The settings without the watchdog's hook: its matcher groups (or its entries in a group it
/// shares), and the `PreToolUse` list and `hooks` object when nothing else is left in them.
pub fn without_hook(mut settings: Value) -> Value {
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else {
        return settings;
    };
    if let Some(pre) = hooks.get_mut("PreToolUse").and_then(Value::as_array_mut) {
        for g in pre.iter_mut() {
            if let Some(hs) = g.get_mut("hooks").and_then(Value::as_array_mut) {
                hs.retain(|h| !h["command"].as_str().is_some_and(is_ours));
            }
        }
        pre.retain(|g| g["hooks"].as_array().map_or(true, |h| !h.is_empty()));
        if pre.is_empty() {
            hooks.remove("PreToolUse");
        }
    }
    if hooks.is_empty() {
        settings.as_object_mut().map(|o| o.remove("hooks"));
    }
    settings
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).unwrap_or_default();
    b.push(b'\n');
    b
}

/// Writes `bytes` to `file` whole or not at all, with the mode it had.
fn replace(file: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("cannot make {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(bytes)?;
    let mode = std::fs::metadata(file)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::os::unix::fs::PermissionsExt::from_mode(0o644));
    std::fs::set_permissions(tmp.path(), mode)?;
    tmp.persist(file)
        .with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}

fn read(file: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(file) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", file.display())),
    }
}

/// Adds the hook (`command`) to `file`, keeping what was there in `kept`; says what it did.
pub fn install(file: &Path, kept: &Path, command: &str) -> Result<String> {
    let before = read(file)?;
    let settings: Value = match &before {
        Some(b) if !b.iter().all(u8::is_ascii_whitespace) => serde_json::from_slice(b)
            .with_context(|| format!("{}: not JSON, left as it is", file.display()))?,
        _ => json!({}),
    };
    if has_hook(&settings) {
        return Ok(format!("the stop hook is in {} already", file.display()));
    }
    let new = with_hook(settings, command)
        .with_context(|| format!("{}: left as it is", file.display()))?;
    let bytes = pretty(&new);
    crate::paths::private_dir(kept).with_context(|| format!("cannot use {}", kept.display()))?;
    match &before {
        Some(b) => {
            std::fs::write(kept.join(BEFORE), b)?;
            let _ = std::fs::remove_file(kept.join(NONE_BEFORE));
        }
        None => {
            // "dir": install makes Claude Code's directory too, and uninstall takes it away
            let made = file.parent().is_some_and(|d| !d.exists());
            std::fs::write(kept.join(NONE_BEFORE), if made { "dir" } else { "" })?;
            let _ = std::fs::remove_file(kept.join(BEFORE));
        }
    }
    replace(file, &bytes)?;
    std::fs::write(kept.join(WROTE), &bytes)?;
    Ok(format!(
        "stop hook added to {} (PreToolUse, every tool): Claude Code sessions started from now on run it",
        file.display()
    ))
}

/// Takes the hook out of `file`: its bytes from before install when the file is as install left
/// it, else only the hook's entry. Says what it did.
pub fn uninstall(file: &Path, kept: &Path) -> Result<String> {
    let now = read(file)?;
    let wrote = read(&kept.join(WROTE))?;
    let before = read(&kept.join(BEFORE))?;
    let none_before = kept.join(NONE_BEFORE).exists();
    let made_dir = read(&kept.join(NONE_BEFORE))?.is_some_and(|b| b == b"dir");
    let forget = || {
        for f in [WROTE, BEFORE, NONE_BEFORE] {
            let _ = std::fs::remove_file(kept.join(f));
        }
    };
    let said = match (&now, &wrote) {
        (Some(n), Some(w)) if n == w && (before.is_some() || none_before) => {
            match &before {
                Some(b) => replace(file, b)?,
                None => {
                    std::fs::remove_file(file)
                        .with_context(|| format!("cannot remove {}", file.display()))?;
                    // the directory install made for it, if nothing else came into it since
                    if let Some(dir) = file.parent().filter(|_| made_dir) {
                        let _ = std::fs::remove_dir(dir);
                    }
                }
            }
            format!("stop hook removed: {} is as it was before", file.display())
        }
        (Some(n), _) => {
            let v: Value = match serde_json::from_slice(n) {
                Ok(v) => v,
                Err(_) => {
                    forget();
                    return Ok(format!(
                        "{}: not JSON, left as it is (remove the `wd-claude-hook` entry by hand if it is there)",
                        file.display()
                    ));
                }
            };
            if !has_hook(&v) {
                forget();
                return Ok(format!("no stop hook in {}", file.display()));
            }
            replace(file, &pretty(&without_hook(v)))?;
            format!(
                "stop hook removed from {}; the changes made to it since the install are kept",
                file.display()
            )
        }
        (None, _) => format!("no {}: no stop hook to remove", file.display()),
    };
    forget();
    Ok(said)
}

/// `wd-store claude-hook install|uninstall`: exit 0 with what was done on stderr, 2 on an error.
pub fn command(what: &str) -> i32 {
    let file = settings_file();
    let kept = kept_dir();
    let done = match what {
        "install" => std::env::current_exe()
            .context("cannot tell where wd-store is")
            .and_then(|exe| {
                let hook = exe.with_file_name(super::BINARY);
                if !hook.is_file() {
                    bail!("no {} beside wd-store: install it first", hook.display());
                }
                install(
                    &file,
                    &kept,
                    &crate::cli::shell_word(&hook.to_string_lossy()),
                )
            }),
        "uninstall" => uninstall(&file, &kept),
        other => Err(anyhow::anyhow!(
            "unknown action {other:?}: install, uninstall, or none (the hook, reading stdin)"
        )),
    };
    match done {
        Ok(said) => {
            eprintln!("wd-store: {said}");
            0
        }
        Err(e) => {
            eprintln!("wd-store: claude-hook {what}: {e:#}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINE: &str = "{\n    \"theme\": \"dark\",\n    \"hooks\": {\"PreToolUse\": [{\"matcher\": \"Bash\", \"hooks\": [{\"type\": \"command\", \"command\": \"/home/u/guard.sh\"}]}],\n      \"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"notify-send done\"}]}]},\n    \"model\": \"opus\"\n}\n";

    #[test]
    fn install_then_uninstall_gives_back_the_users_bytes() {
        let d = tempfile::tempdir().unwrap();
        let (file, kept) = (d.path().join("c/settings.json"), d.path().join("state"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, MINE).unwrap();
        let cmd = "/home/u/.local/bin/wd-claude-hook";
        install(&file, &kept, cmd).unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert!(has_hook(&v));
        assert_eq!(
            v["hooks"]["PreToolUse"][0]["hooks"][0]["command"],
            "/home/u/guard.sh"
        );
        assert_eq!(v["hooks"]["PreToolUse"][1]["hooks"][0]["command"], cmd);
        assert_eq!(
            v["hooks"]["Stop"][0]["hooks"][0]["command"],
            "notify-send done"
        );
        assert_eq!(
            (v["theme"].as_str(), v["model"].as_str()),
            (Some("dark"), Some("opus"))
        );
        // twice is once
        assert!(install(&file, &kept, cmd).unwrap().contains("already"));
        uninstall(&file, &kept).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), MINE);
        assert!(!kept.join(WROTE).exists());
    }

    #[test]
    fn a_file_install_made_goes_and_one_edited_since_keeps_the_edits() {
        let d = tempfile::tempdir().unwrap();
        let (file, kept) = (d.path().join("settings.json"), d.path().join("state"));
        install(&file, &kept, "wd-claude-hook").unwrap();
        uninstall(&file, &kept).unwrap();
        assert!(!file.exists());
        assert!(d.path().exists());
        // a directory install made goes with the file, when nothing else came into it
        let made = d.path().join("made/settings.json");
        install(&made, &kept, "wd-claude-hook").unwrap();
        uninstall(&made, &kept).unwrap();
        assert!(!d.path().join("made").exists());
        std::fs::write(&file, MINE).unwrap();
        install(&file, &kept, "wd-claude-hook").unwrap();
        let mut v: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        v["theme"] = json!("light");
        std::fs::write(&file, v.to_string()).unwrap();
        uninstall(&file, &kept).unwrap();
        let after: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let mut want: Value = serde_json::from_str(MINE).unwrap();
        want["theme"] = json!("light");
        assert_eq!(after, want);
    }

    #[test]
    fn a_file_that_is_not_json_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let (file, kept) = (d.path().join("settings.json"), d.path().join("state"));
        std::fs::write(&file, "{ not json").unwrap();
        assert!(install(&file, &kept, "wd-claude-hook").is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{ not json");
    }
}
