//! The watchdog database's schema and its forward-only migrations.
//!
//! `PRAGMA application_id` marks a watchdog database (a file without it is refused);
//! `PRAGMA user_version` is the schema version. Each migration runs once, in order, inside the
//! transaction that bumps the version, so an older database is upgraded without losing rows,
//! and a newer one is refused by an older tool with a message naming both versions.

/// "ocwd" as a big-endian u32.
pub const APPLICATION_ID: i32 = 0x6f63_7764;

/// Migrations; version N is reached by running the first N.
pub const MIGRATIONS: &[&str] = &[
    // 1: ticks, verdicts, alerts, deliveries, channel settings
    r#"
CREATE TABLE ticks (
    id          INTEGER PRIMARY KEY,
    t           INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL DEFAULT 0,
    sessions    INTEGER NOT NULL DEFAULT 0,
    flagged     INTEGER NOT NULL DEFAULT 0,
    outcome     TEXT NOT NULL CHECK (outcome IN ('ok', 'flagged', 'no_opencode', 'blind')),
    sources     TEXT NOT NULL DEFAULT '[]',
    blind       TEXT
);
CREATE INDEX ticks_t ON ticks (t);

CREATE TABLE verdicts (
    tick               INTEGER NOT NULL REFERENCES ticks (id) ON DELETE CASCADE,
    t                  INTEGER NOT NULL,
    session            TEXT NOT NULL,
    root               TEXT NOT NULL,
    agent              TEXT,
    model              TEXT,
    flagged            INTEGER NOT NULL,
    reasons            TEXT NOT NULL DEFAULT '',
    dup                REAL,
    top                INTEGER,
    top_target         TEXT,
    slow               INTEGER,
    slow_call          TEXT,
    coverage           REAL,
    coverage_file      TEXT,
    landed_in_window   INTEGER,
    calls              INTEGER,
    calls_since_landed INTEGER,
    cost_since_landed  REAL,
    first_flag_index   INTEGER,
    first_flag_t       INTEGER,
    opinion            TEXT,
    liveness           TEXT,
    PRIMARY KEY (tick, session)
) WITHOUT ROWID;
CREATE INDEX verdicts_t ON verdicts (t);
CREATE INDEX verdicts_session ON verdicts (session, t);
CREATE INDEX verdicts_model ON verdicts (t, model, flagged);
CREATE INDEX verdicts_flagged ON verdicts (t) WHERE flagged = 1;

CREATE TABLE alerts (
    dedup_key          TEXT PRIMARY KEY,
    kind               TEXT NOT NULL,
    root               TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('open', 'resolved')),
    severity           TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    opened             INTEGER NOT NULL,
    last_fired         INTEGER NOT NULL,
    resolved           INTEGER,
    flagged_ticks      INTEGER NOT NULL DEFAULT 1,
    asked              INTEGER NOT NULL DEFAULT 0,
    agent              TEXT,
    model              TEXT,
    title              TEXT NOT NULL DEFAULT '',
    top_target         TEXT,
    calls_since_landed INTEGER,
    cost_since_landed  REAL,
    opinion            TEXT,
    source             TEXT
);
CREATE INDEX alerts_open ON alerts (state, severity);

