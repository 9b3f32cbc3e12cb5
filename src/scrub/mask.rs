//! Masking secrets in a shell command, by grammar and by shape.
//!
//! The command is read as a shell would ([`super::lex`]); each simple command is then looked at
//! with what its tool makes of its words (`mysql -pX` takes `X` as a password, `ssh -p 22` a
//! port), and every word, comment and here-document body is looked at for shapes that are
//! secrets whatever the tool (credentials in URLs, `password=` pairs, auth headers, known token
//! formats, long random strings, PEM blocks). Each finding is a byte range of the original
//! text; the ranges are replaced by [`MASK`] and everything else stays verbatim, so the masked
//! command reads like the original and the same command always masks the same way.

use super::lex::{lex, lex_states, Op, Tok, Word, ANSI_C, DOUBLE, SINGLE, UNQUOTED};
use super::MASK;
use regex::Regex;
use std::sync::LazyLock;

/// Masks the secrets in `cmd`.
pub fn mask_command(cmd: &str) -> String {
    let mut ranges = Vec::new();
    command(cmd, 0, true, &mut ranges);
    shapes(cmd, &mut ranges);
    apply(cmd, ranges, &lex_states(cmd).1)
}

/// Masks the secrets in free text that is not a command (a search pattern, a path): shapes,
/// pairs and headers, no grammar.
pub fn mask_text(s: &str) -> String {
    let mut ranges = Vec::new();
    let w = Word::verbatim(s, 0);
    word_rules(&w, true, &mut ranges);
    shapes(s, &mut ranges);
    apply(s, ranges, &vec![UNQUOTED; s.len() + 1])
}

/// Masks the secrets in a path (a tool's `filePath`, `path`, `workdir`), one `/`-separated
/// part at a time as [`mask_text`] does, so a token in one directory name masks that name
/// only: `/home/u/tokens/ghp_....txt` becomes `/home/u/tokens/***.txt`.
pub fn mask_path(s: &str) -> String {
    s.split('/').map(mask_text).collect::<Vec<_>>().join("/")
}

/// Masks the secrets in a search pattern (the grep tool's): a pattern that is shaped like a
/// password is the secret itself; otherwise as [`mask_text`], which also reads pairs spelled as
/// regexes (`password\s*=\s*"pw"`).
pub fn mask_pattern(s: &str) -> String {
    if password_shaped(s) {
        MASK.to_string()
    } else {
        mask_text(s)
    }
}

/// Masks the secrets in a session title, which opencode writes from the first prompt: prose
/// such as "Rotate DB password to Spring2024!". As [`mask_text`], and also: a word shaped like a
/// password anywhere, and the value-like words after a secret noun (`password`, `passphrase`,
/// `token`, `secret`, `key`, `pin`, `credentials`), across the small words prose puts between
/// (`to`, `is`, `from`, `as`, `:`). A value-like word has letters and digits or symbols and is
/// not a version (`Spring2024!`, `Hunter22`; not `refresh`, `OAuth2` before a noun, `3.12`).
pub fn mask_title(s: &str) -> String {
    let mut ranges = Vec::new();
    let w = Word::verbatim(s, 0);
    word_rules(&w, true, &mut ranges);
    shapes(s, &mut ranges);
    static TOKEN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\S+").unwrap());
    let toks: Vec<_> = TOKEN.find_iter(s).collect();
    let bare = |t: &str| {
        t.trim_end_matches(['.', ',', ';', ')', '"', '\''])
            .to_string()
    };
    for (i, t) in toks.iter().enumerate() {
        let v = bare(t.as_str());
        if password_shaped(&v) {
            ranges.push((t.start(), t.start() + v.len()));
        }
        if let Some(at) = user_password(&v) {
            ranges.push((t.start() + at, t.start() + v.len()));
        }
        let noun = v.trim_end_matches(':').to_ascii_lowercase();
        let secret_noun = matches!(
            noun.as_str(),
            "password"
                | "passwords"
                | "passwd"
                | "passphrase"
                | "pw"
                | "pwd"
                | "passcode"
                | "token"
                | "secret"
                | "key"
                | "apikey"
                | "api_key"
                | "pin"
                | "credentials"
                | "creds"
        );
        if !secret_noun {
            continue;
        }
        for t in &toks[i + 1..toks.len().min(i + 6)] {
            let v = bare(t.as_str());
            let lower = v.to_ascii_lowercase();
            if matches!(
                lower.as_str(),
                "to" | "is"
                    | "as"
                    | "was"
                    | "now"
                    | "of"
                    | "from"
                    | "into"
                    | "="
                    | ":"
                    | "->"
                    | "and"
                    | "with"
                    | "value"
            ) {
                continue;
            }
            if !value_like(&v) {
                break;
            }
            ranges.push((t.start(), t.start() + v.len()));
        }
    }
    apply(s, ranges, &vec![UNQUOTED; s.len() + 1])
}

/// Where the password of a bare `user:password` word starts (`Login as admin:AdminTitlePw`):
/// a user name as people write them (lowercase first, then letters, digits, `.`, `_`, `-`) and
/// after one `:` a value of 6 to 64 characters that reads as a password (mixed case, letters
/// with digits, or a symbol), neither a path, a URL, a line number, a time nor `a::b`.
fn user_password(v: &str) -> Option<usize> {
    let (user, pass) = v.split_once(':')?;
    let user_ok = user.len() <= 32
        && user.starts_with(|c: char| c.is_ascii_lowercase())
        && user
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    let n = pass.chars().count();
    let has = |f: fn(&u8) -> bool| pass.as_bytes().iter().any(f);
    let pass_ok = (6..=64).contains(&n)
        && !pass.contains([':', '/', '\\'])
        && !pass.chars().any(char::is_whitespace)
        && ((has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase))
            || (has(u8::is_ascii_digit) && has(u8::is_ascii_alphabetic))
            || has(|b| b"!@#$%^&*~+=?".contains(b)));
    (user_ok && pass_ok).then_some(user.len() + 1)
}

/// A prose word that reads as a value: 6 or more characters, a letter, and a digit or a symbol,
/// not a version number.
fn value_like(v: &str) -> bool {
    static VERSION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[vV]?[0-9]+(?:\.[0-9A-Za-z]+)*$").unwrap());
    v.chars().count() >= 6
        && v.chars().any(|c| c.is_alphabetic())
        && v.chars()
            .any(|c| c.is_ascii_digit() || "!@#$%^&*~+=?".contains(c))
        && !VERSION.is_match(v)
}

/// Maps ranges found in a word's value (read as a command of its own) to the original, taking
/// in the value's own quotes around each range so the value still parses after masking.
fn inner(out: &mut Vec<(usize, usize)>, w: &Word, sub: Vec<(usize, usize)>) {
    if sub.is_empty() {
        return;
    }
    let st = lex_states(&w.text).1;
    for (a, b) in sub {
        if a < b && b <= w.text.len() {
            // a range that starts and ends in the same quoting, over its quotes if it can: a
            // quote taken on one side only is not put back here (as `apply` does for the whole
            // command), so the masked word would no longer parse as the original did
            let (qa, qb) = take_quotes(&w.text, &st, a, b);
            let (a, b) = [(qa, qb), (a, b), (qa, b), (a, qb)]
                .into_iter()
                .find(|&(x, y)| st[x] == st[y])
                .unwrap_or((qa, qb));
            out.push(w.orig(a, b));
        }
    }
}

fn opens(q: u8) -> &'static str {
    match q {
        SINGLE => "'",
        DOUBLE => "\"",
        ANSI_C => "$'",
        _ => "",
    }
}

fn closes(q: u8) -> &'static str {
    match q {
        SINGLE | ANSI_C => "'",
        DOUBLE => "\"",
        _ => "",
    }
}

/// Widens `a..b` over a quote that opens right before it or closes right after it.
fn take_quotes(s: &str, st: &[u8], mut a: usize, mut b: usize) -> (usize, usize) {
    let bytes = s.as_bytes();
    if st[b] != UNQUOTED
        && b < bytes.len()
        && closes(st[b]).as_bytes()[0] == bytes[b]
        && st[b + 1] != st[b]
    {
        b += 1;
    }
    let open = opens(st[a]).len();
    if open > 0 && a >= open && s[..a].ends_with(opens(st[a])) && st[a - open] == UNQUOTED {
        a -= open;
    }
    (a, b)
}

