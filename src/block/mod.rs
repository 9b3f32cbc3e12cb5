//! Blocking a model the way opencode itself supports it: the model's id in its provider's
//! `blacklist` in the user's opencode config (`provider.<id>.blacklist`), edited surgically so
//! comments and formatting stay, written atomically with a backup beside it, and recorded in
//! the watchdog database so `unblock-model` undoes exactly what `block-model` did. This is
//! opencode's part of the tree, as its reading wing ([`crate::sources::opencode`]) and its stop
//! ([`crate::stop::opencode`]) are: the config is read with opencode's own grammar ([`jsonc`]),
//! which nothing else uses.
//!
//! Two edits never interleave: a block or unblock holds a lock on `.<config>.oc-watchdog.lock`
//! beside the config from its read to its record, and the rename happens only if the file
//! still holds what was read (an edit made meanwhile, by the user's editor say, is read again
//! and the block applied to it; after three such changes nothing is written). Every file
//! written beside the config (the new content, the backup) keeps the config's mode, so a 0600
//! config holding an `apiKey` never gets a 0644 copy.
//!
//! opencode drops a blacklisted model while it builds its provider list, once per process
//! (per project instance): `opencode models` and the model pickers stop listing it, and asking
//! for it (`opencode run -m`, a prompt naming it, an agent configured with it) fails with
//! "model not found". A process already running keeps its list until restarted.
//!
//! So the model opencode runs with by default (the config's `model` or `small_model`, an
//! agent's or a mode's `model`) is refused without `--force`, naming the setting: blocked,
//! every new `opencode run` with that default fails ("UnknownError ... Unexpected server
//! error"). An unblock leaves no backup behind: the file is what it was before the block, and
//! the backup of that block goes once no other block of the file is in force.

pub mod jsonc;

use crate::config::Config;
use crate::store::Store;
use anyhow::{anyhow, bail, Context, Result};
use jsonc::{Kind, Node};
use rusqlite::{params, OptionalExtension};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `block-model` had to create (the most it created), so unblock removes just that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Only the model's entry in an existing `blacklist`.
    Element,
    /// The provider's `blacklist` array.
    Blacklist,
    /// The provider's entry under `provider`.
    ProviderEntry,
    /// The top-level `provider` object.
    Provider,
    /// The config file itself.
    File,
}

impl Created {
    pub fn as_str(self) -> &'static str {
        match self {
            Created::Element => "element",
            Created::Blacklist => "blacklist",
            Created::ProviderEntry => "provider_entry",
            Created::Provider => "provider",
            Created::File => "file",
        }
    }
    fn parse(s: &str) -> Created {
        match s {
            "blacklist" => Created::Blacklist,
            "provider_entry" => Created::ProviderEntry,
            "provider" => Created::Provider,
            "file" => Created::File,
            _ => Created::Element,
        }
    }
}

/// The text a new config file starts from.
const NEW_FILE: &str = "{\n  \"$schema\": \"https://opencode.ai/config.json\"\n}\n";

/// `provider/model` split at the first slash (model ids may hold more slashes).
pub fn split(model: &str) -> Result<(&str, &str)> {
    match model.split_once('/') {
        Some((p, m)) if !p.is_empty() && !m.is_empty() => Ok((p, m)),
        _ => bail!("{model:?} is not PROVIDER/MODEL (as `opencode models` lists them)"),
    }
}

/// The global opencode config files, highest precedence first (opencode merges `config.json`,
/// `opencode.json`, `opencode.jsonc` in that order, later ones winning).
fn candidates() -> Vec<PathBuf> {
    let dir = crate::paths::opencode_config_dir();
    ["opencode.jsonc", "opencode.json", "config.json"]
        .iter()
        .map(|f| dir.join(f))
        .collect()
}

/// The file to edit for `provider`: the configured one; else the highest-precedence file that
/// already has the provider's blacklist (a blacklist in another file would be replaced, not
/// merged); else the highest-precedence existing file; else a new `opencode.json`.
pub fn config_file(cfg: &Config, provider: &str) -> Result<PathBuf> {
    if let Some(p) = &cfg.report.opencode_config {
        return Ok(p.clone());
    }
    let files = candidates();
    let existing: Vec<&PathBuf> = files.iter().filter(|p| p.exists()).collect();
    for f in &existing {
        if let Ok(text) = std::fs::read_to_string(f) {
            if let Ok(root) = jsonc::parse(&text) {
                if root
                    .get("provider")
                    .and_then(|p| p.get(provider))
                    .and_then(|p| p.get("blacklist"))
                    .is_some()
                {
                    return Ok((*f).clone());
                }
            }
        }
    }
    Ok(existing
        .first()
        .map(|p| (*p).clone())
        .unwrap_or_else(|| files[1].clone()))
}

