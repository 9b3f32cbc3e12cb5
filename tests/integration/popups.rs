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
    }
    // the body is markup to dunst: escaped; the summary is plain text: as written (issue 42:
    // escaped as well, it read `&lt;b&gt;` on screen)
    assert!(
        !s.body.contains(&format!("<b>{tag}")),
        "markup passed raw: {}",
        s.body
    );
    assert!(
        s.body.contains(&format!("&lt;b&gt;{tag}&lt;/b&gt;")),
        "{}",
        s.body
    );
    assert!(
        s.summary.contains(&format!("<b>{tag}</b><U+0000>")),
        "{}",
        s.summary
    );
    // the controls shown as <U+XXXX>, escaped for dunst's markup in the body
    assert!(
        s.body
            .contains("&lt;U+0000&gt;&lt;U+001B&gt;[31m safe&lt;U+202E&gt;txt.exe"),
        "{}",
        s.body
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
        "{}",
        s.body
    );
}

#[test]
fn a_title_with_markup_or_a_command_with_ampersands_read_escaped_in_the_popup_summary() {
    // issue 42: the summary was markup-escaped, though notification servers show it as plain
    // text (dunst escapes it itself into its format): titles read `&lt;b&gt;`, and a loop on a
    // command with `&&` showed `&amp;&amp;`
    let d = Desktop::shared();
    let home = Home::new();
    let cfg = home.join("watchdog.toml");
    std::fs::write(&cfg, "[[channels]]\nname = \"desk\"\ntype = \"desktop\"\n").unwrap();
    let db = home.join("w.db");
    let tag = format!("amp{}", std::process::id());
    let verdict = serde_json::json!({"kind": "verdict", "session": "ses_amp", "root": "ses_amp",
        "agent": format!("<b>{tag}</b>"), "calls": 50, "flagged": true, "reasons": ["top"],
        "signals": {"top": 20, "top_target": "bash make && make test"}, "landed_in_window": false,
        "calls_since_landed": 50, "cost_since_landed": 0.5, "t": 1796000000000i64});
    home.cmd("wd-alert")
        .args([
            "--db",
            db.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env("DBUS_SESSION_BUS_ADDRESS", &d.bus)
        .env("DISPLAY", &d.display)
        .stdin(format!("{verdict}\n"))
        .run()
        .ok();
    let seen = d.wait_for(&tag, 1);
    assert_eq!(seen.len(), 1, "{:?}", d.seen());
    let summary = &seen[0].summary;
    assert!(summary.contains(&format!("<b>{tag}</b>")), "{summary}");
    assert!(summary.contains("make && make test"), "{summary}");
    // what dunst renders: its markup holds the summary escaped once, never twice
    let held = d
        .dunst_history()
        .into_iter()
        .find(|e| {
            e["summary"]["data"]
                .as_str()
                .is_some_and(|s| s.contains(&tag))
        })
        .unwrap_or_else(|| panic!("dunst holds no {tag}"));
    let message = held["message"]["data"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("&lt;b&gt;{tag}&lt;/b&gt;"))
            && message.contains("make &amp;&amp; make test"),
        "{held}"
    );
    assert!(
        !message.contains("&amp;lt;") && !message.contains("&amp;amp;"),
        "{held}"
    );
}