/// Replaces the ranges by the mask. A range that starts inside one kind of quotes and ends in
/// another gets the quotes closed and reopened after the mask, so the masked command still
/// parses as the original did (and masks the same way again).
fn apply(s: &str, mut ranges: Vec<(usize, usize)>, st: &[u8]) -> String {
    ranges.retain(|(a, b)| a < b && *b <= s.len());
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            Some(m) if a <= m.1 => m.1 = m.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (a, b) in merged {
        let (a, b) = take_quotes(s, st, a, b);
        if !s.is_char_boundary(a) || !s.is_char_boundary(b) || a < at {
            continue;
        }
        out.push_str(&s[at..a]);
        out.push_str(MASK);
        if st[a] != st[b] {
            out.push_str(closes(st[a]));
            out.push_str(opens(st[b]));
        }
        at = b;
    }
    out.push_str(&s[at..]);
    out
}

/// How deep commands inside words (`sh -c '...'`, `ssh host '...'`) are read.
const DEPTH: usize = 4;

/// Collects the ranges to mask in `s`, read as a command. With `assign_all`, every assignment
/// that is not a plain setting is masked (a command line, a `.env` body); without it (text inside
/// a quoted word, which may be a query or connection string), only secret-named ones.
fn command(s: &str, depth: usize, assign_all: bool, out: &mut Vec<(usize, usize)>) {
    let toks = lex(s);
    // a command that writes a `.netrc` (or `.authinfo`): its text holds netrc lines
    let netrc = s.contains("netrc") || s.contains("authinfo");
    // simple commands: their words, with what each word is to the shell
    let mut cmds: Vec<(Vec<(&Word, Role)>, bool)> = vec![(Vec::new(), false)];
    let mut role = Role::Arg;
    let mut prev: Option<&str> = None;
    for t in &toks {
        if !matches!(t, Tok::Word(_)) {
            prev = None;
        }
        match t {
            Tok::Word(w) => {
                cmds.last_mut().unwrap().0.push((w, role));
                role = Role::Arg;
                word_rules(w, false, out);
                netrc_lines(w, netrc, out);
                // a message (`git commit -m 'Fix password reset'`) is prose, not a command
                let message = prev.is_some_and(|p| MESSAGE_FLAGS.contains(&p));
                prev = Some(&w.text);
                if depth < DEPTH
                    && !message
                    && w.text.contains([' ', '\t', '\n', ';', '|', '&', '`', '$'])
                {
                    let mut sub = Vec::new();
                    command(&w.text, depth + 1, false, &mut sub);
                    inner(out, w, sub);
                }
            }
            Tok::Op(Op::End) => cmds.push((Vec::new(), false)),
            Tok::Op(Op::Pipe) => {
                cmds.last_mut().unwrap().1 = true;
                cmds.push((Vec::new(), false));
            }
            Tok::Op(Op::Redirect) => role = Role::File,
            Tok::Op(Op::HereDoc) => role = Role::Delim,
            Tok::Op(Op::HereString) => role = Role::Stdin,
            Tok::Text(a, b) => {
                let body = &s[*a..*b];
                let w = Word::verbatim(body, *a);
                word_rules(&w, true, out);
                netrc_lines(&w, netrc, out);
                if depth < DEPTH {
                    let mut sub = Vec::new();
                    command(body, depth + 1, false, &mut sub);
                    out.extend(sub.into_iter().map(|(x, y)| (x + a, y + a)));
                }
                // a `.env` body: every `NAME=value` line that is not a plain setting
                for c in ENV_LINE.captures_iter(body) {
                    let v = c.get(2).unwrap();
                    if !plain_variable(&c[1]) && !v.as_str().trim().is_empty() {
                        out.push((a + v.start(), a + v.end()));
                    }
                }
            }
        }
    }
    for i in 0..cmds.len() {
        let feeds_secret_reader = cmds[i].1 && cmds.get(i + 1).is_some_and(|c| reads_secret(&c.0));
        simple(&cmds[i].0, feeds_secret_reader, assign_all, depth, out);
    }
}

/// Flags whose value is a message for people (read for shapes and pairs, not as a command).
const MESSAGE_FLAGS: &[&str] = &["-m", "--message", "--title", "--subject", "--description"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Arg,
    File,
    Delim,
    Stdin,
}

fn mask(out: &mut Vec<(usize, usize)>, w: &Word, a: usize, b: usize) {
    if a < b && b <= w.text.len() && w.text[a..b] != *MASK {
        out.push(w.orig(a, b));
    }
}

fn mask_all(out: &mut Vec<(usize, usize)>, w: &Word) {
    mask(out, w, 0, w.text.len());
}

/// A command that reads a secret on stdin (so what is piped into it is one).
fn reads_secret(words: &[(&Word, Role)]) -> bool {
    let t: Vec<&str> = words.iter().map(|(w, _)| w.text.as_str()).collect();
    let has = |s: &str| t.contains(&s);
    has("--password-stdin")
        || has("--passphrase-fd")
        || has("--with-token")
        || has("--token-stdin")
        || has("chpasswd")
        || (has("passwd") && has("--stdin"))
        || (has("sudo") && (has("-S") || has("--stdin")))
        || (has("vault") && has("login") && has("-"))
        || (has("-passin") && has("stdin"))
        || t.iter()
            .any(|w| w.starts_with("--password-stdin") || w.starts_with("--passphrase-fd"))
        || sets_secret(&t)
}

/// A command that stores a secret (`gh secret set`, `vault kv put`, `aws ssm put-parameter`,
/// `heroku config:set`, `kubectl create secret`, `wrangler secret put`): a word naming a secret
/// store and a word setting something in it. Whatever it is given is the secret: its stdin,
/// its value flags ([`SECRET_VALUE_FLAGS`]) and its `KEY=value` words.
fn sets_secret(t: &[&str]) -> bool {
    const STORES: &[&str] = &[
        "secret",
        "secrets",
        "secretsmanager",
        "ssm",
        "keyvault",
        "kv",
        "vault",
        "bao",
        "env",
        "config:set",
        "credential",
        "credentials",
    ];
    const SETS: &[&str] = &[
        "set",
        "put",
        "create",
        "add",
        "write",
        "patch",
        "import",
        "put-parameter",
        "create-secret",
        "put-secret-value",
        "update-secret",
        "config:set",
    ];
    t.iter().any(|w| STORES.contains(w)) && t.iter().any(|w| SETS.contains(w))
}

/// The value flags of a secret-setting command ([`sets_secret`]).
const SECRET_VALUE_FLAGS: &[&str] = &[
    "--value",
    "--body",
    "-b",
    "--data",
    "--secret-string",
    "--secret-binary",
    "--string-value",
    "--payload",
];

/// Short flags that take no value, per tool, so that a cluster (`curl -su user:pw`,
/// `zip -rP pw`, `ldapsearch -xw pw`) is read the way getopt reads it: letter by letter up to
/// the first that takes a value, whose value is the rest of the word or the next word.
fn boolean_shorts(tool: &str) -> &'static str {
    match tool {
        "curl" => "sSkfLvViIgGNnqjZlR0123456",
        "mysql" | "mariadb" | "mysqldump" | "mysqladmin" | "mysqlimport" | "mysqlshow"
        | "mysqlcheck" | "mysqlpump" | "mysqlslap" | "mariadb-dump" | "mariadb-admin" => {
            "BCENXfnqrstv"
        }
        "zip" | "zipcloak" => "rqvjmTyDXo0123456789",
        "unzip" | "funzip" => "oqnjvlCLaX",
        "ldapsearch" | "ldapadd" | "ldapmodify" | "ldapdelete" | "ldapwhoami" | "ldappasswd"
        | "ldapcompare" | "ldapmodrdn" | "ldapexop" => "xZnvLMWcC",
        "sshpass" => "v",
        "smbclient" | "rpcclient" | "smbget" => "Nk",
        "redis-cli" | "keydb-cli" | "valkey-cli" => "cx",
        _ => "",
    }
}