/// Checks that the parts of the config the edit goes through have the types opencode wants.
fn check_shape(root: &Node, provider: &str) -> Result<()> {
    let want = |n: &Node, path: &str, obj: bool| -> Result<()> {
        let ok = if obj {
            matches!(n.kind, Kind::Object(_))
        } else {
            matches!(&n.kind, Kind::Array(vs) if vs.iter().all(|v| matches!(v.kind, Kind::Str(_))))
        };
        if !ok {
            bail!(
                "{path} is {}; opencode wants {} (opencode would refuse this file too)",
                n.what(),
                if obj {
                    "an object"
                } else {
                    "an array of model ids"
                }
            );
        }
        Ok(())
    };
    want(root, "the top level", true)?;
    if let Some(p) = root.get("provider") {
        want(p, "provider", true)?;
        if let Some(e) = p.get(provider) {
            want(e, &format!("provider.{provider}"), true)?;
            if let Some(b) = e.get("blacklist") {
                want(b, &format!("provider.{provider}.blacklist"), false)?;
            }
        }
    }
    Ok(())
}

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// `text` with `model` added to `provider`'s blacklist, and what had to be created.
/// `None` when it is already there.
pub fn add(text: &str, provider: &str, model: &str) -> Result<Option<(String, Created)>> {
    let root = jsonc::parse(text)?;
    check_shape(&root, provider)?;
    let Some(p) = root.get("provider") else {
        let item = format!(
            "\"provider\": {{{}: {{\"blacklist\": [{}]}}}}",
            q(provider),
            q(model)
        );
        return Ok(Some((
            jsonc::prepend(text, &root, &item)?,
            Created::Provider,
        )));
    };
    let Some(e) = p.get(provider) else {
        let item = format!("{}: {{\"blacklist\": [{}]}}", q(provider), q(model));
        return Ok(Some((
            jsonc::prepend(text, p, &item)?,
            Created::ProviderEntry,
        )));
    };
    let Some(b) = e.get("blacklist") else {
        let item = format!("\"blacklist\": [{}]", q(model));
        return Ok(Some((jsonc::prepend(text, e, &item)?, Created::Blacklist)));
    };
    if let Kind::Array(vs) = &b.kind {
        if vs.iter().any(|v| v.kind == Kind::Str(model.into())) {
            return Ok(None);
        }
    }
    Ok(Some((
        jsonc::prepend(text, b, &q(model))?,
        Created::Element,
    )))
}

/// `text` without `model` in `provider`'s blacklist, removing the containers `created` says
/// block-model made when nothing else is in them now. `None` when the model is not there.
pub fn take(text: &str, provider: &str, model: &str, created: Created) -> Result<Option<String>> {
    let root = jsonc::parse(text)?;
    check_shape(&root, provider)?;
    let Some(p) = root.get("provider") else {
        return Ok(None);
    };
    let Some(e) = p.get(provider) else {
        return Ok(None);
    };
    let Some(b) = e.get("blacklist") else {
        return Ok(None);
    };
    let Kind::Array(vs) = &b.kind else {
        return Ok(None);
    };
    let Some(el) = vs.iter().find(|v| v.kind == Kind::Str(model.into())) else {
        return Ok(None);
    };
    let only = |n: &Node, key: &str| match &n.kind {
        Kind::Object(ms) => ms.len() == 1 && ms[0].key == key,
        _ => false,
    };
    let member_at = |obj: &Node, key: &str| match &obj.kind {
        Kind::Object(ms) => ms.iter().rev().find(|m| m.key == key).map(|m| m.key_start),
        _ => None,
    };
    let level = match created {
        Created::Element => 0,
        Created::Blacklist => 1,
        Created::ProviderEntry => 2,
        Created::Provider | Created::File => 3,
    };
    let out = if level >= 3 && vs.len() == 1 && only(e, "blacklist") && only(p, provider) {
        jsonc::remove(text, &root, member_at(&root, "provider").unwrap())?
    } else if level >= 2 && vs.len() == 1 && only(e, "blacklist") {
        jsonc::remove(text, p, member_at(p, provider).unwrap())?
    } else if level >= 1 && vs.len() == 1 {
        jsonc::remove(text, e, member_at(e, "blacklist").unwrap())?
    } else {
        jsonc::remove(text, b, el.start)?
    };
    Ok(Some(out))
}

