//! The masker's table: commands of every family the privacy promise names, what they mask to,
//! and ordinary commands that must come out untouched.

use super::*;
use proptest::prelude::*;
use serde_json::json;

#[path = "../../tests/support/secrets.rs"]
mod secrets;

#[test]
fn hash_is_sha1_prefix() {
    // sha1("abc") = a9993e364706816aba3e25717850c26c9cd0d89d
    assert_eq!(hash_str("abc"), "sha1:a9993e364706");
}

#[test]
fn args_keep_only_detector_keys() {
    let input = json!({"filePath": "/p/a.js", "oldString": "secret body", "newString": "x",
                       "offset": 3, "replaceAll": true, "todos": [{"content": "plan", "n": 1}]});
    let out = scrub_args(input.as_object().unwrap());
    assert_eq!(out["filePath"], "/p/a.js");
    assert_eq!(out["offset"], 3);
    assert_eq!(out["oldString"], hash_str("secret body"));
    assert_eq!(out["replaceAll"], true);
    assert_eq!(out["todos"][0]["content"], hash_str("plan"));
    assert_eq!(out["todos"][0]["n"], 1);
}

#[test]
fn each_argument_leaves_as_the_vocabularys_rule_for_it_says() {
    use crate::vocab::{Arg, Kept};
    // told apart by each masker: a path is masked a part at a time, a pattern without a
    // command's grammar
    let token = "ghp_R2x8Kq0vTz7LmN4bW9cY1dF5hJ3sA6eU0iO2";
    let texts = [
        format!("password=hunter2 /tmp/{token}/out"),
        "mysql -pSECRETmysql app".to_string(),
    ];
    for a in Arg::ALL {
        let one =
            |v: Value| scrub_args(&Map::from_iter([(a.key().to_string(), v)]))[a.key()].clone();
        let out = texts.clone().map(|t| one(json!(t)));
        let want = match a.kept() {
            Kept::MaskedCommand => ["password=*** ***", "mysql -p*** app"].map(Value::from),
            Kept::MaskedPattern => ["password=*** ***", "mysql -pSECRETmysql app"].map(Value::from),
            Kept::MaskedPath => {
                ["password=*** /tmp/***/out", "mysql -pSECRETmysql app"].map(Value::from)
            }
            Kept::Verbatim => texts.clone().map(Value::from),
            Kept::Number | Kept::Hashed => texts.clone().map(|t| Value::from(hash_str(&t))),
        };
        assert_eq!(out, want, "{a:?}");
        // a number stays a number whatever the rule (hashing keeps what is not a string); a
        // list has each of its strings hashed
        assert_eq!(one(json!(7)), 7, "{a:?}");
        assert_eq!(one(json!(["x"])), json!([hash_str("x")]), "{a:?}");
    }
}

#[test]
fn a_command_that_is_not_a_string_is_hashed_and_kept_keys_keep_their_type() {
    let input = json!({"command": ["mysql", "-pSECRETmysql"], "workdir": {"p": "hunter2"},
                       "timeout": "hunter2", "description": "run it", "filePath": 7});
    let out = scrub_args(input.as_object().unwrap());
    assert_eq!(
        out["command"],
        json!([hash_str("mysql"), hash_str("-pSECRETmysql")])
    );
    assert_eq!(out["workdir"], json!({"p": hash_str("hunter2")}));
    assert_eq!(out["timeout"], hash_str("hunter2"));
    assert_eq!(out["filePath"], 7);
    let text = serde_json::to_string(&out).unwrap();
    assert!(
        !text.contains("SECRET") && !text.contains("hunter2"),
        "{text}"
    );
}

#[test]
fn a_grep_pattern_is_masked_by_shape() {
    let input = json!({"pattern": "ghp_R2x8Kq0vTz7LmN4bW9cY1dF5hJ3sA6eU0iO2", "include": "*.rs"});
    let out = scrub_args(input.as_object().unwrap());
    assert_eq!(out["pattern"], "***");
    assert_eq!(out["include"], "*.rs");
}