/// A value-taking flag inside a cluster of short flags (`-ksSu`): where its value starts in
/// the word, and how the tool takes it.
fn cluster_flag(tool: &str, t: &str, flags: &[(&'static str, Takes)]) -> Option<(usize, Takes)> {
    let body = t.strip_prefix('-').filter(|b| !b.starts_with('-'))?;
    let booleans = boolean_shorts(tool);
    for (i, c) in body.char_indices() {
        if i > 0 {
            if let Some(&(f, takes)) = flags
                .iter()
                .find(|(f, _)| f.len() == 2 && f[1..].starts_with(c))
            {
                return Some((1 + i + f.len() - 1, takes));
            }
        }
        if !booleans.contains(c) {
            return None;
        }
    }
    None
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// `NAME=value` (also `NAME+=value`, `NAME[i]=value`) as the shell reads an assignment word.
fn assignment(s: &str) -> Option<(&str, usize)> {
    let eq = s.find('=')?;
    let name = s[..eq].trim_end_matches('+');
    let name = name.split('[').next().unwrap_or(name);
    let mut ch = name.chars();
    let first = ch.next()?;
    ((first.is_ascii_alphabetic() || first == '_')
        && ch.all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some((name, eq + 1))
}

/// Variables whose values are settings.
const PLAIN_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "DEBUG",
    "CI",
    "NODE_ENV",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "GOPATH",
    "GOOS",
    "GOARCH",
    "GOFLAGS",
    "CGO_ENABLED",
    "DISPLAY",
    "JAVA_HOME",
    "NODE_OPTIONS",
    "PORT",
    "HOST",
    "LOG_LEVEL",
    "VERBOSE",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "RAILS_ENV",
    "FLASK_ENV",
    "FLASK_APP",
    "DJANGO_SETTINGS_MODULE",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "LDFLAGS",
    "MAKEFLAGS",
    "DEBIAN_FRONTEND",
    "ENV",
    "OLDPWD",
    "IFS",
    "PS1",
    "PS4",
    "HISTFILE",
    "CARGO_TERM_COLOR",
    "CARGO_INCREMENTAL",
    "RUSTFLAGS",
    "NPM_CONFIG_LOGLEVEL",
    "TARGET",
];

/// Beginnings of the names of settings (a language's, a build tool's, a locale's).
const PLAIN_PREFIXES: &[&str] = &[
    "LC_",
    "XDG_",
    "PYTHON",
    "NODE_",
    "RUST",
    "CARGO_",
    "GO",
    "JAVA_",
    "MAVEN_",
    "GRADLE_",
    "DJANGO_",
    "FLASK_",
    "PIP_",
    "UV_",
    "POETRY_",
    "npm_config_",
    "GIT_",
    "PYTEST_",
    "TF_LOG",
];

/// Ends of the names of settings (a place, a level, a port, a count).
const PLAIN_SUFFIXES: &[&str] = &[
    "_DIR", "_PATH", "_HOME", "_FILE", "_LEVEL", "_MODE", "_PORT", "_HOST", "_VERSION", "_JOBS",
    "_THREADS",
];

/// Variables whose values are settings, never secrets; every other assignment is masked.
fn plain_variable(name: &str) -> bool {
    PLAIN_VARIABLES.contains(&name)
        || PLAIN_PREFIXES.iter().any(|p| name.starts_with(p))
        || PLAIN_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// Masks the value of an assignment word when it may be a secret.
fn assign(out: &mut Vec<(usize, usize)>, w: &Word, all: bool) {
    if let Some((name, at)) = assignment(&w.text) {
        if secret_name(name) || all && !plain_variable(name) {
            mask(out, w, at, w.text.len());
        }
    }
}

/// Flags whose value is a `NAME=value` assignment for the program being run.
const ENV_FLAGS: &[&str] = &[
    "-e",
    "--env",
    "--build-arg",
    "--set",
    "--set-string",
    "--set-env-vars",
    "-var",
    "--var",
    "--extra-vars",
    "--from-literal",
    "--secret-env",
    "--define",
    "--label-env",
    "-v",
];

/// Masks the value of an assignment that starts at byte `at` of `w`.
fn assign_from(out: &mut Vec<(usize, usize)>, w: &Word, at: usize) {
    if let Some((name, eq)) = assignment(&w.text[at..]) {
        if secret_name(name) || !plain_variable(name) {
            mask(out, w, at + eq, w.text.len());
        }
    }
}

/// Wrappers that run the rest of their words as a command.
const WRAPPERS: &[&str] = &[
    "sudo",
    "doas",
    "env",
    "exec",
    "nohup",
    "time",
    "command",
    "builtin",
    "stdbuf",
    "nice",
    "ionice",
    "timeout",
    "xargs",
    "watch",
    "strace",
    "ltrace",
    "unbuffer",
    "setsid",
    "chronic",
    "caffeinate",
    "torsocks",
    "proxychains",
    "proxychains4",
    "catchsegv",
    "eatmydata",
    "then",
    "do",
    "else",
    "!",
    "{",
];

/// Value-taking flags of the wrappers (so the value is not taken for the command).
const WRAPPER_FLAGS: &[&str] = &[
    "-u", "-g", "-h", "-p", "-C", "-U", "-r", "-t", "-D", "-n", "-c", "-s", "-k", "-o", "-e", "-i",
    "-I", "-P", "-L",
];

/// How a tool takes a secret after a short flag.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Takes {
    /// Only attached (`mysql -pX`; `mysql -p X` prompts and X is a database).
    Glued,
    /// Attached or as the next word.
    Either,
    /// `user:password` (curl -u): the part after the first `:`.
    UserColon,
    /// `user%password` (smbclient -U).
    UserPercent,
    /// `user,password` (lftp -u).
    UserComma,
}

/// The secret-taking short flags of a tool, given its first non-flag argument (subcommand).
fn short_flags(tool: &str, sub: Option<&str>) -> &'static [(&'static str, Takes)] {
    use Takes::*;
    match tool {
        "mysql" | "mariadb" | "mysqldump" | "mysqladmin" | "mysqlimport" | "mysqlshow"
        | "mysqlcheck" | "mysqlpump" | "mysqlbinlog" | "mysqlslap" | "mariadb-dump"
        | "mariadb-admin" | "mydumper" | "myloader" => &[("-p", Glued)],
        "sshpass" => &[("-p", Either)],
        "7z" | "7za" | "7zr" | "7zz" | "unrar" => &[("-p", Glued)],
        "rar" => &[("-hp", Glued), ("-p", Glued)],
        "zip" | "unzip" | "zipcloak" | "funzip" => &[("-P", Either)],
        "redis-cli" | "keydb-cli" | "valkey-cli" => &[("-a", Either)],
        "mongo" | "mongosh" | "mongodump" | "mongorestore" | "mongoexport" | "mongoimport"
        | "mongostat" | "mongotop" | "mongofiles" => &[("-p", Either)],
        "sqlcmd" | "bcp" | "osql" | "isql" | "bcp.exe" => &[("-P", Either)],
        "ldapsearch" | "ldapadd" | "ldapmodify" | "ldapdelete" | "ldapwhoami" | "ldappasswd"
        | "ldapcompare" | "ldapmodrdn" | "ldapexop" => &[("-w", Either)],
        "ipmitool" => &[("-P", Either)],
        "ssh-keygen" => &[("-N", Either), ("-P", Either)],
        "cqlsh" => &[("-p", Either)],
        "mosquitto_pub" | "mosquitto_sub" | "mosquitto_rr" => &[("-P", Either)],
        "snmpwalk" | "snmpget" | "snmpset" | "snmpbulkwalk" | "snmpgetnext" | "snmptrap"
        | "snmptable" => &[("-A", Either), ("-X", Either), ("-c", Either)],
        "openssl" => &[("-k", Either)],
        "usermod" | "useradd" => &[("-p", Either)],
        "rdesktop" => &[("-p", Either)],
        "curl" => &[("-u", UserColon), ("-U", UserColon), ("-b", Either)],
        "http" | "https" | "xh" | "xhs" => &[("-a", UserColon)],
        "smbclient" | "rpcclient" | "smbcacls" | "smbget" | "net" => &[("-U", UserPercent)],
        "lftp" => &[("-u", UserComma)],
        "docker" | "podman" | "nerdctl" | "buildah" | "skopeo" | "helm" | "oras" | "crane"
        | "az"
            if sub == Some("login") || sub == Some("registry") =>
        {
            &[("-p", Either)]
        }
        "twine" => &[("-p", Either)],
        "pg_dump" | "psql" => &[],
        _ => &[],
    }
}

/// Tools that run their words as shell code.
const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "su", "runuser", "ssh", "eval", "watch",
    "script", "busybox",
];