/// Why [`replace`] wrote nothing.
#[derive(Debug)]
enum Replace {
    /// The file no longer holds what was read: someone edited it meanwhile.
    Changed,
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Replace {
    fn from(e: anyhow::Error) -> Replace {
        Replace::Failed(e)
    }
}

/// The mode for files written beside `path`: its own, or 0600 when it does not exist yet (a
/// new config may soon hold keys).
fn mode_of(path: &Path) -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.permissions())
        .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o600))
}

/// Writes `old` to `<path>.oc-watchdog.bak` with `path`'s mode (created with it, so the copy is
/// never readable by more users than the original, not even for a moment).
fn write_backup(path: &Path, old: &str) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let backup = PathBuf::from(format!("{}.oc-watchdog.bak", path.display()));
    let mode = mode_of(path);
    let why = || {
        format!(
            "{}: cannot write the backup {}",
            path.display(),
            backup.display()
        )
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode.mode() & 0o7777)
        .open(&backup)
        .with_context(why)?;
    // an older backup keeps its own mode on open: set it
    f.set_permissions(mode).with_context(why)?;
    f.write_all(old.as_bytes()).with_context(why)?;
    f.sync_all().with_context(why)?;
    Ok(backup)
}

/// Holds the lock that serialises edits of one config: an exclusive transaction on a small
/// SQLite file beside it (`.<name>.oc-watchdog.lock`, 0600, left in place: removing a lock
/// file races with the next taker). SQLite's file locks are released when the process ends,
/// however it ends, so a killed block never leaves the config locked. A second block waits
/// for the first (up to two minutes: `opencode models` may take one).
fn lock(path: &Path) -> Result<rusqlite::Connection> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lock = path.with_file_name(format!(".{name}.oc-watchdog.lock"));
    let why = || format!("{}: cannot lock {}", path.display(), lock.display());
    if let Some(dir) = lock.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create {}", path.display(), dir.display()))?;
    }
    // created 0600 before SQLite opens it (SQLite would create it with the umask's mode)
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock)
        .with_context(why)?;
    let conn = rusqlite::Connection::open(&lock).with_context(why)?;
    conn.busy_timeout(Duration::from_secs(120))
        .with_context(why)?;
    conn.execute_batch("BEGIN EXCLUSIVE").with_context(why)?;
    Ok(conn)
}

/// Writes `text` over `path` atomically (a temp file beside it, renamed), keeping its mode,
/// after copying the old content to `<path>.oc-watchdog.bak`; only if the file still holds
/// `old` (`None`: it still does not exist). `backup`: copy the old content first.
fn replace(
    path: &Path,
    old: Option<&str>,
    text: &str,
    backup: bool,
) -> std::result::Result<PathBuf, Replace> {
    let shown = path.display();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let copy = PathBuf::from(format!("{}.oc-watchdog.bak", path.display()));
    let mut tmp = tempfile::Builder::new()
        .prefix(".opencode-config.")
        .tempfile_in(dir)
        .with_context(|| format!("{shown}: cannot create a temp file in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())
        .with_context(|| format!("{shown}: cannot write the new content"))?;
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("{shown}: cannot sync the new content"))?;
    std::fs::set_permissions(tmp.path(), mode_of(path))
        .with_context(|| format!("{shown}: cannot keep its mode"))?;
    // the last look before the rename: an edit since the read would be lost
    if read(path)?.as_deref() != old {
        return Err(Replace::Changed);
    }
    if let Some(old) = old.filter(|_| backup) {
        write_backup(path, old)?;
    }
    tmp.persist(path)
        .map_err(|e| anyhow!("{shown}: cannot replace it: {}", e.error))?;
    Ok(copy)
}

/// How many times a block is applied again to a config edited meanwhile before giving up.
const ATTEMPTS: usize = 3;

/// Reads the config to edit, refusing what cannot be edited safely. `None`: no file yet.
fn read(path: &Path) -> Result<Option<String>> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("{shown}: {e}")),
    };
    if meta.permissions().readonly() {
        bail!("{shown}: the file is read-only; nothing written (make it writable, or edit it by hand)");
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("{shown}: cannot read"))?;
    Ok(Some(text))
}