CREATE TABLE events (
    id        INTEGER PRIMARY KEY,
    dedup_key TEXT NOT NULL,
    t         INTEGER NOT NULL,
    state     TEXT NOT NULL,
    severity  TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE INDEX events_key ON events (dedup_key, id);

CREATE TABLE deliveries (
    event    INTEGER NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    channel  TEXT NOT NULL,
    status   TEXT NOT NULL CHECK (status IN ('pending', 'sent', 'failed', 'deferred', 'skipped')),
    attempts INTEGER NOT NULL DEFAULT 0,
    t        INTEGER,
    detail   TEXT,
    PRIMARY KEY (event, channel)
) WITHOUT ROWID;
CREATE INDEX deliveries_status ON deliveries (status);
CREATE INDEX deliveries_channel ON deliveries (channel, t);

CREATE TABLE alert_ticks (
    tick_key TEXT PRIMARY KEY,
    t        INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE channels (
    name         TEXT PRIMARY KEY,
    enabled      INTEGER,
    min_severity TEXT CHECK (min_severity IN ('info', 'warning', 'critical')),
    updated      INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    // 2: continuation prompts ("nudges") sent into sessions, recorded before sending so a crash
    // or a rerun never sends one twice
    r#"
CREATE TABLE actions (
    action_id   TEXT PRIMARY KEY,
    session     TEXT NOT NULL,
    observation TEXT NOT NULL,
    prompt      TEXT NOT NULL,
    t           INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('sending', 'sent', 'failed')),
    detail      TEXT
) WITHOUT ROWID;
CREATE INDEX actions_session ON actions (session, t);
"#,
    // 3: a verdict's signals in one JSON column (the flat object of contract v1), so a new
    // detector signal needs no migration; its evidence and digest beside them
    r#"
CREATE TABLE verdicts_v3 (
    tick               INTEGER NOT NULL REFERENCES ticks (id) ON DELETE CASCADE,
    t                  INTEGER NOT NULL,
    session            TEXT NOT NULL,
    root               TEXT NOT NULL,
    agent              TEXT,
    model              TEXT,
    flagged            INTEGER NOT NULL,
    reasons            TEXT NOT NULL DEFAULT '',
    signals            TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(signals)),
    landed_in_window   INTEGER,
    calls              INTEGER,
    calls_since_landed INTEGER,
    cost_since_landed  REAL,
    first_flag_index   INTEGER,
    first_flag_t       INTEGER,
    loop_start_index   INTEGER,
    evidence           TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
    digest             TEXT CHECK (digest IS NULL OR json_valid(digest)),
    opinion            TEXT,
    liveness           TEXT,
    PRIMARY KEY (tick, session)
) WITHOUT ROWID;
INSERT INTO verdicts_v3 (tick, t, session, root, agent, model, flagged, reasons, signals, landed_in_window,
    calls, calls_since_landed, cost_since_landed, first_flag_index, first_flag_t, opinion, liveness)
SELECT tick, t, session, root, agent, model, flagged, reasons,
    json_object('dup', dup, 'top', top, 'top_target', top_target, 'slow', slow, 'slow_call', slow_call,
                'coverage', coverage, 'coverage_file', coverage_file),
    landed_in_window, calls, calls_since_landed, cost_since_landed, first_flag_index, first_flag_t, opinion, liveness
FROM verdicts;
DROP TABLE verdicts;
ALTER TABLE verdicts_v3 RENAME TO verdicts;
CREATE INDEX verdicts_t ON verdicts (t);
CREATE INDEX verdicts_session ON verdicts (session, t);
CREATE INDEX verdicts_model ON verdicts (t, model, flagged);
CREATE INDEX verdicts_flagged ON verdicts (t) WHERE flagged = 1;
"#,
    // 4: alert episodes (issue 13). One row per episode, so closed ones stay as history with
    // their reason and figures; `alerts` becomes a view of each key's latest episode for the
    // readers that know it. Columns say what they hold: loop targets in `top_target`, liveness
    // evidence and blind reasons in `evidence`; the nudge's version in `prompt_version` and its
    // text in `prompt`; a delivery that reached only some peers keeps their errors apart.
    r#"
CREATE TABLE episodes (
    id            INTEGER PRIMARY KEY,
    dedup_key     TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('loop', 'blind', 'stalled', 'retrying', 'waiting', 'interrupted', 'unfinished')),
    -- root session (loop), session (liveness) or opencode source (blind)
    root          TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('open', 'resolved')),
    severity      TEXT NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
    -- the highest severity the episode reached (severity drops to info on resolve)
    peak_severity TEXT NOT NULL CHECK (peak_severity IN ('info', 'warning', 'critical')),
    opened        INTEGER NOT NULL,
    last_fired    INTEGER NOT NULL,
    resolved      INTEGER,
    reason        TEXT CHECK (reason IN ('progress', 'stopped', 'gone', 'readable', 'recovered')),
    flagged_ticks INTEGER NOT NULL DEFAULT 1,
    asked         INTEGER NOT NULL DEFAULT 0,
    agent         TEXT,
    model         TEXT,
    title         TEXT NOT NULL DEFAULT '',
    top_target    TEXT,
    evidence      TEXT,
    -- loops: calls and cost since the last landed change over the tree's flagged sessions
    calls         INTEGER,
    cost          REAL,
    -- loops: loop start to last call, ms
    duration_ms   INTEGER,
    opinion       TEXT,
    source        TEXT,
    -- what the last tick made of a loop: counted toward escalation, or held and why
    last_decision TEXT CHECK (last_decision IN ('triggered', 'counted', 'escalated', 'held_busy', 'held_landed',
                                                'held_no_evidence', 'resolved'))
);
CREATE UNIQUE INDEX episodes_one_open ON episodes (dedup_key) WHERE state = 'open';
CREATE INDEX episodes_key ON episodes (dedup_key, id);
CREATE INDEX episodes_opened ON episodes (opened);
CREATE INDEX episodes_resolved ON episodes (resolved);