/// Tools whose positional words are patterns and files, never settings.
const SEARCHERS: &[&str] = &[
    "grep", "egrep", "fgrep", "rg", "ag", "ack", "find", "ls", "cat", "less", "head", "tail", "wc",
    "sed", "awk", "jq", "yq", "echo", "printf", "man", "which", "type", "file", "stat",
];

/// Tools whose first argument is `user/password@database`.
const SLASH_LOGIN: &[&str] = &[
    "sqlplus", "expdp", "impdp", "exp", "imp", "sqlldr", "rman", "dgmgrl", "sql",
];

fn simple(
    words: &[(&Word, Role)],
    feeds_secret_reader: bool,
    all: bool,
    depth: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let args: Vec<&Word> = words
        .iter()
        .filter(|(_, r)| *r == Role::Arg)
        .map(|(w, _)| *w)
        .collect();
    let i = prefix(&args, all, out);
    if i >= args.len() {
        return;
    }
    let tool = basename(&args[i].text);
    let rest = &args[i + 1..];
    if depth < DEPTH {
        shell_code(tool, rest, depth, out);
    }
    fed_to_secret_readers(words, tool, rest, feeds_secret_reader, out);
    if matches!(
        tool,
        "export" | "declare" | "typeset" | "local" | "readonly" | "setenv" | "set"
    ) {
        for w in rest {
            assign(out, w, all);
        }
        if tool == "setenv" && rest.len() >= 2 {
            mask_all(out, rest[1]);
        }
        return;
    }
    written_secrets(tool, &args, rest, out);
    let sub = rest
        .iter()
        .map(|w| w.text.as_str())
        .find(|t| !t.starts_with('-'));
    let positional = flags(tool, sub, rest, out);
    positional_secrets(tool, rest, &positional, out);
}

/// Masks the leading assignments (`PGPASSWORD=... psql`) and those given to wrappers (`env`,
/// `sudo`, `timeout 5`, ...), and gives the index of the word that names the tool.
fn prefix(args: &[&Word], all: bool, out: &mut Vec<(usize, usize)>) -> usize {
    let mut i = 0;
    while i < args.len() && assignment(&args[i].text).is_some() {
        assign(out, args[i], all);
        i += 1;
    }
    while i < args.len() && WRAPPERS.contains(&basename(&args[i].text)) {
        let wrapper = basename(&args[i].text);
        let mut number = matches!(wrapper, "timeout" | "nice" | "watch");
        i += 1;
        while i < args.len() {
            let t = args[i].text.as_str();
            if assignment(t).is_some() {
                assign(out, args[i], all);
            } else if t.starts_with('-') && t.len() > 1 {
                if WRAPPER_FLAGS.contains(&t) && wrapper != "time" {
                    i += 1;
                }
            } else if number && t.starts_with(|c: char| c.is_ascii_digit()) {
                number = false;
            } else {
                break;
            }
            i += 1;
        }
    }
    i
}

/// Shell code given to a shell (`bash -c '...'`, `ssh host '...'`, `eval "..."`) is a command
/// line of its own: its assignments are masked as the top level's are.
fn shell_code(tool: &str, rest: &[&Word], depth: usize, out: &mut Vec<(usize, usize)>) {
    for (k, w) in rest.iter().enumerate() {
        let after_c = k > 0 && rest[k - 1].text == "-c";
        if (after_c || SHELLS.contains(&tool)) && w.text.contains([' ', '\t', '\n', '=', ';']) {
            let mut sub = Vec::new();
            command(&w.text, depth + 1, true, &mut sub);
            inner(out, w, sub);
        }
    }
}

/// What a command prints into a reader of secrets (`echo PW | passwd --stdin`), and what a reader
/// of secrets takes from a here-string or here-document.
fn fed_to_secret_readers(
    words: &[(&Word, Role)],
    tool: &str,
    rest: &[&Word],
    feeds_secret_reader: bool,
    out: &mut Vec<(usize, usize)>,
) {
    if feeds_secret_reader && matches!(tool, "echo" | "printf" | "cat" | "print") {
        for w in rest {
            if !w.text.starts_with('-') {
                mask_all(out, w);
            }
        }
    }
    if reads_secret(words) {
        for (w, r) in words {
            if *r == Role::Stdin {
                mask_all(out, w);
            }
        }
    }
}

/// Secrets a tool's own arguments write or look for: `printf`'s arguments where its format puts a
/// secret, `sed`'s and `perl`'s substitutions, the values of a command that sets a password, and
/// a search for a password-shaped pattern.
fn written_secrets(tool: &str, args: &[&Word], rest: &[&Word], out: &mut Vec<(usize, usize)>) {
    // `printf 'password %s\n' PW`: the format puts an argument where a secret goes, so the
    // arguments are the secrets
    if tool == "printf" {
        if let Some(k) = rest.iter().position(|w| !w.text.starts_with('-')) {
            if PRINTF_SECRET.is_match(&rest[k].text) {
                for w in &rest[k + 1..] {
                    mask_all(out, w);
                }
            }
        }
    }
    if matches!(tool, "sed" | "gsed" | "perl" | "ssed") {
        for w in rest {
            substitutions(w, out);
        }
    }
    let texts: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
    if sets_secret(&texts) {
        for (k, w) in rest.iter().enumerate() {
            let t = w.text.as_str();
            if let Some((f, _)) = t.split_once('=').filter(|(f, _)| f.starts_with('-')) {
                if SECRET_VALUE_FLAGS.contains(&f) {
                    mask(out, w, f.len() + 1, t.len());
                }
            } else if SECRET_VALUE_FLAGS.contains(&t) {
                if let Some(n) = rest.get(k + 1) {
                    mask_all(out, n);
                }
            } else if !t.starts_with('-') {
                assign(out, w, true);
            }
        }
    }
    if SEARCHERS[..6].contains(&tool)
        || tool == "git" && rest.first().is_some_and(|w| w.text == "grep")
    {
        // a search for the secret itself: the pattern is a password by its shape
        for w in rest {
            if password_shaped(&w.text) {
                mask_all(out, w);
            }
        }
    }
}

/// Masks the values of the secret flags among a tool's words (short flags from the tool's own
/// table, long flags by their names, `-e NAME=value` assignments for another program) and of
/// the positional words that follow a key; gives the positional words.
fn flags<'w>(
    tool: &str,
    sub: Option<&str>,
    rest: &[&'w Word],
    out: &mut Vec<(usize, usize)>,
) -> Vec<&'w Word> {
    let flags = short_flags(tool, sub);
    let mut positional: Vec<&Word> = Vec::new();
    let mut j = 0;
    while j < rest.len() {
        let w = rest[j];
        let t = w.text.as_str();
        let next = rest
            .get(j + 1)
            .filter(|n| !n.text.starts_with('-') || n.text == "-");
        // `-e NAME=value`, `--build-arg NAME=value`: an assignment for another program
        if ENV_FLAGS.contains(&t) {
            if let Some(n) = rest.get(j + 1) {
                assign(out, n, true);
                j += 2;
                continue;
            }
        }
        if let Some((f, _)) = t.split_once('=') {
            if ENV_FLAGS.contains(&f) && f.starts_with("--") {
                assign_from(out, w, f.len() + 1);
            }
        }
        let found = flags
            .iter()
            .find(|(f, _)| t.starts_with(f))
            .map(|&(f, takes)| (f.len(), takes))
            .or_else(|| cluster_flag(tool, t, flags));
        if let Some((flag_len, takes)) = found {
            let glued = t.len() > flag_len;
            let value: Option<(&Word, usize)> = if glued {
                Some((w, flag_len))
            } else if takes != Takes::Glued {
                next.map(|n| (*n, 0))
            } else {
                None
            };
            if let Some((vw, at)) = value {
                if !glued {
                    j += 1;
                }
                secret_part(out, vw, at, takes);
                j += 1;
                continue;
            }
        }
        if let Some(name) = t
            .strip_prefix("--")
            .or_else(|| t.strip_prefix('-').filter(|n| n.len() > 2))
        {
            if long_flag(out, w, name, next) {
                j += 1;
            }
            j += 1;
            continue;
        }
        if t.starts_with('-') && t.len() > 1 {
            j += 1;
            continue;
        }
        positional_word(tool, sub, w, positional.last().copied(), out);
        positional.push(w);
        j += 1;
    }
    positional
}