/// The models opencode lists for `provider` (`opencode models PROVIDER`), or why not.
fn opencode_models(bin: &str, provider: &str) -> std::result::Result<Vec<String>, String> {
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/".into());
    let child = std::process::Command::new(bin)
        .args(["models", provider])
        .current_dir(&home)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {bin}: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(format!("{bin} models: {e}")),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .arg(id.to_string())
                .status();
            return Err(format!("{bin} models {provider}: no answer within 60 s"));
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || stderr.contains("Error") {
        let msg = strip_ansi(stderr.trim());
        return Err(format!(
            "`{bin} models {provider}` says: {}",
            msg.lines().next().unwrap_or("(nothing)")
        ));
    }
    Ok(stdout
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| l.contains('/'))
        .collect())
}

fn strip_ansi(s: &str) -> String {
    let mut o = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            o.push(c);
        }
    }
    o
}

fn who() -> String {
    // a shell sets USER; a unit, a cron job or a cleared environment may not: ask the system
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            let status = std::fs::read_to_string("/proc/self/status").ok()?;
            let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
            user_of(&status, &passwd)
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{user}@{}", crate::paths::hostname())
}

/// The name of the real uid in `/proc/self/status` (`Uid:` line), as `/etc/passwd` has it;
/// the uid in digits when no entry names it.
fn user_of(status: &str, passwd: &str) -> Option<String> {
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?;
    let name = passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)? == uid).then(|| name.to_string())
    });
    Some(name.unwrap_or_else(|| format!("uid {uid}")))
}

/// The settings of these opencode configs that make `model` a default (`model`, `small_model`,
/// `agent.NAME.model`, `mode.NAME.model`), each as `SETTING in FILE`. A file that cannot be
/// read or parsed names none (the edit itself reports the file it edits).
pub fn defaults_naming(files: &[PathBuf], model: &str) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        let Ok(root) = jsonc::parse(&text) else {
            continue;
        };
        let is = |n: Option<&Node>| matches!(n.map(|n| &n.kind), Some(Kind::Str(m)) if m == model);
        let mut hit = |setting: String| out.push(format!("`{setting}` in {}", f.display()));
        for key in ["model", "small_model"] {
            if is(root.get(key)) {
                hit(key.to_string());
            }
        }
        for group in ["agent", "mode"] {
            if let Some(Kind::Object(ms)) = root.get(group).map(|n| &n.kind) {
                for m in ms {
                    if is(m.value.get("model")) {
                        hit(format!("{group}.{}.model", m.key));
                    }
                }
            }
        }
    }
    out
}

/// What `block` did.
#[derive(Debug)]
pub struct BlockOutcome {
    pub model: String,
    pub file: PathBuf,
    pub backup: Option<PathBuf>,
    pub created: Option<Created>,
    pub message: String,
}

