//! Nothing raw into the desktop (issue 30, point 3): an agent name with a NUL, pango markup,
//! a terminal escape, a bidi override and 400 characters reaches a real dunst (on a private
//! D-Bus session bus) shown as written, visibly and capped, and the delivery is sent.

use crate::support::desktop::Desktop;
use crate::support::Home;

#[test]
fn an_agent_name_with_a_nul_markup_escapes_and_bidi_reaches_dunst_visibly_and_capped() {
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let db = home.join("w.db");
    let tag = format!("agent{}", std::process::id());
    let agent = format!(
        "<b>{tag}</b>\\u0000\\u001b[31m safe\\u202etxt.exe {}",
        "y".repeat(400)
    );
    let verdict = format!(
        r#"{{"kind":"verdict","session":"ses_pop","root":"ses_pop","agent":"{agent}","calls":50,"flagged":true,"reasons":["top"],"signals":{{"top":20,"top_target":"bash make"}},"landed_in_window":false,"calls_since_landed":50,"cost_since_landed":0.5,"t":1796000000000}}"#
    );
    let r = home
        .cmd("wd-alert")
        .args([
            "--db",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .stdin(format!("{verdict}\n"))
        .run();
    r.ok();
    let status: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT status || ' ' || detail FROM deliveries", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        status.starts_with("sent notification "),
        "{status}\n{}",
        r.story()
    );
    let seen = d.wait_for(&tag, 1);
    assert_eq!(seen.len(), 1, "{:?}", d.seen());
    let s = &seen[0];
    for text in [&s.summary, &s.body] {
        assert!(!text.contains('\0') && !text.contains('\u{1b}') && !text.contains('\u{202e}'));
        assert!(
            !text.contains(&format!("<b>{tag}")),
            "markup passed raw: {text}"
        );
    }
    let shown = format!("{}\n{}", s.summary, s.body);
    assert!(
        shown.contains(&format!("&lt;b&gt;{tag}&lt;/b&gt;")),
        "{shown}"
    );
    // the controls shown as <U+XXXX>, escaped for dunst's markup
    assert!(
        shown.contains("&lt;U+0000&gt;&lt;U+001B&gt;[31m safe&lt;U+202E&gt;txt.exe"),
        "{shown}"
    );
    // capped with an ellipsis (escaping lengthens what was capped); the last lines survive
    assert!(s.summary.ends_with("yyy…"), "{}", s.summary);
    assert!(s.summary.chars().count() < 200, "{}", s.summary);
    let lines: Vec<&str> = s.body.lines().collect();
    assert!(
        lines[0].ends_with('…') && lines[0].chars().count() < 400,
        "{}",
        lines[0]
    );
    assert_eq!(
        lines.last(),
        Some(&"Look closer: wd-store loops"),
        "{shown}"
    );
}