/// A positional word: xfreerdp's `/p:secret`, or the value after a positional key
/// (`config set password PW`) unless the tool searches for words.
fn positional_word(
    tool: &str,
    sub: Option<&str>,
    w: &Word,
    prev: Option<&Word>,
    out: &mut Vec<(usize, usize)>,
) {
    let t = w.text.as_str();
    if matches!(tool, "xfreerdp" | "wlfreerdp" | "sdl-freerdp" | "xfreerdp3") {
        for p in ["/p:", "/password:", "/gp:", "/gateway-password:"] {
            if t.starts_with(p) {
                mask(out, w, p.len(), t.len());
            }
        }
    }
    if let Some(prev) = prev {
        let searching = SEARCHERS.contains(&tool)
            || tool == "git" && matches!(sub, Some("grep" | "log" | "show" | "diff"));
        if positional_key(&prev.text) && !searching {
            mask_all(out, w);
        }
    }
}

/// A long flag `--NAME[=VALUE]` (or `-NAME`): masks its value when the name says it is a secret
/// or a `user:password` pair. True when the value is the next word, which it then took.
fn long_flag(out: &mut Vec<(usize, usize)>, w: &Word, name: &str, next: Option<&&Word>) -> bool {
    let t = w.text.as_str();
    let (name, value) = match name.split_once('=') {
        Some((n, _)) => (n, Some(t.find('=').unwrap() + 1)),
        None => (name, None),
    };
    let user_pair = matches!(
        name,
        "user" | "proxy-user" | "basic-auth" | "creds" | "auth"
    );
    if secret_name(name) || user_pair {
        let takes = if user_pair {
            Takes::UserColon
        } else {
            Takes::Either
        };
        let takes = if name == "creds"
            || name == "auth"
                && !w.text.contains(':')
                && next.map_or(true, |n| !n.text.contains(':'))
        {
            Takes::Either
        } else {
            takes
        };
        match value {
            Some(at) => secret_part(out, w, at, takes),
            None => {
                if let Some(n) = next {
                    secret_part(out, n, 0, takes);
                    return true;
                }
            }
        }
    }
    false
}

/// Secrets by their place among a tool's positional words: `user/password@db` logins,
/// `htpasswd -b`'s password, `redis-cli AUTH`'s, `openssl passwd`'s, and the like.
fn positional_secrets(
    tool: &str,
    rest: &[&Word],
    positional: &[&Word],
    out: &mut Vec<(usize, usize)>,
) {
    let pos: Vec<&str> = positional.iter().map(|w| w.text.as_str()).collect();
    match tool {
        t if SLASH_LOGIN.contains(&t) => {
            if let Some(w) = positional
                .iter()
                .find(|w| w.text.contains('/') && !w.text.starts_with('@'))
            {
                let a = w.text.find('/').unwrap() + 1;
                let b = w.text[a..].find('@').map(|k| k + a).unwrap_or(w.text.len());
                mask(out, w, a, b);
            }
        }
        "htpasswd"
            if rest
                .iter()
                .any(|w| w.text.starts_with('-') && w.text.contains('b')) =>
        {
            if let Some(w) = positional.last() {
                mask_all(out, w);
            }
        }
        "redis-cli" | "keydb-cli" | "valkey-cli" => {
            if let Some(k) = pos.iter().position(|p| p.eq_ignore_ascii_case("auth")) {
                for w in &positional[k + 1..] {
                    mask_all(out, w);
                }
            }
            if let Some(k) = pos.iter().position(|p| {
                p.eq_ignore_ascii_case("requirepass") || p.eq_ignore_ascii_case("masterauth")
            }) {
                for w in &positional[k + 1..] {
                    mask_all(out, w);
                }
            }
        }
        "openssl" | "mkpasswd" if tool == "mkpasswd" || pos.first() == Some(&"passwd") => {
            let skip = usize::from(tool == "openssl");
            for w in positional.iter().skip(skip) {
                mask_all(out, w);
            }
        }
        "rabbitmqctl" if matches!(pos.first(), Some(&"add_user") | Some(&"change_password")) => {
            if let Some(w) = positional.get(2) {
                mask_all(out, w);
            }
        }
        "vault" | "bao" if pos.first() == Some(&"login") => {
            for w in positional.iter().skip(1) {
                if !w.text.contains('=') && w.text != "-" {
                    mask_all(out, w);
                }
            }
        }
        "wpa_passphrase" => {
            if let Some(w) = positional.get(1) {
                mask_all(out, w);
            }
        }
        _ => {}
    }
}

/// `s/PATTERN/REPLACEMENT/` commands in a sed or perl script (any delimiter). The replacement is
/// what gets written into the file, so it is masked when the substitution writes a secret:
/// when the pattern matches a secret's setting (`s/^\(password = \).*/\1X/`, `s/DB_PASSWORD=.*/.../`), when the
/// pattern is a placeholder (`changeme`, `CHANGE_ME`, `your_api_key_here`, `xxxx`), or when the
/// replacement is shaped like a password ([`password_shaped`]). Leading back-references (`\1`,
/// `&`, `$1`) stay, and in a `key = value` replacement only the value goes.
fn substitutions(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_bytes();
    let close = |from: usize, d: u8| -> Option<usize> {
        let mut j = from;
        while j < t.len() {
            if t[j] == b'\\' {
                j += 2;
                continue;
            }
            if t[j] == d {
                return Some(j);
            }
            j += 1;
        }
        None
    };
    let mut i = 0;
    while i + 1 < t.len() {
        let starts = t[i] == b's' && (i == 0 || b" \t\n;{}!/$0123456789".contains(&t[i - 1]));
        let d = t[i + 1];
        if !starts || d.is_ascii_alphanumeric() || d.is_ascii_whitespace() || d == b'\\' {
            i += 1;
            continue;
        }
        let Some(p_end) = close(i + 2, d) else { break };
        let Some(r_end) = close(p_end + 1, d) else {
            break;
        };
        let pat = &w.text[i + 2..p_end];
        let repl = &w.text[p_end + 1..r_end];
        let lead = BACKREF.find(repl).map_or(0, |m| m.end());
        let value = &repl[lead..];
        let keyed = IDENT
            .find_iter(pat)
            .any(|m| secret_name(m.as_str()) && KEY_THEN_SEP.is_match(&pat[m.end()..]));
        let names_secret = keyed || IDENT.find_iter(pat).any(|m| placeholder(m.as_str()));
        // masked already (by shape, say, with the backreference's digit): kept as it is
        let masked = repl.contains(MASK);
        if !value.is_empty() && !masked && (names_secret || password_shaped(value)) {
            let at = p_end + 1 + lead;
            // a pattern of a setting replaced by a setting: `s/^password=.*/password=new/`; a
            // placeholder's or a backreference's replacement is the value, all of it
            match REPL_PAIR.captures(value).filter(|_| keyed && lead == 0) {
                Some(c) if secret_name(&c[1]) => {
                    let v = c.get(2).unwrap();
                    mask(out, w, at + v.start(), at + v.end());
                }
                _ => mask(out, w, at, r_end),
            }
        }
        i = r_end;
    }
}

static PRINTF_SECRET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)(?:pass|passwd|password|secret|token|key)[A-Za-z_]*["']?[ \t]*[=: \t][ \t]*["']?%[-0-9.]*[sb]"#)
        .unwrap()
});
static BACKREF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:\\[0-9]|&|\$[0-9]|\$\{[0-9]+\})+").unwrap());
/// What follows a key in a pattern that matches its setting: `password = `, `\(DB_PASSWORD=\)`,
/// `api_key\s*:`.
static KEY_THEN_SEP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"^(?:[ \t"'()]|\\[()]|\\s[*+?]?)*[:=]"#).unwrap());
static IDENT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z_][A-Za-z0-9_]*").unwrap());
static REPL_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*[:=]\s*["']?([^"']+)["']?\s*$"#).unwrap()
});

/// A word that stands for a secret to be filled in: `changeme`, `CHANGE_ME`, `REPLACE_ME`,
/// `placeholder`, `xxxx`, `redacted`, `your_..._here`.
fn placeholder(word: &str) -> bool {
    let flat: String = word
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    [
        "changeme",
        "replaceme",
        "placeholder",
        "xxxx",
        "redacted",
        "fillme",
        "fillin",
    ]
    .iter()
    .any(|p| flat.contains(p))
        || flat.starts_with("your") && flat.ends_with("here")
}

