//! Generated secret-bearing commands for the privacy property tests: a secret of each family the
//! masker promises to hide, embedded in a command of that family, then wrapped in shell grammar
//! (chains, `bash -c`, `ssh host '...'`, `sudo`, tabs). Used by the masker's unit properties
//! (`src/scrub/tests.rs`) and by the end-to-end test over a real opencode session.
#![allow(dead_code)]

use proptest::prelude::*;
use proptest::sample::select;

/// One generated command: the secret in it, and the same command with the secret replaced by a
/// placeholder (to tell a leak from a coincidence with the command's own text).
#[derive(Debug, Clone)]
pub struct Case {
    pub family: &'static str,
    pub command: String,
    pub secret: String,
    pub control: String,
}

impl Case {
    /// The pieces of the secret (every 6-byte window, or `n` with [`Case::leaks_of`]) that show up in `text` and are not part
    /// of the command around the secret: empty when nothing of the secret leaked.
    pub fn leaks(&self, text: &str) -> Vec<String> {
        self.leaks_of(text, 6)
    }

    /// As [`Case::leaks`], with windows of `n` bytes.
    pub fn leaks_of(&self, text: &str, n: usize) -> Vec<String> {
        let n = n.min(self.secret.len());
        let b = self.secret.as_bytes();
        (0..=b.len() - n)
            .filter_map(|i| std::str::from_utf8(&b[i..i + n]).ok())
            .filter(|w| text.contains(w) && !self.control.contains(w))
            .map(str::to_string)
            .collect()
    }
}

const PLACEHOLDER: &str = "\u{1}";