/// `wd-store block-model`.
pub fn block(
    store: &mut Store,
    cfg: &Config,
    model: &str,
    reason: Option<&str>,
    opencode_bin: &str,
    force: bool,
    now: i64,
) -> Result<BlockOutcome> {
    let (provider, id) = split(model)?;
    let path = config_file(cfg, provider)?;
    // edit the file a symlink points to, not the link
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let shown = path.display().to_string();
    let _lock = lock(&path)?;
    let old = read(&path)?;
    let base = old.clone().unwrap_or_else(|| NEW_FILE.to_string());
    let edit = add(&base, provider, id).map_err(|e| anyhow!("{shown}: {e:#}; nothing written"))?;
    let Some(_) = edit else {
        return Ok(BlockOutcome {
            model: model.into(),
            file: path,
            backup: None,
            created: None,
            message: format!(
                "{model} is already in provider.{provider}.blacklist of {shown}; nothing written"
            ),
        });
    };
    if !force {
        let mut files = vec![path.clone()];
        files.extend(
            candidates()
                .into_iter()
                .filter(|c| std::fs::canonicalize(c).is_ok_and(|c| c != path)),
        );
        let uses = defaults_naming(&files, model);
        if !uses.is_empty() {
            bail!(
                "{model} is opencode's default: {}; blocked, every new opencode that starts with it fails (\"Unexpected server error\"); nothing written (set another model there first, or block it anyway with --force)",
                uses.join(", ")
            );
        }
    }
    let known = opencode_models(opencode_bin, provider);
    match &known {
        Ok(list) if list.iter().any(|m| m == model) => {}
        Ok(list) => {
            let near: Vec<&str> = list.iter().map(String::as_str).take(8).collect();
            bail!(
                "{shown}: opencode lists no model {model} (it lists {}); nothing written",
                if near.is_empty() {
                    "none for this provider".to_string()
                } else {
                    near.join(", ")
                }
            );
        }
        Err(why) => {
            // opencode cannot answer here: fall back to the models the watchdog has seen
            let seen: bool = store
                .conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM verdicts WHERE model = ?1)",
                    params![model],
                    |r| r.get(0),
                )
                .unwrap_or(false);
            if !seen {
                bail!("{shown}: cannot tell whether {model} exists ({why}), and the watchdog has never seen it; nothing written");
            }
        }
    }
    // `opencode models` took a while: apply the block to what the file holds now, and write
    // it only if nobody changed the file since that read
    let mut old = old;
    let mut attempt = 0;
    let (backup, created) = loop {
        attempt += 1;
        let base = old.clone().unwrap_or_else(|| NEW_FILE.to_string());
        let Some((text, c)) =
            add(&base, provider, id).map_err(|e| anyhow!("{shown}: {e:#}; nothing written"))?
        else {
            bail!("{shown}: {model} was added to provider.{provider}.blacklist meanwhile, by another hand; nothing written");
        };
        let created = if old.is_none() { Created::File } else { c };
        match replace(&path, old.as_deref(), &text, true) {
            Ok(b) => break (b, created),
            Err(Replace::Failed(e)) => return Err(e),
            Err(Replace::Changed) if attempt < ATTEMPTS => old = read(&path)?,
            Err(Replace::Changed) => bail!(
                "{shown}: the file changed {ATTEMPTS} times while block-model edited it; nothing written (try again when it is not being edited)"
            ),
        }
    };
    let tx = store.write()?;
    tx.execute(
        "INSERT INTO blocks (model, file, created, reason, who, t) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![model, shown, created.as_str(), reason, who(), now],
    )?;
    tx.commit()?;
    Ok(BlockOutcome {
        model: model.into(),
        file: path,
        backup: old.is_some().then_some(backup),
        created: Some(created),
        message: format!(
            "{model} blocked in {shown}: new opencode processes no longer offer it; running ones keep it until restarted. Undo: {}",
            crate::cli::shell_line("wd-store", &["unblock-model", model])
        ),
    })
}