/// Whether a word is shaped like a password a person chose: 8 to 64 characters with no space,
/// upper and lower case letters, a digit and one of `!@#%&~`, and none of the characters that
/// make it a regex, a path or a URL. `Spring2024!`, `P@ssw0rd#7`; not `navItem1\b`,
/// `Header2Footer3`, `ERROR|WARN`.
pub fn password_shaped(s: &str) -> bool {
    let n = s.chars().count();
    (8..=64).contains(&n)
        && s.bytes().any(|b| b.is_ascii_uppercase())
        && s.bytes().any(|b| b.is_ascii_lowercase())
        && s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().any(|b| b"!@#%&~".contains(&b))
        && !s
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b"\\()[]{}|^$*+?/:'\"<>`".contains(&b))
}

/// Masks the secret part of `w` from byte `at`, as `takes` says.
fn secret_part(out: &mut Vec<(usize, usize)>, w: &Word, at: usize, takes: Takes) {
    let v = &w.text[at..];
    let sep = match takes {
        Takes::UserColon => Some(':'),
        Takes::UserPercent => Some('%'),
        Takes::UserComma => Some(','),
        _ => None,
    };
    match sep {
        None => mask(out, w, at, w.text.len()),
        Some(c) => {
            if let Some(k) = v.find(c) {
                mask(out, w, at + k + 1, w.text.len());
            } else if randomish(v) {
                mask(out, w, at, w.text.len());
            }
        }
    }
}

/// Splits a name into lowercase words at `-`, `_`, `.`, `:` and camelCase boundaries.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Last words of a name that say its value is about a secret, not the secret (`password_file`).
const NOT_SECRET_LAST: &[&str] = &[
    "file",
    "files",
    "path",
    "dir",
    "directory",
    "env",
    "stdin",
    "fd",
    "type",
    "length",
    "len",
    "prompt",
    "helper",
    "cmd",
    "command",
    "url",
    "uri",
    "endpoint",
    "id",
    "ids",
    "name",
    "names",
    "format",
    "algorithm",
    "algo",
    "method",
    "mode",
    "size",
    "bits",
    "count",
    "policy",
    "server",
    "host",
    "port",
    "location",
    "ref",
    "user",
    "username",
    "expiry",
    "expires",
    "ttl",
    "timeout",
    "hint",
    "version",
    "limit",
    "limits",
    "budget",
    "usage",
    "count",
    "min",
    "max",
    "strength",
    "required",
    "reset",
    "rotation",
    "manager",
    "source",
    "provider",
    "store",
];

/// Parts of a name (its words run together) that say its value is a secret.
const SECRET_PARTS: &[&str] = &[
    "passw",
    "passphrase",
    "passwd",
    "secret",
    "apikey",
    "accesskey",
    "privatekey",
    "authtoken",
    "storepass",
    "keypass",
    "requirepass",
    "masterauth",
    "credential",
    "cookie",
    "signature",
    "bearer",
    "passin",
    "passout",
    "sessionid",
    "secretkey",
    "authorization",
    "authkey",
    "accesstoken",
    "refreshtoken",
    "idtoken",
    "clientsecret",
    "sastoken",
    "connectionstring",
];

/// Words of a name that say its value is a secret (`token` and `*token` besides).
const SECRET_WORDS: &[&str] = &[
    "pass", "pw", "pwd", "auth", "oauth", "sig", "creds", "cred", "otp", "totp", "jwt", "csrf",
    "xsrf", "sid", "sas", "psk", "passcode", "pin",
];

/// Words before `key` that say it is not a secret's key (`sort_key`, `public_key`).
const PLAIN_KEY: &[&str] = &[
    "public",
    "primary",
    "foreign",
    "sort",
    "partition",
    "cache",
    "group",
    "dedup",
    "lookup",
    "hot",
    "short",
    "sub",
    "gpg",
    "ssh",
    "host",
    "idempotency",
    "has",
    "primary",
    "natural",
    "composite",
    "unique",
    "index",
    "dict",
    "map",
    "row",
    "column",
    "field",
    "object",
    "cache",
];

/// Whether a flag, variable, field or header name says its value is a secret.
pub fn secret_name(name: &str) -> bool {
    let words = name_words(name);
    let Some(last) = words.last() else {
        return false;
    };
    if words[0] == "no"
        || words[0] == "max"
        || words[0] == "min"
        || NOT_SECRET_LAST.contains(&last.as_str())
    {
        return false;
    }
    let flat: String = words.concat();
    if SECRET_PARTS.iter().any(|s| flat.contains(s)) {
        return true;
    }
    if words
        .iter()
        .any(|w| SECRET_WORDS.contains(&w.as_str()) || w == "token" || w.ends_with("token"))
    {
        return true;
    }
    // `key` needs a qualifier: `api_key`, `STRIPE_KEY`, but not `--key 2` or `sort_key`
    words.len() >= 2
        && (last == "key" || last == "keys")
        && !PLAIN_KEY.contains(&words[words.len() - 2].as_str())
}

/// A broader reading for URL query parameters and connection-string fields, where a bare
/// `key`, `token`, `sig` or `code` is a credential.
fn secret_param(name: &str) -> bool {
    secret_name(name)
        || matches!(
            name.to_ascii_lowercase().as_str(),
            "key"
                | "token"
                | "sig"
                | "code"
                | "session"
                | "secret"
                | "apikey"
                | "access_token"
                | "x-amz-security-token"
                | "st"
                | "se"
        )
}

/// A positional word naming a setting whose value follows (`aws configure set
/// aws_secret_access_key X`, `nmcli ... password X`), but not a subcommand noun like `secret`
/// or `token` (`kubectl create secret generic`, `vault token create`).
fn positional_key(word: &str) -> bool {
    const NOUNS: &[&str] = &[
        "secret",
        "secrets",
        "token",
        "tokens",
        "auth",
        "key",
        "keys",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "session",
        "sessions",
        "login",
        "pass",
        "pin",
        "sig",
        "creds",
    ];
    let lower = word.to_ascii_lowercase();
    let name_like = word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    // the name's last word says what the value is: `user.password`, `aws_secret_access_key`,
    // but not `django.contrib.auth.models`
    let last = name_words(word).pop().unwrap_or_default();
    let says = [
        "pass",
        "password",
        "passwd",
        "passphrase",
        "pw",
        "pwd",
        "token",
        "secret",
        "key",
        "credential",
        "credentials",
        "creds",
        "cookie",
        "signature",
        "pin",
        "otp",
    ]
    .contains(&last.as_str())
        || ["pass", "password", "token", "secret"]
            .iter()
            .any(|s| last.ends_with(s));
    name_like
        && says
        && (!NOUNS.contains(&lower.as_str()) && secret_name(word)
            || matches!(lower.as_str(), "password" | "passwd" | "passphrase"))
}

static ENV_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\t*(?:export[ \t]+)?([A-Z_][A-Z0-9_]*)=([^\n]*[^\n,(\[{])$").unwrap()
});
static URL_USERINFO: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z0-9+.-]*://").unwrap());
static PAIR: LazyLock<Regex> = LazyLock::new(|| {
    // key=value, key:=value (httpie), key==value (httpie query), key = "value"
    Regex::new(r#"([A-Za-z0-9_.\-]*[A-Za-z0-9_])(?:\s*(:?==?)\s*["']|(:?==?))"#).unwrap()
});
static QUOTED_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(["'])([A-Za-z0-9_.\-]{1,64})["']\]?\s*[:=]\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^,}\]\s"']+))"#).unwrap()
});
static CALLEE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:[A-Za-z_][A-Za-z0-9_.]*|\*\*\*)?\s*\(").unwrap());
static CALL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([A-Za-z_][A-Za-z0-9_.]*)\s*(?:[=:]\s*([A-Za-z_][A-Za-z0-9_.]*)?\s*)?\(([^()]*)\)")
        .unwrap()
});
static LITERAL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'"#).unwrap());
static REGEX_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"([A-Za-z][A-Za-z0-9_.-]*)((?:\\s[*+?]?|[ \t])*)[:=]((?:\\s[*+?]?|[ \t])*)(["']?)([^"'\s\\]+)"#)
        .unwrap()
});
static NETRC_CONTEXT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|\s)(?:machine\s+\S+[\s\S]*\s(?:login|password)|default\s+login)\s").unwrap()
});
static NETRC_PASSWORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?:^|\s)(?:password|passwd)[ \t]+([^\s'"%][^\s'"]*)"#).unwrap());

/// `.netrc` lines (`machine h login u password PW`, or `password PW` on a line of its own):
/// the token after `password` is masked in text that reads as netrc (it has `machine ...
/// login`) or that a command writing a netrc file holds (`ctx`).
fn netrc_lines(w: &Word, ctx: bool, out: &mut Vec<(usize, usize)>) {
    if ctx || NETRC_CONTEXT.is_match(&w.text) {
        for c in NETRC_PASSWORD.captures_iter(&w.text) {
            let v = c.get(1).unwrap();
            mask(out, w, v.start(), v.end());
        }
    }
}
static HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)(?:^|[=\s({,]|\b)([A-Za-z][A-Za-z0-9_-]*)[ \t]*:[ \t]*([^\n]*)").unwrap()
});
static SCHEME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer|basic|digest|negotiate|token|apikey|sso-key|ntlm|aws4-hmac-sha256|hmac)\s+(\S+)").unwrap()
});