/// Commands of every family, with what they mask to.
pub const TABLE: &[(&str, &str)] = &[
    // tools' password flags: glued, separate, short, long
    ("mysql -uroot -pSECRETmysql app -e 'select 1'", "mysql -uroot -p*** app -e 'select 1'"),
    ("mysqldump -u root -p'pa ss' db > d.sql", "mysqldump -u root -p*** db > d.sql"),
    ("mysql -u root -p app", "mysql -u root -p app"),
    ("mariadb --password=hunter2 -h db", "mariadb --password=*** -h db"),
    ("mysql --password hunter2 -h db", "mysql --password *** -h db"),
    ("sshpass -p 'hunter2' ssh deploy@web1 uptime", "sshpass -p *** ssh deploy@web1 uptime"),
    ("sshpass -phunter2 scp a b:", "sshpass -p*** scp a b:"),
    ("7z x -phunter2 backup.7z", "7z x -p*** backup.7z"),
    ("unzip -P hunter2 site.zip", "unzip -P *** site.zip"),
    ("zip -r -P hunter2 out.zip dir", "zip -r -P *** out.zip dir"),
    ("rar a -hphunter2 a.rar dir", "rar a -hp*** a.rar dir"),
    ("redis-cli -h cache -a hunter2 ping", "redis-cli -h cache -a *** ping"),
    ("redis-cli -h cache AUTH default hunter2", "redis-cli -h cache AUTH *** ***"),
    ("mongosh --username admin --password hunter2 db", "mongosh --username admin --password *** db"),
    ("mongodump -u admin -p hunter2 --db app", "mongodump -u admin -p *** --db app"),
    ("sqlcmd -S db -U sa -P 'Hunter2!' -Q 'select 1'", "sqlcmd -S db -U sa -P *** -Q 'select 1'"),
    ("ldapsearch -x -D cn=admin -w hunter2 -b dc=x", "ldapsearch -x -D cn=admin -w *** -b dc=x"),
    ("docker login -u bob -p hunter2 registry.io", "docker login -u bob -p *** registry.io"),
    ("docker run -p 8080:80 nginx", "docker run -p 8080:80 nginx"),
    ("echo hunter2 | docker login --password-stdin -u bob", "echo *** | docker login --password-stdin -u bob"),
    ("helm repo add x https://charts --username bob --password hunter2", "helm repo add x https://charts --username bob --password ***"),
    ("openssl enc -aes-256-cbc -pass pass:hunter2 -in a", "openssl enc -aes-256-cbc -pass *** -in a"),
    ("openssl pkcs12 -export -passout pass:hunter2 -out a.p12", "openssl pkcs12 -export -passout *** -out a.p12"),
    ("gpg --batch --passphrase hunter2 -d f.gpg", "gpg --batch --passphrase *** -d f.gpg"),
    ("keytool -list -keystore ks.jks -storepass hunter2", "keytool -list -keystore ks.jks -storepass ***"),
    ("ssh-keygen -t ed25519 -N hunter2 -f k", "ssh-keygen -t ed25519 -N *** -f k"),
    ("ssh -p 2222 deploy@web1", "ssh -p 2222 deploy@web1"),
    ("az login -u bob@x.com -p hunter2", "az login -u bob@x.com -p ***"),
    ("kubectl --token=hunter2 get pods", "kubectl --token=*** get pods"),
    ("psql --no-password -h db -U app", "psql --no-password -h db -U app"),
    ("sqlplus scott/tiger@orcl @run.sql", "sqlplus scott/***@orcl @run.sql"),
    ("htpasswd -b .htpasswd bob hunter2", "htpasswd -b .htpasswd bob ***"),
    ("ipmitool -I lanplus -H bmc -U admin -P hunter2 power status", "ipmitool -I lanplus -H bmc -U admin -P *** power status"),
    // user:password pairs
    ("curl -u admin:hunter2 https://api/x", "curl -u admin:*** https://api/x"),
    ("curl -uadmin:hunter2 https://api/x", "curl -uadmin:*** https://api/x"),
    ("curl --user admin:hunter2 https://api/x", "curl --user admin:*** https://api/x"),
    ("curl -u admin https://api/x", "curl -u admin https://api/x"),
    ("git clone https://bob:hunter2@example.com/r", "git clone https://bob:***@example.com/r"),
    ("psql postgresql://app:p@ss@db:5432/app", "psql postgresql://app:***@db:5432/app"),
    ("redis-cli -u redis://:hunter2@cache:6379/0 ping", "redis-cli -u redis://:***@cache:6379/0 ping"),
    ("psql 'host=db user=app password=hunter2 dbname=app'", "psql 'host=db user=app password=*** dbname=app'"),
    ("sqlcmd -C 'Server=db;User Id=sa;Password=hunter2;'", "sqlcmd -C 'Server=db;User Id=sa;Password=***;'"),
    ("smbclient //fs/share -U bob%hunter2", "smbclient //fs/share -U bob%***"),
    ("mount -t cifs //fs/s /mnt -o username=bob,password=hunter2", "mount -t cifs //fs/s /mnt -o username=bob,password=***"),
    ("lftp -u bob,hunter2 ftp.example.com", "lftp -u bob,*** ftp.example.com"),
    // headers
    ("curl -H 'Authorization: Bearer eyJhbGciOi' http://h", "curl -H 'Authorization: Bearer ***' http://h"),
    ("curl -H \"X-API-Key: hunter2\" http://h", "curl -H \"X-API-Key: ***\" http://h"),
    ("curl -H 'Cookie: sid=abc; theme=dark' http://h", "curl -H 'Cookie: ***' http://h"),
    ("curl --header 'PRIVATE-TOKEN: hunter2' https://gitlab/api", "curl --header 'PRIVATE-TOKEN: ***' https://gitlab/api"),
    ("http GET api/x X-Auth-Token:hunter2", "http GET api/x X-Auth-Token:***"),
    ("git -c http.extraHeader='Authorization: Basic Ym9iOmh1bnRlcjI=' fetch", "git -c http.extraHeader='Authorization: Basic ***' fetch"),
    ("curl -b 'session=hunter2' http://h", "curl -b *** http://h"),
    // URL query parameters
    ("curl 'https://api/x?user=bob&token=hunter2&page=2'", "curl 'https://api/x?user=bob&token=***&page=2'"),
    ("wget 'https://s3/b/o?X-Amz-Signature=abc123&X-Amz-Expires=60'", "wget 'https://s3/b/o?X-Amz-Signature=***&X-Amz-Expires=60'"),
    ("curl https://maps/api?key=hunter2", "curl https://maps/api?key=***"),
    // known token shapes anywhere in a word
    ("echo ghp_R2x8Kq0vTz7LmN4bW9cY1dF5hJ3sA6eU0iO2", "echo ***"),
    ("OPENAI=1 python run.py --k=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv", "OPENAI=*** python run.py --k=***"),
    ("stripe charges list --api-key sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe charges list --api-key ***"),
    ("glab auth login --token glpat-xR8vK2mQ9wL4tZ7yB1nC", "glab auth login --token ***"),
    ("curl -d 'token=xoxb-123456789012-abcdefghij' slack", "curl -d 'token=***' slack"),
    ("npm publish --//registry.npmjs.org/:_authToken=npm_a8B2c4D6e8F0g2H4i6J8k0L2m4N6o8P0q2R4", "npm publish --//registry.npmjs.org/:_authToken=***"),
    ("aws s3 ls # key AKIAIOSFODNN7EXAMPLE", "aws s3 ls # key ***"),
    ("x eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "x ***"),
    ("curl -X POST https://hooks.slack.com/services/T0000/B0000/XXXXXXXX", "curl -X POST https://hooks.slack.com/services/***"),
    ("VAULT_ADDR=http://v:8200 vault login hvs.CAESIJx8y2KqL0vWzR7mN4bT9cY1dF5hJ3sA", "VAULT_ADDR=*** vault login ***"),
    ("echo '-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----' > k", "echo '-----BEGIN RSA PRIVATE KEY-----***-----END RSA PRIVATE KEY-----' > k"),
    ("x da39a3ee5e6b4b0d3255bfef95601890afd80709", "x ***"),
    ("echo QWxhZGRpbjpvcGVuIHNlc2FtZTEyMzQ1Njc4OQ", "echo ***"),
    // assignments in every form
    ("API_KEY=abc123 make deploy", "API_KEY=*** make deploy"),
    ("export TOKEN='x y'; run", "export TOKEN=***; run"),
    ("declare -x DB_PASSWORD=hunter2", "declare -x DB_PASSWORD=***"),
    ("env GITHUB_TOKEN=hunter2 gh pr list", "env GITHUB_TOKEN=*** gh pr list"),
    ("set -a; PGPASSWORD=hunter2; set +a; psql", "set -a; PGPASSWORD=***; set +a; psql"),
    ("sudo -u app DB_PASS=hunter2 ./migrate", "sudo -u app DB_PASS=*** ./migrate"),
    ("RUST_LOG=debug cargo test", "RUST_LOG=debug cargo test"),
    ("docker run -e POSTGRES_PASSWORD=hunter2 postgres", "docker run -e POSTGRES_PASSWORD=*** postgres"),
    ("curl -d '{\"user\": \"bob\", \"password\": \"hunter2\"}' http://h", "curl -d '{\"user\": \"bob\", \"password\": \"***\"}' http://h"),
    ("curl -d 'user=bob&password=hunter2' http://h", "curl -d 'user=bob&password=***' http://h"),
    ("cat > .env <<'EOF'\nDB_PASSWORD=hunter2\nAPI_KEY=abc\nEOF\nnpm start", "cat > .env <<'EOF'\nDB_PASSWORD=***\nAPI_KEY=***\nEOF\nnpm start"),
    ("kubectl create secret generic db --from-literal=password=hunter2", "kubectl create secret generic db --from-literal=password=***"),
    ("aws configure set aws_secret_access_key hunter2", "aws configure set aws_secret_access_key ***"),
    // shell grammar: chains, nesting, tabs, newlines
    ("cd app && mysql -pSECRET app; echo done", "cd app && mysql -p*** app; echo done"),
    ("true || sshpass -p hunter2 ssh h", "true || sshpass -p *** ssh h"),
    ("bash -c 'mysql -uroot -phunter2 -e \"show databases\"'", "bash -c 'mysql -uroot -p*** -e \"show databases\"'"),
    ("ssh web1 \"PGPASSWORD=hunter2 psql -c 'select 1'\"", "ssh web1 \"PGPASSWORD=*** psql -c 'select 1'\""),
    ("echo $(mysql -phunter2 -N -e 'select 1')", "echo $(mysql -p*** -N -e 'select 1')"),
    ("mysql\t-phunter2\tapp", "mysql\t-p***\tapp"),
    ("ls\nmysql -phunter2 app\nls", "ls\nmysql -p*** app\nls"),
    ("/usr/bin/mysql -phunter2", "/usr/bin/mysql -p***"),
];

#[test]
fn every_family_is_masked() {
    assert!(TABLE.len() >= 60, "{} rows", TABLE.len());
    let mut wrong = Vec::new();
    for (cmd, want) in TABLE {
        let got = mask_command(cmd);
        if got != *want {
            wrong.push(format!("  {cmd:?}\n  got  {got:?}\n  want {want:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} wrong:\n{}",
        wrong.len(),
        TABLE.len(),
        wrong.join("\n")
    );
}

#[test]
fn masking_is_stable_and_idempotent() {
    for (cmd, _) in TABLE {
        let once = mask_command(cmd);
        assert_eq!(mask_command(cmd), once);
        assert_eq!(mask_command(&once), once, "{cmd:?}");
    }
}

#[test]
fn ordinary_commands_are_untouched() {
    let mut wrong = Vec::new();
    for cmd in [
        "cat src/navbar.js | head -50",
        "sed -n '120,180p' docs/spec.md",
        "git add -A && git commit -q -m 'Fix navItem1 return; add footer'",
        "python3 -m pytest tests/test_really_long_module_name_here.py -x",
        "ls /usr/lib/x86_64-linux-gnu/some_library_directory_name",
        "cargo test --lib scrub::tests -- --nocapture",
        "npm run build -- --mode production",
        "docker compose -f docker-compose.yml up -d --build",
        "grep -rn 'TODO' src/ | wc -l",
        "find . -name '*.rs' -newer Cargo.toml -print",
        "kubectl get pods -n kube-system -o wide",
        "ssh -p 2222 deploy@web1 'systemctl status nginx'",
        "tar -xzf node-v20.11.1-linux-x64.tar.xz -C /opt",
        "rg -n 'fn main' --type rust",
        "git log --oneline -20 -- src/components/Header2Footer3Widget4.tsx",
        "curl -s http://localhost:8080/api/v1/health",
        "jq '.items[] | select(.kind == \"call\")' out.jsonl",
        "awk -F: '{print $1}' /etc/passwd",
        "sort --key=2 data.txt",
        "make -j4 CFLAGS=-O2",
        "python -c 'print(1+1)'",
        "git diff HEAD~3 --stat",
        "go test ./... -run TestGetUserProfileByEmailAddressHandler",
    ] {
        let got = mask_command(cmd);
        if got != cmd {
            wrong.push(format!("  {cmd:?}\n  got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "changed:\n{}", wrong.join("\n"));
}

/// Members of the families not designed for: other tools and spellings than the table's.
#[test]
fn held_out_members_are_masked() {
    let mut wrong = Vec::new();
    for (cmd, secret) in [
        ("mysqladmin -uroot -pS3cretAdm1n status", "S3cretAdm1n"),
        ("cqlsh -u cassandra -p Cass4ndraPw db", "Cass4ndraPw"),
        ("mosquitto_pub -h m -u bob -P MqttPw99 -t x -m y", "MqttPw99"),
        ("influx -username admin -password InfluxPw7 -execute 'show databases'", "InfluxPw7"),
        ("wget --http-password=WgetPw42 https://x/f", "WgetPw42"),
        ("svn checkout --password SvnPw42 https://svn/x", "SvnPw42"),
        ("twine upload -u __token__ -p pypi-AgEIcHlwaS5vcmcCJGE4ZjY3 dist/*", "pypi-AgEIcHlwaS5vcmcCJGE4ZjY3"),
        ("mongo mongodb+srv://app:Atl4sPw@cluster0.x.mongodb.net/db", "Atl4sPw"),
        ("amqp-publish -u amqp://guest:RabbitPw1@mq:5672/ -r q", "RabbitPw1"),
        ("ftp ftp://anon:FtpPw123@files.example.com/", "FtpPw123"),
        ("curl -H 'X-Vault-Token: VaultTok3n' http://v", "VaultTok3n"),
        ("curl -H 'Ocp-Apim-Subscription-Key: AzSubKey9' http://v", "AzSubKey9"),
        ("curl 'https://blob.core/c/b?sv=2021&sig=AzSasSig9%3D&se=2030'", "AzSasSig9"),
        ("curl 'https://api/x?access_token=OAuthTok9'", "OAuthTok9"),
        ("export ANTHROPIC_API_KEY=sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2", "sk-ant-api03"),
        ("typeset -x HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz123456", "hf_AbCd"),
        ("STRIPE_SECRET=whsec_8f7d6c5b4a3928170615f4e3d2c1b0a9 node app.js", "whsec_"),
        ("git push https://oauth2:glpat-Gh7Jk9Lm2Np4Qr6St8Vw@gitlab.com/x.git", "glpat-Gh7J"),
        ("docker run -e 'SLACK_WEBHOOK=https://hooks.slack.com/services/T01/B02/Zz9Yy8Xx' app", "Zz9Yy8Xx"),
        ("java -Djavax.net.ssl.keyStorePassword=JksPw42 -jar app.jar", "JksPw42"),
        ("mvn deploy -Dgpg.passphrase=GpgPhrase7", "GpgPhrase7"),
        ("nmcli dev wifi connect HomeNet password WifiPw123", "WifiPw123"),
        ("git config --global user.password GitPw42", "GitPw42"),
        ("python -c \"import requests; requests.get(u, headers={'Authorization': 'Bearer PyTok3n'})\"", "PyTok3n"),
        ("node -e \"fetch(u, {headers: {'x-api-key': 'NodeKey9'}})\"", "NodeKey9"),
        ("cat <<EOF > config.json\n{\"db\": {\"password\": \"HeredocPw9\"}}\nEOF", "HeredocPw9"),
        ("tee .env.local <<EOF\nSTRIPE_KEY=HeredocKey9\nEOF", "HeredocKey9"),
        ("printf '%s' TeePw99 | sudo -S apt update", "TeePw99"),
        ("echo 'bob:ChPw99' | chpasswd", "ChPw99"),
        ("xfreerdp /u:bob /p:RdpPw99 /v:host", "RdpPw99"),
        ("snmpwalk -v3 -u bob -A SnmpAuth9 -X SnmpPriv9 host", "SnmpAuth9"),
        ("rabbitmqctl add_user bob RmqPw99", "RmqPw99"),
        ("vault login s.Q8w7E6r5T4y3U2i1O0p9A8s7", "s.Q8w7E6r5T4y3U2i1O0p9A8s7"),
        ("curl --oauth2-bearer BearTok9 https://api", "BearTok9"),
        ("echo $((1+1)); DB_PASSWORD=Chain9 ./run", "Chain9"),
        ("terraform apply -var 'db_password=TfPw99'", "TfPw99"),
        ("ansible-playbook site.yml -e 'ansible_become_pass=BecomePw9'", "BecomePw9"),
        ("gh secret set TOKEN --body 'Zq8Wx7Ec6Rv5Tb4Yn3Um2Ik1Ol0Pz9'", "Zq8Wx7Ec6Rv5Tb4Yn3Um2Ik1Ol0Pz9"),
    ] {
        let got = mask_command(cmd);
        if got.contains(secret) {
            wrong.push(format!("  {cmd:?}\n  got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "leaked:\n{}", wrong.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, max_shrink_iters: 0, ..ProptestConfig::default() })]

    /// A generated secret of any family, in any shell grammar, never survives masking.
    #[test]
    fn no_generated_secret_survives_masking(c in secrets::command()) {
        let masked = mask_command(&c.command);
        let leaks = c.leaks(&masked);
        prop_assert!(leaks.is_empty(), "{}: {:?}\n -> {:?}\n leaked {:?}", c.family, c.command, masked, leaks);
        // and masking is stable
        let again = mask_command(&masked);
        prop_assert!(again == masked, "unstable: {:?}\n -> {:?}\n -> {:?}", c.command, masked, again);
    }
}

/// The second held-out round (issue 30, point 2): families the first table did not design for,
/// each in another tool or spelling than the rules were written from.
const HELD_OUT_2: &[(&str, &str)] = &[
    // a password flag inside a cluster of short flags
    ("curl -su svc:Clust3rPw! https://api.example.com/x", "Clust3rPw!"),
    ("curl -ksSu admin:K5sPw77 https://h/x", "K5sPw77"),
    ("zip -rP Z1pClust9 out.zip dir", "Z1pClust9"),
    ("ldapsearch -xw Ld4pClu5 -D cn=admin -b dc=x", "Ld4pClu5"),
    ("mysql -Nsp'My5qlClu' app -e 'select 1'", "My5qlClu"),
    // a value written by a sed substitution
    ("sed -i 's/changeme/Spring2024!/' config/app.ini", "Spring2024!"),
    ("sed -i \"s|CHANGE_ME|S3dPipe99|g\" .env", "S3dPipe99"),
    ("sed -i 's/^\\(password = \\).*/\\1S3dCapt42/' /etc/app.conf", "S3dCapt42"),
    ("sed -E -i 's/(DB_PASSWORD=).*/\\1SedEnv77x/' .env", "SedEnv77x"),
    ("perl -pi -e 's/your_api_key_here/PerlKey9q/' settings.py", "PerlKey9q"),
    ("sed -e 's#placeholder#Ph0lder77#' -i conf.yml", "Ph0lder77"),
    // a .netrc line, in a here-document or an echo
    ("cat > ~/.netrc <<EOF\nmachine api.example.com login bob password N3trcPw1\nEOF", "N3trcPw1"),
    ("cat >> ~/.netrc <<'EOF'\nmachine git.example.com\nlogin ci\npassword N3trcPw2\nEOF", "N3trcPw2"),
    ("cat > .netrc <<EOF\npassword N3trcPw3\nEOF", "N3trcPw3"),
    ("echo 'machine h login u password N3trcPw4' >> ~/.netrc && chmod 600 ~/.netrc", "N3trcPw4"),
    ("printf 'default login anon password N3trcPw5\\n' > ~/.netrc", "N3trcPw5"),
    // credentials as a call's argument
    ("python -c 'import requests; requests.get(u, auth=(\"svc\", \"PyAuth77\"))'", "PyAuth77"),
    ("python3 -c \"from requests.auth import HTTPBasicAuth; r = get(u, auth=HTTPBasicAuth('svc', 'BasicPy9'))\"", "BasicPy9"),
    ("node -e \"axios.get(u, {auth: {username: 'svc', password: 'AxiosPw8'}})\"", "AxiosPw8"),
    ("python -c \"import smtplib; s = smtplib.SMTP('h'); s.login('bob@x.com', 'SmtpPw42')\"", "SmtpPw42"),
    ("python -c \"psycopg2.connect(host='db', user='app', password='PsyPw123')\"", "PsyPw123"),
    // secrets given to a secret-setting CLI: on stdin, by --value/--body, as KEY=value
    ("echo -n 'GhSecret42x' | gh secret set DEPLOY_TOKEN --repo org/app", "GhSecret42x"),
    ("printf '%s' 'WrSecret42' | npx wrangler secret put API_KEY", "WrSecret42"),
    ("gh secret set NPM_TOKEN -b 'GhBody99x'", "GhBody99x"),
    ("gh secret set NPM_TOKEN --body=GhBody98y", "GhBody98y"),
    ("aws ssm put-parameter --name /app/db --value 'SsmVal42x' --type SecureString", "SsmVal42x"),
    ("aws secretsmanager create-secret --name app/db --secret-string 'SmStr42x'", "SmStr42x"),
    ("az keyvault secret set --vault-name kv --name db --value AzKvVal9", "AzKvVal9"),
    ("vault kv put secret/app db=VaultKv42", "VaultKv42"),
    ("heroku config:set STRIPE=HerokuVal9 -a app", "HerokuVal9"),
    ("fly secrets set DATABASE_URL=FlyVal42x", "FlyVal42x"),
    ("echo 'GcpSec42x' | gcloud secrets versions add db --data-file=-", "GcpSec42x"),
    ("kubectl create secret generic db --from-literal=db=KubeLit42", "KubeLit42"),
    ("gh secret set TOKEN <<< 'HereStr42x'", "HereStr42x"),
    // a grep pattern that is the secret itself, or the regex of a secret's line
    ("grep -rn 'Spring2024!' config/", "Spring2024!"),
    ("rg -F 'P@ssw0rd#7' .", "P@ssw0rd#7"),
    ("grep -P 'password\\s*=\\s*\"RegexPw42\"' settings.py", "RegexPw42"),
    ("grep -E 'api_key\\s*:\\s*RegexKey9' app.yml", "RegexKey9"),
];

#[test]
fn held_out_round_two_is_masked() {
    let mut wrong = Vec::new();
    for (cmd, secret) in HELD_OUT_2 {
        let got = mask_command(cmd);
        if got.contains(secret) {
            wrong.push(format!("  {cmd:?}\n  got {got:?}"));
        } else if mask_command(&got) != got {
            wrong.push(format!("  unstable: {cmd:?}\n  got {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} leaked:\n{}",
        wrong.len(),
        HELD_OUT_2.len(),
        wrong.join("\n")
    );
}

/// The new rules mask the secret and keep the command around it.
#[test]
fn round_two_keeps_the_command_around_the_secret() {
    for (cmd, want) in [
        (
            "curl -su svc:Clust3rPw https://h/x",
            "curl -su svc:*** https://h/x",
        ),
        ("zip -rP Z1pClust9 out.zip dir", "zip -rP *** out.zip dir"),
        (
            "sed -i 's/changeme/Spring2024!/' app.ini",
            "sed -i 's/changeme/***/' app.ini",
        ),
        (
            "sed -i 's/^\\(password = \\).*/\\1S3dCapt42/' a.conf",
            "sed -i 's/^\\(password = \\).*/\\1***/' a.conf",
        ),
        (
            "cat > ~/.netrc <<EOF\nmachine h login bob password N3trcPw1\nEOF",
            "cat > ~/.netrc <<EOF\nmachine h login bob password ***\nEOF",
        ),
        (
            "python -c 'get(u, auth=(\"svc\", \"PyAuth77\"))'",
            "python -c 'get(u, auth=(\"svc\", \"***\"))'",
        ),
        (
            "echo -n GhSecret42x | gh secret set T",
            "echo -n *** | gh secret set T",
        ),
        (
            "aws ssm put-parameter --name /app/db --value SsmVal42x",
            "aws ssm put-parameter --name /app/db --value ***",
        ),
        ("grep -rn 'Spring2024!' config/", "grep -rn *** config/"),
        (
            "grep -P 'password\\s*=\\s*\"RegexPw42\"' s.py",
            "grep -P 'password\\s*=\\s*\"***\"' s.py",
        ),
    ] {
        assert_eq!(mask_command(cmd), want, "{cmd:?}");
    }
}

/// Ordinary commands near the new families stay as they are.
#[test]
fn round_two_leaves_ordinary_neighbours_alone() {
    for cmd in [
        "curl -sSL https://sh.rustup.rs -o rustup.sh",
        "curl -sX POST https://h/x -d @body.json",
        "mysql -uroot -hproddb -e 'select 1'",
        "zip -r out.zip dir",
        "sed -i 's/foo/bar2/g' src/main.rs",
        "sed -i 's/version = \"0.1.0\"/version = \"0.2.0\"/' Cargo.toml",
        "sed -n 's/^password_reset_url = //p' app.conf",
        "perl -pi -e 's/navItem1/navItem2/' src/navbar.js",
        "git commit -m 'Fix password reset flow for users'",
        "python -c 'from django.contrib.auth import models; print(models)'",
        "gh secret list --repo org/app",
        "kubectl get secrets -n prod",
        "aws ssm get-parameter --name /app/db",
        "grep -rn 'TODO' src/",
        "grep -rn 'def test_' tests/",
        "rg 'fn\\s+main' --type rust",
        "grep -E 'ERROR|WARN' app.log",
        "grep -rn 'password' src/",
        "git add env && git commit -m env",
    ] {
        assert_eq!(mask_command(cmd), cmd);
    }
}

/// Paths, patterns and titles are fields that leave oc-calls too: each is masked by shape,
/// the title as prose.
#[test]
fn paths_patterns_and_titles_are_masked() {
    let input = json!({
        "filePath": "/home/u/tokens/ghp_R2x8Kq0vTz7LmN4bW9cY1dF5hJ3sA6eU0iO2.txt",
        "pattern": "password\\s*=\\s*\"RegexPw42\"",
        "path": "/srv/app",
    });
    let out = scrub_args(input.as_object().unwrap());
    assert_eq!(out["filePath"], "/home/u/tokens/***.txt");
    assert_eq!(out["pattern"], "password\\s*=\\s*\"***\"");
    assert_eq!(out["path"], "/srv/app");
    let out = scrub_args(json!({"pattern": "Spring2024!"}).as_object().unwrap());
    assert_eq!(out["pattern"], "***");
    for (title, want) in [
        (
            "Rotate DB password to Spring2024!",
            "Rotate DB password to ***",
        ),
        ("Set the API token: Tok3nValue9", "Set the API token: ***"),
        (
            "Change admin passwd from Hunter22 to Hunter23",
            "Change admin passwd from *** to ***",
        ),
        ("Fix password reset flow", "Fix password reset flow"),
        (
            "Add OAuth2 login and token refresh",
            "Add OAuth2 login and token refresh",
        ),
        (
            "Upgrade to Python 3.12 and Node 20",
            "Upgrade to Python 3.12 and Node 20",
        ),
        (
            "New session - 2026-12-03T06:10:00.000Z",
            "New session - 2026-12-03T06:10:00.000Z",
        ),
        // issue 42: a bare user:password reached every output
        ("Login as admin:AdminTitlePw", "Login as admin:***"),
        (
            "Try deploy:s3cret99, then ops:Hunter2!",
            "Try deploy:***, then ops:***",
        ),
        ("Fix src/main.rs:42 panic", "Fix src/main.rs:42 panic"),
        (
            "Review module:parser and std::fmt",
            "Review module:parser and std::fmt",
        ),
        ("feat:add button at 10:30", "feat:add button at 10:30"),
        (
            "Open http://localhost:8080/Login",
            "Open http://localhost:8080/Login",
        ),
    ] {
        assert_eq!(mask_title(title), want, "{title:?}");
    }
}

/// How often a generated secret leaks, by family, over many draws (run by hand:
/// `cargo test --release --lib leak_rate -- --ignored --nocapture`; `LEAK_CASES` draws).
#[test]
#[ignore]
fn leak_rate() {
    use proptest::strategy::ValueTree;
    let n: usize = std::env::var("LEAK_CASES").map_or(200_000, |v| v.parse().unwrap());
    let mut runner = proptest::test_runner::TestRunner::default();
    let strategy = secrets::command();
    let mut by: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    let mut shown = 0;
    for _ in 0..n {
        // a draw the generator rejects too often (a filter) is drawn again
        let Ok(tree) = strategy.new_tree(&mut runner) else {
            continue;
        };
        let c = tree.current();
        let masked = mask_command(&c.command);
        let e = by.entry(c.family).or_default();
        e.0 += 1;
        if !c.leaks(&masked).is_empty() || mask_command(&masked) != masked {
            e.1 += 1;
            if shown < 20 {
                shown += 1;
                println!("{}: {:?}\n -> {:?}", c.family, c.command, masked);
            }
        }
    }
    for (f, (k, bad)) in &by {
        println!("{f:24} {bad:6} of {k}");
    }
    assert!(by.values().all(|&(_, bad)| bad == 0), "some leaked, above");
}

/// Commands the generated property found leaking or masking unstably, kept as they were drawn:
/// a base64 key whose own `/` and `+` cut it into short pieces, a password whose head reads as
/// a key name (`Pw...=`), a quote lost when a mask ended past it, a sed replacement masked twice.
#[test]
fn what_the_property_found_stays_masked_and_stable() {
    let mut wrong = Vec::new();
    for (cmd, secret) in [
        (
            r#"node scripts/call.js --as=UPfUAqufFPnyb8/7nbV11ax+oz4Mixt+6441upBM --dry-run"#,
            "UPfUAqufFPnyb8/7nbV11ax+oz4Mixt+6441upBM",
        ),
        (
            r#"bash -c "echo 'config url https://x.example.com/x2lge+S3EIpmfHgifCIA80BIDinb/cM5/hook'""#,
            "x2lge+S3EIpmfHgifCIA80BIDinb/cM5",
        ),
        (
            r#"ssh web1 'echo '\''config url https://x.example.com/id93ni8T/+vVEcHnkcTCFwjsXSW4SkqRLn/hook'\'''"#,
            "id93ni8T/+vVEcHnkcTCFwjsXSW4SkqRLn",
        ),
        (
            r#"true || echo 'config url https://x.example.com/ifWU2/WNjOhc5m+ffj/Q/KL1/JVcdrS/FnNr/hook'"#,
            "ifWU2/WNjOhc5m+ffj/Q/KL1/JVcdrS/FnNr",
        ),
        (
            r#"sed -i 's/^\(password = \).*/\1PwB97Hp=YqXV0uxo86x/' /etc/app.conf"#,
            "PwB97Hp=YqXV0uxo86x",
        ),
        (
            "sed\t-i 's/changeme/n3ePw=V...H8k/' config/app.ini",
            "n3ePw=V...H8k",
        ),
        (
            r#"bash -c "sed -i 's/^\\(password = \\).*/\\1l+vySG0q_H-+h0a+UE2c/' /etc/app.conf""#,
            "l+vySG0q_H-+h0a+UE2c",
        ),
        (
            r#"cd /srv/app && python -c 'import requests; requests.get(u, auth=("svc", "Pw.rXo=9T0o"))'"#,
            "Pw.rXo=9T0o",
        ),
        (
            r#"sudo python -c "import smtplib; smtplib.SMTP('h').login('bob@x.com', 'PwF=kRS@lKBiV8c')""#,
            "PwF=kRS@lKBiV8c",
        ),
    ] {
        let got = mask_command(cmd);
        let leaked = (0..=secret.len() - 6).any(|i| got.contains(&secret[i..i + 6]));
        if leaked || mask_command(&got) != got {
            wrong.push(format!(
                "  {cmd:?}\n  got {got:?}\n  then {:?}",
                mask_command(&got)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "leaked or unstable:\n{}",
        wrong.join("\n")
    );
}