-- what the last tick saw of each session of a loop episode's tree
CREATE TABLE episode_sessions (
    episode            INTEGER NOT NULL REFERENCES episodes (id) ON DELETE CASCADE,
    session            TEXT NOT NULL,
    calls              INTEGER NOT NULL,
    calls_since_landed INTEGER NOT NULL,
    cost_since_landed  REAL NOT NULL,
    last_call          INTEGER,
    -- when the loop began (the detector's loop start, else its first flag)
    loop_start         INTEGER,
    flagged            INTEGER NOT NULL,
    PRIMARY KEY (episode, session)
) WITHOUT ROWID;

INSERT INTO episodes (id, dedup_key, kind, root, state, severity, peak_severity, opened, last_fired, resolved,
                      reason, flagged_ticks, asked, agent, model, title, top_target, evidence, calls, cost,
                      duration_ms, opinion, source)
SELECT rowid, dedup_key, kind, root, state, severity,
       CASE WHEN severity = 'info' AND kind = 'loop' THEN 'warning' ELSE severity END,
       opened, last_fired, resolved,
       CASE WHEN state = 'open' THEN NULL ELSE
         (SELECT CASE
            WHEN json_extract(e.body, '$.details.why') LIKE 'no session of the tree is flagged%' THEN 'progress'
            WHEN json_extract(e.body, '$.details.why') LIKE 'opencode is readable%' THEN 'readable'
            WHEN json_extract(e.body, '$.details.why') LIKE 'the session is gone%' THEN 'gone'
            WHEN json_extract(e.body, '$.details.why') LIKE 'the session is %' THEN 'recovered'
          END
          FROM events e WHERE e.dedup_key = a.dedup_key AND e.state = 'resolve' ORDER BY e.id DESC LIMIT 1)
       END,
       flagged_ticks, asked, agent, model, title,
       CASE WHEN kind = 'loop' THEN top_target END,
       CASE WHEN kind <> 'loop' THEN top_target END,
       calls_since_landed, cost_since_landed,
       CASE WHEN resolved IS NOT NULL THEN resolved - opened END,
       opinion, source
FROM alerts a;
DROP TABLE alerts;

ALTER TABLE events ADD COLUMN episode INTEGER REFERENCES episodes (id) ON DELETE SET NULL;
ALTER TABLE events ADD COLUMN reason TEXT;
UPDATE events SET episode = (SELECT id FROM episodes p WHERE p.dedup_key = events.dedup_key);
CREATE INDEX events_episode ON events (episode);

-- the readers' view: each key's latest episode, in the old columns
CREATE VIEW alerts AS
SELECT p.dedup_key, p.kind, p.root, p.state, p.severity, p.opened, p.last_fired, p.resolved, p.flagged_ticks,
       p.asked, p.agent, p.model, p.title, p.top_target, p.calls AS calls_since_landed,
       p.cost AS cost_since_landed, p.opinion, p.source, p.reason, p.evidence, p.id AS episode
FROM episodes p WHERE p.id = (SELECT max(id) FROM episodes q WHERE q.dedup_key = p.dedup_key);

ALTER TABLE actions RENAME COLUMN prompt TO prompt_version;
ALTER TABLE actions ADD COLUMN prompt TEXT;

ALTER TABLE deliveries ADD COLUMN peer_failures TEXT;
"#,
    // 5: the operator's page: the latest calls of flagged sessions (what the page draws) and
    // the models blocked in opencode's config by `wd-store block-model`
    r#"
CREATE TABLE call_marks (
    session    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    t          INTEGER NOT NULL,
    tool       TEXT NOT NULL,
    landed     INTEGER NOT NULL,
    failed     INTEGER NOT NULL,
    target     TEXT NOT NULL,
    target_key TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE INDEX verdicts_root ON verdicts (root, tick);

CREATE TABLE blocks (
    id           INTEGER PRIMARY KEY,
    model        TEXT NOT NULL,
    file         TEXT NOT NULL,
    created      TEXT NOT NULL CHECK (created IN ('element', 'blacklist', 'provider_entry', 'provider', 'file')),
    reason       TEXT,
    who          TEXT NOT NULL,
    t            INTEGER NOT NULL,
    unblocked    INTEGER,
    unblocked_by TEXT
);
CREATE INDEX blocks_model ON blocks (model, unblocked);
"#,
    // 6: per-episode figures (issue 13). A loop that starts again after a `stopped` resolve,
    // with nothing landed since, counts from where its previous episode left it: per session of
    // the tree, the calls and cost since the last landed change that an earlier episode already
    // counted (its base), and this episode's first call of the session. `episodes.calls`, `cost`
    // and `duration_ms` are this episode's from now on (since-landed less the base). And where
    // an episode's tree was seen, for `gone`.
    r#"
ALTER TABLE episode_sessions ADD COLUMN base_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE episode_sessions ADD COLUMN base_cost REAL NOT NULL DEFAULT 0;
ALTER TABLE episode_sessions ADD COLUMN start INTEGER;
-- every source the episode's tree was listed by (a JSON array; `source` is the first): the
-- root is gone when one of them is read and no longer lists it, even once a server exited
ALTER TABLE episodes ADD COLUMN sources TEXT;
"#,
    // 7: the calls of the tick in progress, staged by `wd-store calls` (every session's latest
    // calls, as call_marks holds them) until `wd-store tick` keeps those of its flagged sessions:
    // the tick no longer tees the call stream to a file for wd-store to re-read
    r#"
CREATE TABLE tick_calls (
    session    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    t          INTEGER NOT NULL,
    tool       TEXT NOT NULL,
    landed     INTEGER NOT NULL,
    failed     INTEGER NOT NULL,
    target     TEXT NOT NULL,
    target_key TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
"#,
    // 8: stops of a session's run (issue 28), one row per action id (`stop:<session>:<episode>`),
    // written before the stop is sent so a rerun never sends it twice; `failed` may be retried
    r#"
CREATE TABLE stops (
    action_id           TEXT PRIMARY KEY,
    session             TEXT NOT NULL,
    -- `episode:<id>` (the watchdog's loop episode) or `turn:<user message id>`
    episode             TEXT NOT NULL,
    -- `operator` (wd-store stop) or the policy's trigger
    reason              TEXT NOT NULL,
    t                   INTEGER NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('requested', 'stopped', 'failed')),
    via                 TEXT CHECK (via IN ('http', 'plugin')),
    -- the opencode process whose plugin carried it out
    pid                 INTEGER,
    stopped             INTEGER,
    -- tool calls that started between the request and the stop
    calls_after_request INTEGER,
    detail              TEXT,
    -- the session's last user message when it was asked: a second request in the same run is
    -- the same stop, even once its episode has closed
    turn                TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX stops_session ON stops (session, t);
"#,
    // 9: follow mode (issue 27). A tick is the timer's batch or one sweep of the follow service,
    // full (what a timer tick lists) or partial (only what changed); a loop episode keeps its
    // calls at the trigger, as follow mode escalates by the calls made since then
    r#"
ALTER TABLE ticks ADD COLUMN mode TEXT NOT NULL DEFAULT 'timer' CHECK (mode IN ('timer', 'follow'));
ALTER TABLE ticks ADD COLUMN full INTEGER NOT NULL DEFAULT 1;
ALTER TABLE episodes ADD COLUMN trigger_calls INTEGER NOT NULL DEFAULT 0;
"#,
    // 10: what the stop policy (issue 28) reads of a loop episode: its figures at the trigger
    // (its caps count from there) and when a change first landed in its tree since (such a loop
    // is never stopped). Episodes opened before take their trigger's figures from its event.
    r#"
ALTER TABLE episodes ADD COLUMN trigger_cost REAL;
ALTER TABLE episodes ADD COLUMN landed INTEGER;
UPDATE episodes SET
    trigger_calls = coalesce((SELECT json_extract(e.body, '$.figures.calls') FROM events e
                      WHERE e.episode = episodes.id AND e.state = 'trigger' ORDER BY e.id LIMIT 1),
                      trigger_calls),
    trigger_cost = (SELECT json_extract(e.body, '$.figures.cost') FROM events e
                     WHERE e.episode = episodes.id AND e.state = 'trigger' ORDER BY e.id LIMIT 1)
WHERE kind = 'loop';
"#,
    // 11: a liveness alert that ends because its session is in another alerting state (a
    // retrying session stalled) resolves as `changed`, not `recovered` (issue 41). The CHECK
    // only widens, so the table's stored SQL is edited in place, the way SQLite's ALTER TABLE
    // page gives for loosening a constraint, instead of rebuilding a table that two others
    // reference (the migration runner then bumps schema_version, which makes every
    // connection, this one too, read the edited schema).
    r#"
PRAGMA writable_schema = ON;
UPDATE sqlite_master
   SET sql = replace(sql, '''readable'', ''recovered'')', '''readable'', ''recovered'', ''changed'')')
 WHERE type = 'table' AND name = 'episodes';
PRAGMA writable_schema = OFF;
"#,
    // 12: the ways other agents' sessions are stopped (issue 39): SIGINT to a `codex exec`,
    // `turn/interrupt` through Codex's app-server daemon, and Claude Code's stop hook; and how to
    // resume, in words, as the stop said it (each agent's commands differ; NULL for the rows
    // before, which were opencode's). The CHECK only widens, edited in place as in 11, after the
    // column is added (ALTER rewrites the stored SQL it reads).
    r#"
ALTER TABLE stops ADD COLUMN resume TEXT;
PRAGMA writable_schema = ON;
UPDATE sqlite_master
   SET sql = replace(sql, 'CHECK (via IN (''http'', ''plugin''))', 'CHECK (via IN (''http'', ''plugin'', ''sigint'', ''app-server'', ''hook''))')
 WHERE type = 'table' AND name = 'stops';
PRAGMA writable_schema = OFF;
"#,
    // 13: agent-neutral keys and outcome (issue 39): a loop or liveness alert's dedup key is
    // `loop:<root>`, `stalled:<session>`, ... (was `opencode-loop:<root>`), and a tick that read
    // no agent is `no_agent` (was `no_opencode`). Stored keys are rewritten, so an open alert
    // stays open under its new key and the next tick neither triggers it again nor loses it;
    // the key each rewritten episode was announced under is kept in `announced_keys`, and the
    // channels go on using it toward PagerDuty, Alertmanager and webhooks (`alert::outbox`).
    // A table of its own, not a column: ALTER TABLE ADD COLUMN on `episodes` after 11 edited
    // its stored SQL in the same transaction (a new database runs both) writes the column at
    // the old SQL's offset and breaks the table. The outcome's CHECK is edited in place as in
    // 11; its rows are rewritten with CHECKs off, as this connection holds the CHECK it read
    // before until the runner bumps schema_version.
    r#"
CREATE TABLE announced_keys (
    episode INTEGER PRIMARY KEY REFERENCES episodes (id) ON DELETE CASCADE,
    key     TEXT NOT NULL
);
INSERT INTO announced_keys (episode, key)
SELECT id, dedup_key FROM episodes WHERE dedup_key LIKE 'opencode-%:%' AND kind <> 'blind';
UPDATE episodes SET dedup_key = substr(dedup_key, length('opencode-') + 1)
 WHERE dedup_key LIKE 'opencode-%:%' AND kind <> 'blind';
UPDATE events SET dedup_key = substr(dedup_key, length('opencode-') + 1),
                  body = CASE WHEN json_valid(body) AND json_type(body, '$.dedup_key') = 'text'
                         THEN json_set(body, '$.dedup_key', substr(dedup_key, length('opencode-') + 1))
                         ELSE body END
 WHERE dedup_key LIKE 'opencode-%:%';
PRAGMA writable_schema = ON;
UPDATE sqlite_master
   SET sql = replace(sql, '''flagged'', ''no_opencode'', ''blind''', '''flagged'', ''no_agent'', ''blind''')
 WHERE type = 'table' AND name = 'ticks';
PRAGMA writable_schema = OFF;
PRAGMA ignore_check_constraints = ON;
UPDATE ticks SET outcome = 'no_agent' WHERE outcome = 'no_opencode';
PRAGMA ignore_check_constraints = OFF;
"#,
    // 14: the steps of the wall clock the follow service noticed (issue 42: durations are
    // measured on the monotonic clock; the page says when the wall clock moved under them)
    r#"
CREATE TABLE clock_steps (
    t       INTEGER NOT NULL,
    step_ms INTEGER NOT NULL
);
CREATE INDEX clock_steps_t ON clock_steps (t);
"#,
    // 15: done notices (issue 41, `[alert] notify_done`): an episode of kind `done` opens and
    // closes at once, reason `done`. The CHECKs only widen, edited in place as in 11.
    r#"
PRAGMA writable_schema = ON;
UPDATE sqlite_master
   SET sql = replace(replace(sql,
       '''interrupted'', ''unfinished'')', '''interrupted'', ''unfinished'', ''done'')'),
       '''recovered'', ''changed'')', '''recovered'', ''changed'', ''done'')')
 WHERE type = 'table' AND name = 'episodes';
PRAGMA writable_schema = OFF;
"#,
];

pub fn latest() -> i64 {
    MIGRATIONS.len() as i64
}