/// Secrets that a word is by its own shape, whatever the tool: URL credentials, `key=value`
/// pairs, quoted `"key": "value"` fields, auth headers.
fn word_rules(w: &Word, free: bool, out: &mut Vec<(usize, usize)>) {
    url_userinfo(w, out);
    pairs(w, free, out);
    call_args(w, out);
    regex_pairs(w, out);
    quoted_keys(w, out);
    headers(w, out);
    schemes(w, out);
}

/// `scheme://user:password@host`: the password (or a token given as the user).
fn url_userinfo(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    // scheme://user:password@host, password may hold `@`; the authority ends at the first `/`
    for m in URL_USERINFO.find_iter(t) {
        let rest = &t[m.end()..];
        let stop = rest
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(rest.len());
        let rest = &rest[..stop];
        let slash = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let Some(at) = rest[..slash].rfind('@').or_else(|| {
            // `@` after a `/` inside a password: take the last `@` before a `:port` or path
            let at = rest.rfind('@')?;
            rest[..at].contains(':').then_some(at)
        }) else {
            continue;
        };
        let info = &rest[..at];
        let base = m.end();
        match info.find(':') {
            Some(c) => mask(out, w, base + c + 1, base + at),
            None if randomish(info) || info.starts_with("ghp_") || info.len() >= 30 => {
                mask(out, w, base, base + at)
            }
            None => {}
        }
    }
}

/// `key=value` pairs (`key = "value"`, httpie's `key:=value` and `key==value`) whose key names a
/// secret, or in a query string a credential: the value.
fn pairs(w: &Word, free: bool, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in PAIR.captures_iter(t) {
        let key = c.get(1).unwrap();
        let whole = c.get(0).unwrap();
        let before = t[..key.start()].chars().next_back();
        let param = matches!(before, Some('?' | '&' | ';'));
        if !(secret_name(key.as_str()) || param && secret_param(key.as_str())) {
            continue;
        }
        let quoted = t[..whole.end()].ends_with(['"', '\'']);
        let start = whole.end();
        // `auth=("svc", "pw")`, `auth=HTTPBasicAuth(...)`: a call's arguments, see CALL
        if !quoted && CALLEE.is_match(&t[start..]) {
            continue;
        }
        // masked already (where it ends was decided then): masking again keeps it as it is
        if t[start..].starts_with(MASK) {
            continue;
        }
        // a word that is `KEY=value` (or `--flag=KEY=value`): the value is the rest of the word
        // (unless what follows the first space reads as a command: `PGPASSWORD=x psql -c ...`)
        let whole_word = matches!(before, None | Some('='))
            && !quoted
            && !free
            && t[start..]
                .split_once(char::is_whitespace)
                .map_or(true, |(_, more)| {
                    !more
                        .split_whitespace()
                        .any(|x| x.starts_with('-') || x.starts_with([';', '|', '&']))
                });
        let end = if whole_word {
            t.len()
        } else if quoted {
            let q = t[..start].chars().next_back().unwrap();
            t[start..].find(q).map(|k| start + k).unwrap_or(t.len())
        } else {
            value_end(t, start)
        };
        mask(out, w, start, end);
    }
}

/// Credentials as a call's arguments: `auth=("svc", "pw")`, `HTTPBasicAuth("svc", "pw")`,
/// `s.login("bob", "pw")`, `set_password("pw")`. The last word of the call's or the keyword's
/// name says credentials (auth, login, password, secret, token, ...); its string literals
/// after the first (the user) are masked, or the only one there is.
fn call_args(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in CALL.captures_iter(t) {
        let names = |g: usize| {
            c.get(g).is_some_and(|m| {
                let last = name_words(m.as_str()).pop().unwrap_or_default();
                matches!(
                    last.as_str(),
                    "auth"
                        | "login"
                        | "authenticate"
                        | "credentials"
                        | "creds"
                        | "password"
                        | "passwd"
                        | "secret"
                        | "token"
                )
            })
        };
        if !(names(1) || names(2)) {
            continue;
        }
        let a = c.get(3).unwrap();
        let lits: Vec<_> = LITERAL
            .captures_iter(a.as_str())
            .filter_map(|l| l.get(1).or(l.get(2)))
            .collect();
        for l in lits.iter().skip(usize::from(lits.len() >= 2)) {
            mask(out, w, a.start() + l.start(), a.start() + l.end());
        }
    }
}

/// A pair spelled as a regex: `password\s*=\s*"pw"`, `api_key\s*:\s*pw`
fn regex_pairs(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in REGEX_PAIR.captures_iter(t) {
        let spelled = c[2].contains("\\s") || c[3].contains("\\s");
        if spelled && secret_name(&c[1]) {
            let v = c.get(5).unwrap();
            mask(out, w, v.start(), v.end());
        }
    }
}

/// A quoted key naming a secret (`"password": "pw"`, `['token'] = pw`): its value.
fn quoted_keys(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in QUOTED_KEY.captures_iter(t) {
        if !secret_name(&c[2]) {
            continue;
        }
        if let Some(v) = c.get(3).or(c.get(4)).or(c.get(5)) {
            mask(out, w, v.start(), v.end());
        }
    }
}

/// A header naming a secret (`X-Api-Key: ...`, `Authorization: Bearer ...`): its value.
fn headers(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in HEADER.captures_iter(t) {
        let name = c.get(1).unwrap();
        let value = c.get(2).unwrap();
        // `PASS: 3 tests` is a test report, not a header
        if value.as_str().trim().is_empty()
            || !secret_name(name.as_str())
            || name.as_str().eq_ignore_ascii_case("pass")
            || value.as_str().starts_with("//")
        {
            continue;
        }
        let v = value.as_str();
        // keep the auth scheme (`Bearer ***`), mask the rest of the header
        let skip = SCHEME
            .captures(v)
            .filter(|s| s.get(0).unwrap().start() == 0)
            .map(|s| s.get(2).unwrap().start())
            .unwrap_or(0);
        let end = v.trim_end_matches(['"', '\'', ',', '}']).len().max(skip);
        mask(out, w, value.start() + skip, value.start() + end);
    }
}

/// An auth scheme's credentials (`Bearer ...`, `Basic ...`, a long random one after another scheme).
fn schemes(w: &Word, out: &mut Vec<(usize, usize)>) {
    let t = w.text.as_str();
    for c in SCHEME.captures_iter(t) {
        let scheme = c[1].to_ascii_lowercase();
        let v = c.get(2).unwrap();
        let strong = matches!(
            scheme.as_str(),
            "bearer" | "negotiate" | "sso-key" | "aws4-hmac-sha256" | "ntlm"
        );
        if strong
            || v.as_str().len() >= 8
                && (randomish(v.as_str()) || v.as_str().ends_with('=') || scheme == "basic")
        {
            let end = v.start() + v.as_str().trim_end_matches(['"', '\'', ',', ';']).len();
            mask(out, w, v.start(), end);
        }
    }
}

/// Where an unquoted `key=value` value ends: at whitespace or a quote, or at `&`, `;` or `,`
/// when another `key=` follows (a query string, a connection string, mount options).
fn value_end(t: &str, start: usize) -> usize {
    static NEXT_KEY: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s*[A-Za-z_][A-Za-z0-9_. \-]*=").unwrap());
    let b = t.as_bytes();
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b' ' | b'\t' | b'\n' | b'"' | b'\'' => return i,
            b'&' | b';' | b',' | b'#' if NEXT_KEY.is_match(&t[i + 1..]) || i + 1 == b.len() => {
                return i
            }
            b'&' | b';' | b'|' if b.get(i + 1).map_or(true, |c| c.is_ascii_whitespace()) => {
                return i
            }
            b'}' | b')' if i + 1 == b.len() => return i,
            _ => i += 1,
        }
    }
    b.len()
}