fn chars(set: &'static str, len: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let cs: Vec<char> = set.chars().collect();
    prop::collection::vec(select(cs), len).prop_map(|v| v.into_iter().collect())
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A password: letters and digits with some punctuation, never starting with `-`, with at least
/// one letter and one digit (so it is not a plain word or number).
fn password(extra: &'static str) -> impl Strategy<Value = String> {
    (
        chars(ALNUM, 1..2),
        chars(Box::leak(format!("{ALNUM}{extra}").into_boxed_str()), 6..18),
        chars("0123456789", 1..2),
        chars("abcdefghijklmnopqrstuvwxyz", 1..2),
    )
        .prop_map(|(a, b, c, d)| format!("{a}{b}{c}{d}"))
}

/// Quotes `s` for a shell, when it needs quoting.
pub fn sq(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Double-quotes `s` for a shell.
fn dq(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if "\"\\$`".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

fn case(family: &'static str, template: &str, secret: String, quote: bool) -> Case {
    let shown = if quote { sq(&secret) } else { secret.clone() };
    Case {
        family,
        command: template.replace("{}", &shown),
        control: template.replace("{}", PLACEHOLDER),
        secret,
    }
}

fn glued_flag() -> impl Strategy<Value = Case> {
    let t = select(vec![
        "mysql -uroot -p{} app -e 'select 1'",
        "mysqldump -u root -p{} app > dump.sql",
        "mariadb -p{} -h db app",
        "7z x -p{} backup.7z",
        "unrar x -p{} a.rar",
        "rar a -hp{} a.rar dir",
        "sshpass -p{} ssh deploy@web1 uptime",
        "ldapsearch -x -D cn=admin -w{} -b dc=x",
        "redis-cli -h cache -a{} ping",
    ]);
    (t, password("!%^*+,.:=@_ #~/'\"$")).prop_map(|(t, s)| case("glued flag", t, s, true))
}

fn separate_flag() -> impl Strategy<Value = Case> {
    let t = select(vec![
        "sshpass -p {} ssh deploy@web1",
        "mysql --password {} app",
        "mongosh --password={} app",
        "unzip -P {} site.zip",
        "zip -r -P {} out.zip dir",
        "docker login -u bob -p {} registry.example.com",
        "podman login --password {} quay.io",
        "gpg --batch --passphrase {} -d f.gpg",
        "deploytool --api-key {} run",
        "app --client-secret={} serve",
        "keytool -list -keystore ks.jks -storepass {}",
        "redis-cli -a {} ping",
        "sqlcmd -S db -U sa -P {} -Q 'select 1'",
        "ipmitool -H bmc -U admin -P {} power status",
        "openssl enc -aes-256-cbc -pass pass:{} -in a",
        "kubectl --token {} get pods",
        "wget --http-password={} https://files.example.com/a",
        "ssh-keygen -t ed25519 -N {} -f key",
        "cqlsh -u cassandra -p {} db",
        "mosquitto_pub -u bob -P {} -t topic -m hi",
    ]);
    (t, password("!%^*+,.:=@_ #~/'\"$")).prop_map(|(t, s)| case("separate flag", t, s, true))
}

fn user_password() -> impl Strategy<Value = Case> {
    let quoted = select(vec![
        "curl -u admin:{} https://api.example.com/x",
        "curl --user admin:{} https://api.example.com/x",
        "smbclient //fs/share -U bob%{}",
        "lftp -u bob,{} ftp.example.com",
    ]);
    let url = select(vec![
        "git clone https://bob:{}@git.example.com/r.git",
        "psql postgresql://app:{}@db:5432/app",
        "redis-cli -u redis://:{}@cache:6379/0 ping",
        "mongosh 'mongodb+srv://app:{}@cluster0.example.net/db'",
        "pip install --index-url https://u:{}@pypi.example.com/simple pkg",
        "DATABASE_URL=mysql://root:{}@127.0.0.1/app ./manage.py migrate",
    ]);
    let conn = select(vec![
        "psql 'host=db user=app password={} dbname=app'",
        "sqlcmd -C 'Server=db;User Id=sa;Password={};Database=x'",
        "mount -t cifs //fs/s /mnt -o username=bob,password={}",
    ]);
    prop_oneof![
        (quoted, password("!%^*+.=@_#~")).prop_map(|(t, s)| case("user:password", t, s, true)),
        (url, password("!*~._@%")).prop_map(|(t, s)| case("url credentials", t, s, false)),
        (conn, password("!@#%^*-_.")).prop_map(|(t, s)| case("connection string", t, s, false)),
    ]
}

fn header() -> impl Strategy<Value = Case> {
    let t = select(vec![
        "curl -H 'Authorization: Bearer {}' https://api.example.com",
        "curl -H 'Authorization: token {}' https://api.github.com/user",
        "curl -H 'X-API-Key: {}' https://api.example.com",
        "curl -H \"X-Auth-Token: {}\" https://api.example.com",
        "curl -H 'Cookie: sid={}; theme=dark' https://app.example.com",
        "wget --header='PRIVATE-TOKEN: {}' https://gitlab.example.com/api/v4/projects",
        "http GET https://vault.example.com X-Vault-Token:{}",
        "curl --header 'Proxy-Authorization: Basic {}' http://x",
        "curl -H 'X-Secret: {}' http://x",
    ]);
    (t, password("-._~+/=")).prop_map(|(t, s)| case("header", t, s, false))
}

fn query() -> impl Strategy<Value = Case> {
    let t = select(vec![
        "curl 'https://api.example.com/x?user=bob&token={}&page=2'",
        "curl 'https://api.example.com/x?api_key={}'",
        "wget 'https://s3.example.com/b/o?X-Amz-Signature={}&X-Amz-Expires=60'",
        "curl 'https://blob.example.com/c?sv=2021&sig={}&se=2030'",
        "curl https://maps.example.com/api?key={}",
        "curl 'https://x.example.com/login?user=bob&password={}'",
        "curl 'https://x.example.com/cb?code={}&state=1'",
        "curl 'https://x.example.com/?access_token={}'",
        "curl 'https://x.example.com/?client_secret={}&grant_type=x'",
    ]);
    (t, password("-._~%")).prop_map(|(t, s)| case("query parameter", t, s, false))
}

/// Known token formats, and random base64/hex strings no family names.
fn token() -> impl Strategy<Value = String> {
    let alnum = |n: std::ops::Range<usize>| chars(ALNUM, n);
    prop_oneof![
        alnum(36..37).prop_map(|s| format!("ghp_{s}")),
        (alnum(22..23), alnum(59..60)).prop_map(|(a, b)| format!("github_pat_{a}_{b}")),
        chars(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-",
            20..21
        )
        .prop_map(|s| format!("glpat-{s}")),
        alnum(40..49).prop_map(|s| format!("sk-{s}Q7x9K")),
        alnum(40..60).prop_map(|s| format!("sk-proj-{s}Zz42")),
        alnum(24..25).prop_map(|s| format!("sk_live_{s}")),
        (chars("0123456789", 12..13), alnum(24..25)).prop_map(|(a, b)| format!("xoxb-{a}-{b}")),
        alnum(36..37).prop_map(|s| format!("npm_{s}")),
        chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16..17).prop_map(|s| format!("AKIA{s}")),
        (alnum(20..40), alnum(20..60), alnum(30..44))
            .prop_map(|(a, b, c)| format!("eyJ{a}.eyJ{b}.{c}")),
        alnum(24..30).prop_map(|s| format!("hvs.{s}")),
        chars("0123456789abcdef", 40..65).prop_filter("hex with letters and digits", |s| {
            s.bytes().filter(u8::is_ascii_digit).count() >= 4
                && s.bytes().filter(u8::is_ascii_alphabetic).count() >= 4
                && !s
                    .as_bytes()
                    .windows(3)
                    .any(|w| w[0] == w[1] && w[1] == w[2])
        }),
        // a random base64 string, as random as a generated key: rare draws that look like words
        // (too few digits or case changes) are not keys and are left out
        chars(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
            32..64
        )
        .prop_filter("random-looking", |s| looks_random(s)),
    ]
}

/// An independent judge of "random-looking" for generated keys: all three classes present with
/// at least three of each, no run of four lowercase letters.
fn looks_random(s: &str) -> bool {
    let n = |f: fn(&u8) -> bool| s.bytes().filter(f).count();
    n(u8::is_ascii_uppercase) >= 3
        && n(u8::is_ascii_lowercase) >= 3
        && n(u8::is_ascii_digit) >= 3
        && !s
            .as_bytes()
            .windows(4)
            .any(|w| w.iter().all(u8::is_ascii_lowercase))
        && !s
            .as_bytes()
            .windows(4)
            .any(|w| w.iter().all(u8::is_ascii_uppercase))
        && s.bytes().collect::<std::collections::HashSet<u8>>().len() * 2 >= s.len()
}

fn known_shape() -> impl Strategy<Value = Case> {
    let t = select(vec![
        "echo {}",
        "curl -d 'k={}' https://x.example.com",
        "run --opt={} now",
        "printf '%s\\n' \"id:{}\"",
        "node scripts/call.js --as={} --dry-run",
        "grep -r {} .",
        "python3 tools/probe.py {}",
        "echo 'config url https://x.example.com/{}/hook'",
    ]);
    (t, token()).prop_map(|(t, s)| case("token shape", t, s, false))
}

fn assignment() -> impl Strategy<Value = Case> {
    let name = prop_oneof![
        select(vec![
            "DB_PASSWORD",
            "API_TOKEN",
            "SECRET_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "PGPASSWORD",
            "MYSQL_PWD",
            "STRIPE_KEY",
            "APP_SECRET",
            "REDIS_AUTH",
        ])
        .prop_map(str::to_string),
        chars("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 3..7).prop_map(|s| format!("X{s}")),
    ];
    let shell = select(vec![
        "export {N}={}",
        "declare -x {N}={}",
        "typeset -x {N}={}",
        "env {N}={} ./run.sh",
        "{N}={} ./run.sh --check",
        "set -a; {N}={}; set +a; ./run.sh",
        "docker run -e {N}={} app:latest",
        "sudo -u app {N}={} ./migrate",
    ]);
    let body = select(vec![
        "curl -d '{\"user\": \"bob\", \"password\": \"{}\"}' https://x.example.com",
        "curl -d 'user=bob&password={}' https://x.example.com/login",
        "echo '{\"api_key\": \"{}\"}' > creds.json",
    ]);
    let heredoc = select(vec![
        "cat > .env <<'EOF'\nAPP_ENV=dev\n{N}={}\nEOF",
        "cat <<EOF > .env.local\n{N}={}\nEOF\nnpm start",
        "tee config/.env <<-EOF\n\t{N}={}\nEOF",
    ]);
    prop_oneof![
        (shell, name.clone(), password("!%^*+,.:=@_ #~/'\"$")).prop_map(|(t, n, s)| case(
            "assignment",
            &t.replace("{N}", &n),
            s,
            true
        )),
        (body, password("!%^*+.@_#~-")).prop_map(|(t, s)| case("body", t, s, false)),
        (heredoc, name, password("!%^*+.:=@_#~/-")).prop_map(|(t, n, s)| case(
            "heredoc .env",
            &t.replace("{N}", &n),
            s,
            false
        )),
    ]
}

/// The second round's families (issue 30): a password flag inside a cluster of short flags, a
/// value written by a `sed` substitution, a `.netrc` line, credentials as a call's argument, a
/// secret given to a secret-setting CLI, and a search for the secret itself.
fn round_two() -> impl Strategy<Value = Case> {
    let cluster = select(vec![
        "curl -su svc:{} https://api.example.com/x",
        "curl -fsSLu admin:{} https://h.example.com/x",
        "zip -rP {} out.zip dir",
        "unzip -oP {} site.zip",
        "ldapsearch -xw {} -D cn=admin -b dc=x",
    ]);
    let sed = select(vec![
        "sed -i 's/changeme/{}/' config/app.ini",
        "sed -i 's|CHANGE_ME|{}|g' .env",
        "sed -i 's/^\\(password = \\).*/\\1{}/' /etc/app.conf",
        "sed -E -i 's/(DB_PASSWORD=).*/\\1{}/' .env",
        "perl -pi -e 's/your_api_key_here/{}/' settings.py",
    ]);
    let netrc = select(vec![
        "cat > ~/.netrc <<EOF\nmachine api.example.com login bob password {}\nEOF",
        "cat >> ~/.netrc <<'EOF'\nmachine git.example.com\nlogin ci\npassword {}\nEOF",
        "printf 'machine h login u password %s\\n' {} > ~/.netrc",
    ]);
    let call = select(vec![
        "python -c 'import requests; requests.get(u, auth=(\"svc\", \"{}\"))'",
        "python3 -c \"from requests.auth import HTTPBasicAuth as B; get(u, auth=B('svc', '{}'))\"",
        "python -c \"import smtplib; smtplib.SMTP('h').login('bob@x.com', '{}')\"",
    ]);
    let store = select(vec![
        "echo -n {} | gh secret set DEPLOY_TOKEN",
        "printf '%s' {} | npx wrangler secret put API_KEY",
        "gh secret set NPM_TOKEN --body {}",
        "aws ssm put-parameter --name /app/db --value {} --type SecureString",
        "az keyvault secret set --vault-name kv --name db --value {}",
        "vault kv put secret/app db={}",
        "fly secrets set DB={}",
        "gh secret set TOKEN <<< {}",
    ]);
    let search = select(vec![
        "grep -P 'password\\s*=\\s*\"{}\"' settings.py",
        "grep -E 'api_key\\s*:\\s*{}' app.yml",
    ]);
    // a password a person chose, for a search of the secret itself: Capitalised, digits, a mark
    let chosen = (
        select(vec!["Spring", "Winter", "Dragon", "Monkey", "Sunset"]),
        1000u32..9999,
        select(vec!["!", "@", "#", "%", "&"]),
    )
        .prop_map(|(w, n, m)| format!("{w}{n}{m}"));
    let grep_self = select(vec!["grep -rn {} config/", "rg -F {} .", "git grep -n {}"]);
    prop_oneof![
        (cluster, password("!%^*+.=@_#~")).prop_map(|(t, s)| case(
            "short-flag cluster",
            t,
            s,
            true
        )),
        (sed, password("!%^*+.=@_#~-")).prop_map(|(t, s)| case("sed substitution", t, s, false)),
        (netrc, password("!%^*+.=@_#~-")).prop_map(|(t, s)| case("netrc line", t, s, false)),
        (call, password("!%^*+.=@_#~-")).prop_map(|(t, s)| case("call argument", t, s, false)),
        (store, password("!%^*+.=@_#~-")).prop_map(|(t, s)| case("secret store", t, s, true)),
        (search, password("!%^*+.=@_#~-")).prop_map(|(t, s)| case("regex pair", t, s, false)),
        (grep_self, chosen).prop_map(|(t, s)| case("search for the secret", t, s, true)),
    ]
}

/// A secret-bearing command of any family.
pub fn family() -> impl Strategy<Value = Case> {
    prop_oneof![
        glued_flag(),
        separate_flag(),
        user_password(),
        header(),
        query(),
        known_shape(),
        assignment(),
        round_two(),
    ]
}

/// Shell grammar around a command: chains, nesting, wrappers, tabs.
fn wrap(c: Case, how: usize) -> Case {
    let f = |s: &str| -> String {
        match how {
            0 => s.to_string(),
            1 => format!("cd /srv/app && {s}"),
            2 => format!("{s}; echo done"),
            3 => format!("true || {s}"),
            4 => format!("bash -c {}", dq(s)),
            5 => format!("ssh web1 {}", sq(s)),
            6 => format!("sudo {s}"),
            7 => format!("timeout 30 {s}"),
            8 => s.replacen(' ', "\t", 1),
            9 => format!("echo start\n{s}\necho end"),
            10 => format!("out=$({s})"),
            _ => format!("sh -c {}", sq(s)),
        }
    };
    Case {
        family: c.family,
        command: f(&c.command),
        control: f(&c.control),
        secret: c.secret,
    }
}

/// A secret-bearing command of any family in any grammar.
pub fn command() -> impl Strategy<Value = Case> {
    (family(), 0usize..12).prop_map(|(c, how)| wrap(c, how))
}
