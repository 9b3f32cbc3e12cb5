//! Credentials only to our own processes (issue 30, point 1): a second Unix user created by the
//! test runs a stand-in for `opencode serve` started as `exec -a opencode` with the watchdog's
//! HOME in its environment; it is neither read nor sent the server password unless the config
//! names its uid, and no server gets the password before it answers 401.

use crate::support::{repo, Home};
use base64::Engine;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Unix user made for one test, removed with it.
struct User {
    name: String,
    uid: u32,
}

impl User {
    fn create() -> Result<User, String> {
        let name = format!("ocwd{}", std::process::id());
        let out = Command::new("useradd")
            .args(["-M", "-r", "-s", "/usr/sbin/nologin", &name])
            .output()
            .map_err(|e| format!("useradd: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "useradd {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        Ok(User { name, uid })
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

/// A stand-in started as `opencode` (as `user`, or as the watchdog's own user), with `home`
/// as its HOME; it requires `auth` when given.
struct StandIn {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl StandIn {
    fn start(
        dir: &Path,
        tag: &str,
        user: Option<&str>,
        home: &Path,
        auth: Option<&str>,
    ) -> StandIn {
        let script = dir.join("standin.py");
        let port_file = dir.join(format!("{tag}.port"));
        let log = dir.join(format!("{tag}.log"));
        let mut sh = format!(
            "exec -a opencode /usr/bin/python3 '{}' '{}' '{}'",
            script.display(),
            port_file.display(),
            log.display()
        );
        if let Some(a) = auth {
            sh.push_str(&format!(" '{a}'"));
        }
        let mut cmd = match user {
            Some(u) => {
                let mut c = Command::new("/usr/sbin/runuser");
                // runuser sets HOME to the user's: give it ours, as in the report
                let home = format!("HOME={}", home.display());
                c.args(["-u", u, "--", "/usr/bin/env", &home, "/bin/bash", "-c", &sh]);
                c
            }
            None => {
                let mut c = Command::new("/bin/bash");
                c.args(["-c", &sh]);
                c
            }
        };
        // its own process group, so that the python under runuser goes with it
        let child = cmd
            .process_group(0)
            .env_clear()
            .env("HOME", home)
            .env("PATH", "/usr/bin:/bin")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().unwrap();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{tag} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        StandIn { child, port, log }
    }

    /// The Authorization header of every request it got, in order.
    fn auths(&self) -> Vec<Option<String>> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["auth"]
                    .as_str()
                    .map(String::from)
            })
            .collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.child.wait();
    }
}

fn sources(home: &Home, cfg: &str) -> Vec<Value> {
    let conf = home.join("watchdog.toml");
    std::fs::write(&conf, cfg).unwrap();
    let r = home
        .cmd("oc-sessions")
        .args(["--no-db", "--config", conf.to_str().unwrap()])
        .env("OPENCODE_SERVER_PASSWORD", "S3cretServerPw")
        .run();
    r.ok();
    r.kind("source")
}

fn source_on(sources: &[Value], port: u16) -> Option<&Value> {
    let url = format!("http://127.0.0.1:{port}");
    sources.iter().find(|s| s["source"] == url.as_str())
}

#[test]
fn another_users_opencode_is_not_read_nor_sent_the_password_and_ours_gets_it_only_after_a_401() {
    let user = match User::create() {
        Ok(u) => u,
        Err(e) => {
            eprintln!("skipped: cannot create a second Unix user ({e})");
            return;
        }
    };
    let home = Home::new();
    // a directory the other user can read the script from and write its log to
    let dir = std::env::temp_dir().join(format!("ocwd-owners-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::copy(
        repo().join("tests/support/standin.py"),
        dir.join("standin.py"),
    )
    .unwrap();
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("opencode:S3cretServerPw")
    );
    let theirs = StandIn::start(&dir, "theirs", Some(&user.name), home.path(), None);
    let ours = StandIn::start(&dir, "ours", None, home.path(), Some(&want));
    let me = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap();

    for mode in ["database", "all"] {
        let got = sources(&home, &format!("[opencode]\ndiscover = \"{mode}\"\n"));
        assert!(
            source_on(&got, theirs.port).is_none(),
            "{mode}: another user's process is a source: {got:?}"
        );
        let s = source_on(&got, ours.port).unwrap_or_else(|| panic!("{mode}: {got:?}"));
        assert_eq!(s["uid"], me, "{mode}: the source names its user");
    }
    assert_eq!(
        theirs.auths(),
        Vec::<Option<String>>::new(),
        "never contacted"
    );
    // per run: the first request without credentials (401), then every one with them
    let a = ours.auths();
    assert_eq!(a[0], None, "{a:?}");
    assert_eq!(a.iter().filter(|x| x.is_none()).count(), 2, "{a:?}");
    for (i, x) in a.iter().enumerate() {
        match x {
            None => assert_eq!(a.get(i + 1).cloned().flatten(), Some(want.clone()), "{a:?}"),
            Some(x) => assert_eq!(x, &want),
        }
    }

    // named in the config, the other user's server is read, and is still never sent the
    // password (it never asked for it)
    let got = sources(
        &home,
        &format!(
            "[opencode]\ndiscover = \"all\"\ndiscover_uids = [{}]\n",
            user.uid
        ),
    );
    let s = source_on(&got, theirs.port).unwrap_or_else(|| panic!("{got:?}"));
    assert_eq!(s["uid"], user.uid);
    let a = theirs.auths();
    assert!(!a.is_empty() && a.iter().all(Option::is_none), "{a:?}");
    drop(theirs);
    drop(ours);
    std::fs::remove_dir_all(&dir).unwrap();
}