struct Shape {
    re: Regex,
    /// The capture group to mask (0: the whole match).
    group: usize,
    /// Also require the match to look random (for prefixes ordinary words may carry).
    random: bool,
}

static SHAPES: LazyLock<Vec<Shape>> = LazyLock::new(|| {
    let s = |re: &str, group: usize, random: bool| Shape {
        re: Regex::new(re).unwrap(),
        group,
        random,
    };
    vec![
        s(
            r"sk-(?:proj-|ant-[a-z]+\d*-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}",
            0,
            true,
        ),
        s(r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}", 0, false),
        s(r"whsec_[A-Za-z0-9]{16,}", 0, false),
        s(r"gh[pousr]_[A-Za-z0-9]{20,}", 0, false),
        s(r"github_pat_[A-Za-z0-9_]{20,}", 0, false),
        s(
            r"gl(?:pat|dt|rt|ptt|cbt|imt|oas|soat|ft|agent)-[A-Za-z0-9_-]{16,}",
            0,
            false,
        ),
        s(r"xox[abposre]-[A-Za-z0-9-]{10,}", 0, false),
        s(r"xapp-[A-Za-z0-9-]{10,}", 0, false),
        s(r"npm_[A-Za-z0-9]{20,}", 0, false),
        s(
            r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}\b",
            0,
            false,
        ),
        s(r"AIza[0-9A-Za-z_-]{30,}", 0, false),
        s(r"ya29\.[0-9A-Za-z_-]{20,}", 0, false),
        s(
            r"eyJ[A-Za-z0-9_-]{8,}\.(?:eyJ)?[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?",
            0,
            false,
        ),
        s(r"hv[sbr]\.[A-Za-z0-9_-]{20,}", 0, false),
        s(r"\bs\.[A-Za-z0-9]{24}\b", 0, true),
        s(r"pypi-[A-Za-z0-9_-]{20,}", 0, false),
        s(r"dop_v1_[a-f0-9]{20,}", 0, false),
        s(r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{20,}", 0, false),
        s(r"SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", 0, false),
        s(r"hf_[A-Za-z0-9]{20,}", 0, true),
        s(r"dp\.(?:st|ct|sa|scim|pt)\.[A-Za-z0-9_.-]{20,}", 0, false),
        s(
            r"(?:lin|pat|key|tok|api|sq0atp|sq0csp|EAAC)[_-][A-Za-z0-9_-]{24,}",
            0,
            true,
        ),
        s(
            r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9/_-]+)",
            1,
            false,
        ),
        s(
            r"discord(?:app)?\.com/api/webhooks/[0-9]+/([A-Za-z0-9_-]+)",
            1,
            false,
        ),
        s(
            r"(?s)-----BEGIN [A-Z0-9 ]*-----(.*?)(?:-----END [A-Z0-9 ]*-----|\z)",
            1,
            false,
        ),
    ]
});

static RUN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/_=-]{20,}").unwrap());

/// Secrets by shape anywhere in the original text: known token formats, webhook paths, PEM
/// blocks, and long random-looking strings.
fn shapes(s: &str, out: &mut Vec<(usize, usize)>) {
    for sh in SHAPES.iter() {
        for c in sh.re.captures_iter(s) {
            let m = c.get(sh.group).unwrap();
            if sh.random && !mixed(m.as_str()) {
                continue;
            }
            if !m.as_str().trim().is_empty() {
                out.push((m.start(), m.end()));
            }
        }
    }
    for m in RUN.find_iter(s) {
        let run = m.as_str();
        if randomish(run) {
            out.push((m.start(), m.end()));
            continue;
        }
        // `key=value` runs: judge each side; then words joined by separators one by one
        let mut at = m.start();
        for seg in run.split('=') {
            if randomish(seg) {
                out.push((at, at + seg.len()));
            } else {
                pieces(seg, at, out);
            }
            at += seg.len() + 1;
        }
    }
}

/// The random-looking parts of a run that is not random as a whole (`x.com/<key>/hook`,
/// `build-<key>`): each piece between separators, and each stretch of neighbouring pieces with
/// no word in them (a base64 key's own `/` and `+` cut it into such pieces).
fn pieces(seg: &str, at: usize, out: &mut Vec<(usize, usize)>) {
    let wordy = |p: &str| {
        p.as_bytes()
            .windows(4)
            .any(|w| w.iter().all(u8::is_ascii_lowercase))
    };
    // stretches of wordless pieces, as (start, end, pieces); empty pieces (`//`) neither
    // break nor lengthen one
    let mut stretches: Vec<(usize, usize, usize)> = Vec::new();
    let mut open = false;
    let mut p = at;
    for piece in seg.split(['/', '-', '_', '+']) {
        if randomish(piece) {
            out.push((p, p + piece.len()));
        }
        if wordy(piece) {
            open = false;
        } else if !piece.is_empty() {
            match stretches.last_mut() {
                Some(s) if open => *s = (s.0, p + piece.len(), s.2 + 1),
                _ => stretches.push((p, p + piece.len(), 1)),
            }
            open = true;
        }
        p += piece.len() + 1;
    }
    for (a, b, n) in stretches {
        if n >= 2 && randomish(&seg[a - at..b - at]) {
            out.push((a, b));
        }
    }
}

/// Letters and digits both present, and some uppercase (for `sk-`-style prefixes).
fn mixed(s: &str) -> bool {
    let d = s.bytes().filter(u8::is_ascii_digit).count();
    let u = s.bytes().filter(u8::is_ascii_uppercase).count();
    d >= 2 && (u >= 2 || d >= 6)
}

/// Whether a string looks like a random credential (base64, base64url, hex) rather than a
/// word, an identifier or a path: by length, mix of character classes, how often the class
/// changes, and character entropy.
pub fn randomish(s: &str) -> bool {
    let s = s.trim_end_matches('=');
    let n = s.len();
    if n < 20
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/_-".contains(&b))
    {
        return false;
    }
    let (mut u, mut l, mut d) = (0usize, 0usize, 0usize);
    // class changes between neighbouring letters and digits (separators skipped), and how much
    // of the string sits in runs of four or more lowercase letters, as words do
    let (mut changes, mut prev) = (0usize, 9u8);
    let (mut in_runs, mut run) = (0usize, 0usize);
    for b in s.bytes() {
        let c = match b {
            b'A'..=b'Z' => 0,
            b'a'..=b'z' => 1,
            b'0'..=b'9' => 2,
            _ => 3,
        };
        match c {
            0 => u += 1,
            1 => l += 1,
            2 => d += 1,
            _ => {}
        }
        if c == 1 {
            run += 1;
        } else {
            if run >= 4 {
                in_runs += run;
            }
            run = 0;
        }
        if c != 3 {
            if prev != 9 && c != prev {
                changes += 1;
            }
            prev = c;
        }
    }
    if run >= 4 {
        in_runs += run;
    }
    let alnum = u + l + d;
    if alnum * 4 < n * 3 {
        return false;
    }
    if s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return n >= 32 && d >= 4 && (u + l) >= 4 && (u == 0 || l == 0);
    }
    let churn = changes as f64 / (alnum.max(2) - 1) as f64;
    let wordy = in_runs as f64 / n as f64;
    let ent = entropy(s);
    if u >= 2 && l >= 2 && d >= 2 {
        // a key with no word in it at all may churn less, as random strings sometimes do
        // (one base64 key in ~1,000 drawn churns under 0.45), if its entropy says it is random
        return (churn >= 0.45 && ent >= 3.6 && wordy < 0.45)
            || (churn >= 0.3 && ent >= 4.0 && in_runs == 0);
    }
    if (u == 0 || l == 0) && d * 4 >= alnum && (u + l) * 4 >= alnum && n >= 24 {
        return churn >= 0.3 && ent >= 3.8;
    }
    if d == 0 && u >= 4 && l >= 4 && n >= 40 {
        return churn >= 0.5 && wordy < 0.3;
    }
    false
}

fn entropy(s: &str) -> f64 {
    let mut f = [0u32; 256];
    for b in s.bytes() {
        f[b as usize] += 1;
    }
    let n = s.len() as f64;
    f.iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}