/// `wd-store unblock-model`: undoes the latest block of `model` still in force.
pub fn unblock(store: &mut Store, model: &str, now: i64) -> Result<BlockOutcome> {
    let (provider, id) = split(model)?;
    let rec: Option<(i64, String, String)> = store
        .conn
        .query_row(
            "SELECT id, file, created FROM blocks WHERE model = ?1 AND unblocked IS NULL ORDER BY id DESC LIMIT 1",
            params![model],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((rid, file, created)) = rec else {
        bail!("{model} was not blocked by wd-store block-model (see the page's Blocked models); nothing written");
    };
    let path = PathBuf::from(&file);
    let created = Created::parse(&created);
    let _lock = lock(&path)?;
    let old = read(&path)?;
    let message = match old {
        None => format!("{file} is gone; nothing to undo"),
        Some(old) => match take(&old, provider, id, created)
            .map_err(|e| anyhow!("{file}: {e:#}; nothing written"))?
        {
            None => format!("{model} is no longer in {file} (removed by hand); nothing written"),
            Some(text) if created == Created::File && text == NEW_FILE => {
                std::fs::remove_file(&path).with_context(|| format!("{file}: cannot remove"))?;
                format!("{model} unblocked: removed {file}, which block-model had created")
            }
            Some(text) => {
                match replace(&path, Some(&old), &text, false) {
                    Ok(_) => {}
                    Err(Replace::Failed(e)) => return Err(e),
                    Err(Replace::Changed) => bail!(
                        "{file}: the file changed while unblock-model edited it; nothing written (run it again)"
                    ),
                }
                format!("{model} unblocked in {file}: new opencode processes offer it again")
            }
        },
    };
    let tx = store.write()?;
    tx.execute(
        "UPDATE blocks SET unblocked = ?2, unblocked_by = ?3 WHERE id = ?1",
        params![rid, now, who()],
    )?;
    let others: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM blocks WHERE file = ?1 AND unblocked IS NULL)",
        params![file],
        |r| r.get(0),
    )?;
    tx.commit()?;
    // the file is what it was before the block: its backup says nothing more, unless another
    // block of the file still stands on it
    if !others {
        let _ = std::fs::remove_file(format!("{file}.oc-watchdog.bak"));
    }
    Ok(BlockOutcome {
        model: model.into(),
        file: path,
        backup: None,
        created: Some(created),
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_the_real_uids_name_when_the_environment_says_none() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nann:x:1000:1000:Ann:/home/ann:/bin/sh\n";
        let status = |uid: &str| format!("Name:\twd-store\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n");
        assert_eq!(user_of(&status("1000"), passwd).as_deref(), Some("ann"));
        assert_eq!(user_of(&status("0"), passwd).as_deref(), Some("root"));
        assert_eq!(
            user_of(&status("1001"), passwd).as_deref(),
            Some("uid 1001")
        );
        assert_eq!(user_of("Name:\tx\n", passwd), None);
    }

    const CFG: &str = "{\n  // mine\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"provider\": {\n    \"sim\": {\n      \"npm\": \"x\", // inline\n      \"models\": {}\n    }\n  }\n}\n";

    #[test]
    fn add_then_take_gives_the_file_back_at_every_level() {
        for (text, created) in [
            (CFG.to_string(), Created::Blacklist),
            (
                CFG.replace("\"npm\"", "\"blacklist\": [\"old\"],\n      \"npm\""),
                Created::Element,
            ),
            (CFG.replace("\"sim\"", "\"other\""), Created::ProviderEntry),
            (NEW_FILE.to_string(), Created::Provider),
            ("{}".to_string(), Created::Provider),
        ] {
            let (t2, c) = add(&text, "sim", "sim-model").unwrap().unwrap();
            assert_eq!(c, created, "{t2}");
            let v: Vec<String> =
                serde_json::from_value(json5ish(&t2)["provider"]["sim"]["blacklist"].clone())
                    .unwrap();
            assert!(v.contains(&"sim-model".to_string()), "{t2}");
            assert_eq!(take(&t2, "sim", "sim-model", c).unwrap().unwrap(), text);
            assert_eq!(add(&t2, "sim", "sim-model").unwrap(), None);
        }
    }

    /// The JSON value of JSONC text (comments stripped by re-emitting each node).
    fn json5ish(t: &str) -> serde_json::Value {
        fn val(t: &str, n: &Node) -> serde_json::Value {
            match &n.kind {
                Kind::Object(ms) => serde_json::Value::Object(
                    ms.iter()
                        .map(|m| (m.key.clone(), val(t, &m.value)))
                        .collect(),
                ),
                Kind::Array(vs) => vs.iter().map(|v| val(t, v)).collect(),
                Kind::Str(s) => s.clone().into(),
                Kind::Scalar => serde_json::from_str(&t[n.start..n.end]).unwrap(),
            }
        }
        val(t, &jsonc::parse(t).unwrap())
    }

    #[test]
    fn wrong_types_are_refused_naming_the_key() {
        let t = CFG.replace("\"npm\"", "\"blacklist\": \"sim-model\",\n      \"npm\"");
        assert_eq!(
            add(&t, "sim", "m").unwrap_err().to_string(),
            "provider.sim.blacklist is a string; opencode wants an array of model ids (opencode would refuse this file too)"
        );
        assert!(add("[]", "sim", "m").is_err());
        assert!(add("{\"provider\": []}", "sim", "m").is_err());
    }

    /// The last look before the rename: a file that no longer holds what was read is left
    /// as it is, with no backup written (block-model then reads it again, or gives up).
    #[test]
    fn a_file_changed_since_the_read_is_not_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("opencode.json");
        std::fs::write(&f, "{\"edited\": true}").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let r = replace(&f, Some("{}"), "{\"provider\": {}}", true);
        assert!(matches!(r, Err(Replace::Changed)), "{r:?}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{\"edited\": true}");
        assert!(!dir.path().join("opencode.json.oc-watchdog.bak").exists());
        // a file that appeared since a read that found none is not replaced either
        let r = replace(&f, None, "{}", true);
        assert!(matches!(r, Err(Replace::Changed)), "{r:?}");
        // unchanged: replaced, the backup and the new file both 0600
        let b = replace(&f, Some("{\"edited\": true}"), "{}", true).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "{}");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "{\"edited\": true}");
        for p in [&f, &b] {
            let m = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(m, 0o600, "{}", p.display());
        }
    }

    #[test]
    fn model_ids_keep_their_slashes() {
        assert_eq!(
            split("openrouter/anthropic/claude").unwrap(),
            ("openrouter", "anthropic/claude")
        );
        assert!(split("nomodel").is_err());
    }
}
