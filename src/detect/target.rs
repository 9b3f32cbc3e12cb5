//! What a call is, for the detector: its exact identity (tool and canonical arguments, a bash
//! command normalised first), its target (what it works on), and how many lines of which file
//! a read requests. Pure functions over one call. Tools and arguments are read by the
//! vocabulary ([`crate::vocab`]): a call's target is built from the arguments its tool's
//! [`Target`] names.

use crate::vocab::{Arg, Target, Tool};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::hash::{Hash, Hasher};

/// A fast non-cryptographic hasher, stable across processes, for identities and the session
/// index: eight bytes at a time, each word mixed in by a folded multiply (the 128-bit product's
/// halves xored, as foldhash and aHash do). FxHash's multiply-rotate, used before, carries a
/// difference in a word's high bits into only the top bits of the state, so similar strings
/// collided: `head -519 a.txt` and `head -592 a.txt` were one identity.
#[derive(Clone, Copy)]
pub struct Fx(u64);

const FX_K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
/// The state before any word (not 0, which a zero word would keep).
const FX_SEED: u64 = 0x24_3f_6a_88_85_a3_08_d3;

impl Default for Fx {
    fn default() -> Fx {
        Fx(FX_SEED)
    }
}

impl Fx {
    #[inline]
    fn add(&mut self, w: u64) {
        let p = ((self.0 ^ w) as u128).wrapping_mul(FX_K as u128);
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl Hasher for Fx {
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
        // the length on its own: folded into the last word's top bits, it read as a byte, and
        // `ses_a_1` (7 bytes and a length of 7, 0x38 = '8') hashed as `ses_a_18`
        self.add(bytes.len() as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A hasher for keys that are already hashes.
#[derive(Default, Clone, Copy)]
pub struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

pub type IdMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<Identity>>;

fn hash_value<H: Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => 0u8.hash(h),
        Value::Bool(b) => (1u8, *b).hash(h),
        Value::Number(n) => {
            2u8.hash(h);
            match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => i.hash(h),
                (None, Some(f)) => f.to_bits().hash(h),
                _ => n.to_string().hash(h),
            }
        }
        Value::String(s) => (3u8, s.as_str()).hash(h),
        Value::Array(a) => {
            (4u8, a.len()).hash(h);
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(o) => {
            (5u8, o.len()).hash(h);
            // serde_json's Map is ordered by key: the hash is over sorted keys
            for (k, x) in o {
                k.hash(h);
                hash_value(x, h);
            }
        }
    }
}

/// Normalises a bash command so trivially different spellings of one command compare equal:
/// continuation lines joined, comments dropped, leading `VAR=value` assignments and `cd dir &&`
/// prefixes stripped, whitespace collapsed.
pub fn normalize_command(cmd: &str) -> String {
    normalized(cmd).into_owned()
}

/// [`normalize_command`] without copying a command that is already normal (the common case).
pub fn normalized(cmd: &str) -> std::borrow::Cow<'_, str> {
    if is_plain(cmd) {
        return std::borrow::Cow::Borrowed(cmd);
    }
    std::borrow::Cow::Owned(normalize_slow(cmd))
}

/// Whether a command is already normal: no newline, comment, tab or backslash, no doubled,
/// leading or trailing space, no `cd` prefix and no assignment in its first word. One pass
/// over the bytes (the characters it looks for are ASCII, never part of a longer one).
fn is_plain(cmd: &str) -> bool {
    let b = cmd.as_bytes();
    if b.first() == Some(&b' ') || b.last() == Some(&b' ') || cmd.starts_with("cd ") {
        return false;
    }
    let (mut space, mut first_word) = (false, true);
    for &c in b {
        match c {
            b'\n' | b'#' | b'\t' | b'\\' => return false,
            b' ' if space => return false,
            b' ' => {
                space = true;
                first_word = false;
            }
            b'=' if first_word => return false,
            _ => space = false,
        }
    }
    true
}

fn normalize_slow(cmd: &str) -> String {
    let joined = cmd.replace("\\\n", " ");
    let mut kept = Vec::new();
    for line in joined.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        // a trailing comment outside quotes
        let mut quote = None;
        let mut cut = t.len();
        let mut prev = ' ';
        for (i, c) in t.char_indices() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '#') if prev.is_whitespace() => {
                    cut = i;
                    break;
                }
                _ => {}
            }
            prev = c;
        }
        kept.push(&t[..cut]);
    }
    let mut s: String = kept.join(" ; ");
    s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    loop {
        let before = s.len();
        // leading VAR=value assignments
        while let Some(first) = s.split(' ').next() {
            let is_assign = first.split_once('=').is_some_and(|(k, _)| {
                !k.is_empty()
                    && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !k.starts_with(|c: char| c.is_ascii_digit())
            });
            if is_assign && s.contains(' ') {
                s = s[first.len() + 1..].to_string();
            } else {
                break;
            }
        }
        // leading `cd dir &&` / `cd dir;`
        if let Some(rest) = s.strip_prefix("cd ") {
            let dir_end = rest.find([' ', ';', '&']).unwrap_or(rest.len());
            let after = rest[dir_end..].trim_start();
            if let Some(cmd) = after.strip_prefix("&&").or_else(|| after.strip_prefix(';')) {
                s = cmd.trim_start().to_string();
            }
        }
        if s.len() == before {
            return s;
        }
    }
}

/// Whether a word of a command names a file: it contains a `/` or ends in a dot extension.
fn names_file(w: &str) -> bool {
    !w.starts_with('-')
        && (w.contains('/')
            || w.rsplit_once('.').is_some_and(|(a, ext)| {
                !a.is_empty()
                    && (1..=5).contains(&ext.len())
                    && ext.bytes().all(|c| c.is_ascii_alphanumeric())
                    && !ext.bytes().all(|c| c.is_ascii_digit())
            }))
}

/// The characters that end a word of a command, besides whitespace.
const WORD_END: &str = "|;&<>()'\"`=,";

/// Bytes that end a word: ASCII whitespace (as `char::is_whitespace` has it) and [`WORD_END`].
static ENDS: [bool; 128] = {
    let mut t = [false; 128];
    let w = WORD_END.as_bytes();
    let mut i = 0;
    while i < w.len() {
        t[w[i] as usize] = true;
        i += 1;
    }
    let ws = [b' ', b'\t', b'\n', 0x0b, 0x0c, b'\r'];
    let mut i = 0;
    while i < ws.len() {
        t[ws[i] as usize] = true;
        i += 1;
    }
    t
};

/// The target of a command: the words that name files, then the numbers in it (the slice a
/// `sed -n 120,180p` or `head -50` asks for); the whole command when it has neither.
fn hash_command_target(cmd: &str, h: &mut Fx) {
    command_target(cmd, cmd.is_ascii(), h)
}

/// [`hash_command_target`], over bytes (`ascii`) or characters.
fn command_target(cmd: &str, ascii: bool, h: &mut Fx) {
    let mut files = Fx::default();
    let mut nums = Fx::default();
    let mut any = false;
    if ascii {
        // one pass over the bytes (the common case)
        let b = cmd.as_bytes();
        let (mut word, mut num) = (0, None);
        for i in 0..=b.len() {
            let c = b.get(i).copied();
            if c.map_or(true, |c| ENDS[c as usize]) {
                let w = &cmd[word..i];
                if !w.is_empty() && names_file(w) {
                    w.hash(&mut files);
                    any = true;
                }
                word = i + 1;
            }
            let digit = c.is_some_and(|c| c.is_ascii_digit());
            match (num, digit) {
                (None, true) => num = Some(i),
                (Some(s), false) => {
                    cmd[s..i].hash(&mut nums);
                    any = true;
                    num = None;
                }
                _ => {}
            }
        }
    } else {
        for w in cmd.split(|c: char| c.is_whitespace() || WORD_END.contains(c)) {
            if !w.is_empty() && names_file(w) {
                w.hash(&mut files);
                any = true;
            }
        }
        for n in cmd.split(|c: char| !c.is_ascii_digit()) {
            if !n.is_empty() {
                n.hash(&mut nums);
                any = true;
            }
        }
    }
    if any {
        h.write_u64(files.finish());
        h.write_u64(nums.finish());
    } else {
        cmd.hash(h);
    }
}

/// A call's arguments as progress-detect reads them: names and string values borrowed from
/// the line unless they hold escapes, and no map built. serde_json's `Map` cost every call a
/// tree node, a copy of each name and string, and their frees: about a tenth of reading a line
/// (callgrind, the bench corpus). In name order, a repeated name's last value kept, as the map
/// has them, so [`CallArgs::of_list`] reads exactly what [`CallArgs::of`] reads.
#[derive(Default)]
pub struct ArgList<'a>(Vec<(Cow<'a, str>, ArgValue<'a>)>);

/// One argument's value: a string, or (for anything else, and always for `offset` and
/// `limit`, which are described as values) the value.
pub enum ArgValue<'a> {
    Str(Cow<'a, str>),
    Val(Value),
}

/// A string, borrowed unless it has escapes.
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

impl<'de> Deserialize<'de> for ArgValue<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
        struct ArgValueVisitor;
        impl<'de> Visitor<'de> for ArgValueVisitor {
            type Value = ArgValue<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any valid JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Str(Cow::Owned(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Val(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Val(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Val(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Val(Value::from(v)))
            }
            fn visit_unit<E>(self) -> Result<ArgValue<'de>, E> {
                Ok(ArgValue::Val(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> Result<ArgValue<'de>, A::Error> {
                Value::deserialize(SeqAccessDeserializer::new(a)).map(ArgValue::Val)
            }
            fn visit_map<A: MapAccess<'de>>(self, a: A) -> Result<ArgValue<'de>, A::Error> {
                Value::deserialize(MapAccessDeserializer::new(a)).map(ArgValue::Val)
            }
        }
        d.deserialize_any(ArgValueVisitor)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ArgList<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ArgListVisitor;
        impl<'de> Visitor<'de> for ArgListVisitor {
            type Value = ArgList<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<ArgList<'de>, A::Error> {
                let mut v: Vec<(Cow<'de, str>, ArgValue<'de>)> = Vec::with_capacity(4);
                while let Some(Text(k)) = m.next_key::<Text<'de>>()? {
                    let arg = if k == Arg::Offset.key() || k == Arg::Limit.key() {
                        ArgValue::Val(m.next_value()?)
                    } else {
                        m.next_value()?
                    };
                    v.push((k, arg));
                }
                // a stable sort, then of equal names the last value (moved onto the first)
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v.dedup_by(|later, first| {
                    let same = later.0 == first.0;
                    if same {
                        std::mem::swap(later, first);
                    }
                    same
                });
                Ok(ArgList(v))
            }
        }
        d.deserialize_map(ArgListVisitor)
    }
}

/// Identity and target of one call.
pub struct Keys {
    /// Tool and canonical arguments: two calls with the same `exact` are the same call.
    pub exact: u64,
    /// What the call works on.
    pub target: u64,
}

/// The arguments the detector reads, picked out of a call's map in one pass (a map lookup
/// for each use was a measured share of the detector's time), each string hashed once there
/// for every use after. A string argument that is absent or not a string reads as "".
#[derive(Clone, Copy)]
pub struct CallArgs<'a> {
    /// The call's tool, which says what of its arguments the call is read by.
    pub tool: Tool,
    pub file_path: Option<&'a str>,
    pub offset: Option<&'a Value>,
    pub limit: Option<&'a Value>,
    pub command: &'a str,
    pub pattern: &'a str,
    pub path: &'a str,
    pub subagent_type: &'a str,
    pub old_string: Option<&'a str>,
    pub new_string: Option<&'a str>,
    /// A hash of every argument (name and value) but a bash call's `command` and `timeout`.
    pub hash: u64,
    /// [`hash_str`] of the file ("" when there is none), of `oldString` and of `newString`
    /// (0 when they are not strings), of `pattern` and of `path`, and of `command` (once it is
    /// normalised, by [`Commands::normalize`], of the normal form).
    pub file_h: u64,
    pub old_h: u64,
    pub new_h: u64,
    pub pattern_h: u64,
    pub path_h: u64,
    pub command_h: u64,
    /// A bash command's target ([`hash_command_target`]), set with its normal form.
    pub command_target: u64,
}

/// The code that stands for the name of an argument [`CallArgs`] picks in [`CallArgs::hash`];
/// any other name (one the vocabulary names but the detector does not pick, as `include` and
/// `workdir`, or one it does not name) stands for itself. The codes are part of every identity
/// and target, which `wd-store` keeps: changing one changes every stored key.
fn code(a: Arg) -> Option<u64> {
    Some(match a {
        Arg::FilePath => 1,
        Arg::Offset => 2,
        Arg::Limit => 3,
        Arg::Command => 4,
        Arg::Pattern => 5,
        Arg::Path => 6,
        Arg::SubagentType => 7,
        Arg::OldString => 8,
        Arg::NewString => 9,
        Arg::Timeout => 10,
        Arg::Include
        | Arg::Workdir
        | Arg::ReplaceAll
        | Arg::PatchText
        | Arg::Prompt
        | Arg::Todos => return None,
    })
}

impl<'a> CallArgs<'a> {
    /// The arguments of a call's map (as tests and reports hold them).
    pub fn of(tool: &str, map: &'a Map<String, Value>) -> CallArgs<'a> {
        CallArgs::pick(
            tool,
            map.iter().map(|(k, v)| (k.as_str(), v.as_str(), Some(v))),
        )
    }
    /// The arguments as progress-detect reads them ([`ArgList`]).
    pub fn of_list(tool: &str, list: &'a ArgList<'a>) -> CallArgs<'a> {
        CallArgs::pick(
            tool,
            list.0.iter().map(|(k, v)| match v {
                ArgValue::Str(t) => (k.as_ref(), Some(t.as_ref()), None),
                ArgValue::Val(v) => (k.as_ref(), v.as_str(), Some(v)),
            }),
        )
    }
    /// From each argument in name order: its name, its text if it is a string, and its value
    /// (always there for `offset` and `limit`, and for anything not a string).
    fn pick(
        tool: &str,
        args: impl Iterator<Item = (&'a str, Option<&'a str>, Option<&'a Value>)>,
    ) -> CallArgs<'a> {
        let tool = Tool::of(tool);
        // a command's call is the same call whatever it waits for
        let command = tool.target() == Target::Command;
        let mut h = Fx::default();
        let mut a = CallArgs {
            tool,
            file_path: None,
            offset: None,
            limit: None,
            command: "",
            pattern: "",
            path: "",
            subagent_type: "",
            old_string: None,
            new_string: None,
            hash: 0,
            file_h: 0,
            old_h: 0,
            new_h: 0,
            pattern_h: 0,
            path_h: 0,
            command_h: 0,
            command_target: 0,
        };
        for (k, text, v) in args {
            let arg = Arg::of(k);
            // never one of the codes of `code` but by a one in 2^64 chance
            let code = arg.and_then(code).unwrap_or_else(|| hash_str(k) | 1 << 63);
            let vh = text.map_or(0, hash_str);
            if !(command && matches!(arg, Some(Arg::Command | Arg::Timeout))) {
                h.write_u64(code);
                match text {
                    Some(_) => {
                        h.write_u8(3);
                        h.write_u64(vh);
                    }
                    None => hash_value(v.unwrap_or(&Value::Null), &mut h),
                }
            }
            match arg {
                Some(Arg::FilePath) => (a.file_path, a.file_h) = (text, vh),
                Some(Arg::Offset) => a.offset = v,
                Some(Arg::Limit) => a.limit = v,
                Some(Arg::Command) => (a.command, a.command_h) = (text.unwrap_or(""), vh),
                Some(Arg::Pattern) => (a.pattern, a.pattern_h) = (text.unwrap_or(""), vh),
                Some(Arg::Path) => (a.path, a.path_h) = (text.unwrap_or(""), vh),
                Some(Arg::SubagentType) => a.subagent_type = text.unwrap_or(""),
                Some(Arg::OldString) => (a.old_string, a.old_h) = (text, vh),
                Some(Arg::NewString) => (a.new_string, a.new_h) = (text, vh),
                _ => {}
            }
        }
        // what an absent or non-string argument reads as: ""
        let empty = hash_str("");
        if a.file_path.is_none() {
            a.file_h = empty;
        }
        if a.pattern.is_empty() {
            a.pattern_h = empty;
        }
        if a.path.is_empty() {
            a.path_h = empty;
        }
        if a.command.is_empty() {
            a.command_h = empty;
        }
        a.hash = h.finish();
        a
    }
    pub fn file(&self) -> &'a str {
        self.file_path.unwrap_or("")
    }
}

/// [`keys_of`] for a map.
pub fn keys(tool: &str, args: &Map<String, Value>) -> Keys {
    let mut a = CallArgs::of(tool, args);
    let norm = match a.tool.target() {
        Target::Command => {
            let (norm, _, h, t) = work_out(a.command, a.command_h);
            (a.command_h, a.command_target) = (h, t);
            norm
        }
        _ => std::borrow::Cow::Borrowed(a.command),
    };
    a.command = &norm;
    keys_of(tool, &a)
}

/// What the latest bash commands normalise to, by the hash of the command as written: whether
/// it is already normal, its normal form's hash, and its target. Agents run a handful of
/// commands again and again (a test, `git status`, the loop itself), and normalising a command
/// and finding its files and numbers are scans of every byte: the costliest features of a call
/// (callgrind: about 1,500 instructions for a 35-byte command; a hit costs about 60).
#[derive(Default)]
pub struct Commands(IdMap<(bool, u64, u64)>);

impl Commands {
    /// Commands remembered at most; past that the memo starts again.
    const MAX: usize = 4096;

    /// A bash call's command (a call targeted by its command), normalised ([`normalized`]),
    /// with `command_h` and `command_target` set for it; any other call's command as it is.
    pub fn normalize<'a>(&mut self, a: &mut CallArgs<'a>) -> std::borrow::Cow<'a, str> {
        use std::borrow::Cow;
        let raw = a.command;
        if a.tool.target() != Target::Command {
            return Cow::Borrowed(raw);
        }
        if let Some(&(plain, h, t)) = self.0.get(&a.command_h) {
            (a.command_h, a.command_target) = (h, t);
            return match plain {
                true => Cow::Borrowed(raw),
                false => Cow::Owned(normalize_slow(raw)),
            };
        }
        if self.0.len() >= Commands::MAX {
            self.0.clear();
        }
        let (norm, plain, h, t) = work_out(raw, a.command_h);
        self.0.insert(a.command_h, (plain, h, t));
        (a.command_h, a.command_target) = (h, t);
        norm
    }
}

/// A bash command (`raw`, whose hash is `raw_h`) worked out: its normal form, whether that is the
/// command as written, the normal form's hash, and its target.
///
/// The directory a leading `cd` enters stays part of the identity and the target, though the
/// normal form drops it: `cd pkg/io && ls -a` and `cd pkg/ui && ls -a` are two calls on two
/// things (a tree walked), while `cd /repo && pytest` sent twice is one call twice.
fn work_out(raw: &str, raw_h: u64) -> (std::borrow::Cow<'_, str>, bool, u64, u64) {
    let norm = normalized(raw);
    let plain = matches!(norm, std::borrow::Cow::Borrowed(_));
    let mut h = if plain { raw_h } else { hash_str(&norm) };
    let mut t = Fx::default();
    hash_command_target(&norm, &mut t);
    if let Some(dir) = cd_dir(raw) {
        let mut x = Fx(h);
        x.write(dir.as_bytes());
        h = x.finish();
        t.write(dir.as_bytes());
    }
    (norm, plain, h, t.finish())
}

/// The directory a command's leading `cd dir &&` (or `cd dir;`) enters.
fn cd_dir(raw: &str) -> Option<&str> {
    let rest = raw.trim_start().strip_prefix("cd ")?.trim_start();
    let end = rest.find([' ', ';', '&']).unwrap_or(rest.len());
    let after = rest[end..].trim_start();
    (after.starts_with("&&") || after.starts_with(';')).then_some(&rest[..end])
}

/// Identity and target of a call (of the tool named `tool`) whose `command` is normalised
/// ([`Commands::normalize`]). The target hashes the arguments its tool's [`Target`] names
/// ([`Target::args`]), and only those.
pub fn keys_of(tool: &str, a: &CallArgs) -> Keys {
    let mut exact = Fx::default();
    tool.hash(&mut exact);
    let mut target = Fx::default();
    tool.hash(&mut target);
    let t = a.tool.target();
    if t == Target::Command {
        // its normal form: [`CallArgs::hash`] leaves the command out
        exact.write_u64(a.command_h);
    }
    exact.write_u64(a.hash);
    match t {
        Target::FileWindow => {
            target.write_u64(a.file_h);
            hash_value(a.offset.unwrap_or(&Value::Null), &mut target);
            hash_value(a.limit.unwrap_or(&Value::Null), &mut target);
        }
        Target::File => target.write_u64(a.file_h),
        Target::Command => target.write_u64(a.command_target),
        Target::Search => {
            target.write_u64(a.pattern_h);
            target.write_u64(a.path_h);
        }
        Target::Subagent | Target::Arguments => target.write_u64(a.hash),
    }
    Keys {
        exact: exact.finish(),
        target: target.finish(),
    }
}

/// A short, human description of a call's target, for verdicts and alerts. Paths are shown
/// relative to the session's directory when under it.
pub fn describe(tool: &str, args: &Map<String, Value>, dir: Option<&str>) -> String {
    let mut s = String::new();
    let mut a = CallArgs::of(tool, args);
    let norm = normalized(a.command);
    a.command = &norm;
    describe_into(&mut s, tool, &a, dir);
    s
}

/// A JSON number or other value as JSON writes it (integers without the formatting machinery:
/// the detector describes every read's offset and limit).
fn push_value(out: &mut String, v: &Value) {
    use std::fmt::Write;
    match v.as_i64() {
        Some(i) => push_int(out, i),
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// An integer in decimal, as `{i}` writes it.
pub fn push_int(out: &mut String, i: i64) {
    if i < 0 {
        out.push('-');
    }
    let mut n = i.unsigned_abs();
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits
    out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or(""));
}

/// [`describe`], appended to `out` (the detector describes every call for its digest, into a
/// buffer it reuses), of a call (of the tool named `tool`) whose `command` is normalised
/// ([`normalized`]): its tool's name, then the arguments its [`Target`] names.
pub fn describe_into(out: &mut String, tool: &str, args: &CallArgs, dir: Option<&str>) {
    let start = out.len();
    let rel = RelTo(dir);
    out.push_str(tool);
    let t = args.tool.target();
    if t != Target::Arguments {
        out.push(' ');
    }
    match t {
        Target::FileWindow => {
            out.push_str(rel.of(args.file()));
            if let Some(o) = args.offset {
                out.push_str(" offset ");
                push_value(out, o);
            }
            if let Some(l) = args.limit {
                out.push_str(" limit ");
                push_value(out, l);
            }
        }
        Target::File => out.push_str(rel.of(args.file())),
        Target::Command => out.push_str(args.command),
        Target::Search => {
            out.push_str(args.pattern);
            if !args.path.is_empty() {
                out.push_str(" in ");
                out.push_str(rel.of(args.path));
            }
        }
        Target::Subagent => out.push_str(args.subagent_type),
        Target::Arguments => {}
    }
    // at most 120 characters: 117 and an ellipsis
    if out.len() - start > 120 {
        if let Some((cut, _)) = out[start..].char_indices().nth(117) {
            if out[start..].chars().count() > 120 {
                out.truncate(start + cut);
                out.push_str("...");
            }
        }
    }
}

/// Paths relative to a session's directory, when under it.
struct RelTo<'a>(Option<&'a str>);

impl RelTo<'_> {
    fn of<'p>(&self, p: &'p str) -> &'p str {
        match self.0 {
            Some(d) if !d.is_empty() => p
                .strip_prefix(d)
                .map(|r| r.trim_start_matches('/'))
                .unwrap_or(p),
            _ => p,
        }
    }
}

/// Lines a read requests from its file: from `offset` (1-based) for `limit` lines (opencode's
/// default is 2000), not counting lines past the end of the file.
pub fn lines_requested(args: &Map<String, Value>, file_lines: i64) -> i64 {
    lines_of(
        &CallArgs::of(Tool::Read.name().unwrap_or_default(), args),
        file_lines,
    )
}

/// [`lines_requested`] of picked-out arguments.
pub fn lines_of(a: &CallArgs, file_lines: i64) -> i64 {
    let offset = a.offset.and_then(Value::as_i64).unwrap_or(1).max(1);
    let limit = a.limit.and_then(Value::as_i64).unwrap_or(2000).max(0);
    let last = (offset + limit - 1).min(file_lines);
    (last - offset + 1).max(0)
}

/// A hash of a string, for file identities.
pub fn hash_str(s: &str) -> u64 {
    let mut h = Fx::default();
    s.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// Everything [`CallArgs`] holds, as text, to compare two readings of one call.
    fn fields(a: &CallArgs) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {} {} {} {} {} {} {}",
            a.file_path,
            a.offset,
            a.limit,
            a.command,
            a.pattern,
            a.path,
            a.subagent_type,
            a.old_string,
            a.new_string,
            a.hash,
            a.file_h,
            a.old_h,
            a.new_h,
            a.pattern_h,
            a.path_h,
            a.command_h,
            a.command_target
        )
    }

    #[test]
    fn arguments_read_without_a_map_read_as_the_map_reads_them() {
        let lines = [
            r#"{"filePath":"/p/a.js","offset":51,"limit":50}"#,
            r#"{"limit":50,"offset":51,"filePath":"/p/a.js"}"#,
            r#"{"offset":"5","limit":null,"filePath":"/p/\u00e9 \"q\".js"}"#,
            r#"{"command":"ls -la","timeout":1200,"description":"list"}"#,
            r#"{"pattern":"fn x","path":"/p","include":"*.rs","flags":["-i",2,{"z":1,"a":[true]}]}"#,
            r#"{"filePath":"/p/b","oldString":"sha1:aa","newString":"sha1:bb","replaceAll":false}"#,
            r#"{"filePath":"/first","filePath":"/last","x":1.5,"x":-3}"#,
            r#"{"subagent_type":"explore","prompt":"sha1:cc","n":18446744073709551615}"#,
            r#"{}"#,
        ];
        let mut hashes = Vec::new();
        for line in lines {
            let list: ArgList = serde_json::from_str(line).unwrap();
            let map: Map<String, Value> = serde_json::from_str(line).unwrap();
            for tool in ["read", "bash", "grep", "edit", "task"] {
                let (a, b) = (CallArgs::of_list(tool, &list), CallArgs::of(tool, &map));
                assert_eq!(fields(&a), fields(&b), "{tool} {line}");
            }
            hashes.push(CallArgs::of_list("read", &list).hash);
        }
        // the same arguments in another order are the same call; others are not
        assert_eq!(hashes[0], hashes[1]);
        hashes.dedup();
        assert_eq!(hashes.len(), lines.len() - 1);
        // names and plain strings are borrowed from the line; an escaped one is copied
        let line = r#"{"filePath":"/p/a.js","pattern":"a\tb"}"#;
        let list: ArgList = serde_json::from_str(line).unwrap();
        let kinds: Vec<_> = list
            .0
            .iter()
            .map(|(k, v)| match v {
                ArgValue::Str(s) => (matches!(k, Cow::Borrowed(_)), matches!(s, Cow::Borrowed(_))),
                ArgValue::Val(_) => (false, false),
            })
            .collect();
        assert_eq!(kinds, [(true, true), (true, false)]);
        // what is not an object is refused, as the map refuses it
        for bad in ["[1]", "\"x\"", "3"] {
            let e = serde_json::from_str::<ArgList>(bad)
                .err()
                .unwrap()
                .to_string();
            let m = serde_json::from_str::<Map<String, Value>>(bad)
                .err()
                .unwrap()
                .to_string();
            assert_eq!(e, m, "{bad}");
        }
    }

    #[test]
    fn a_plain_command_is_its_own_normal_form_and_others_are_normalised() {
        for (cmd, plain) in [
            ("cat a.txt", true),
            ("make test -j4 a=b", true),
            ("", true),
            ("é中 ls", true),
            ("FOO=1 make", false),
            ("cd /w && ls", false),
            ("ls  -l", false),
            (" ls", false),
            ("ls ", false),
            ("ls # x", false),
            ("ls\tx", false),
            ("a \\\n b", false),
            ("echo x\ny", false),
        ] {
            assert_eq!(is_plain(cmd), plain, "{cmd:?}");
            assert_eq!(normalized(cmd), normalize_slow(cmd), "{cmd:?}");
        }
    }

    #[test]
    fn a_remembered_command_reads_as_one_worked_out_afresh() {
        let fresh = |tool: &str, cmd: &str| {
            let map = args(json!({ "command": cmd, "timeout": 5 }));
            let mut a = CallArgs::of(tool, &map);
            let norm = Commands::default().normalize(&mut a).into_owned();
            (norm, a.command_h, a.command_target)
        };
        let mut memo = Commands::default();
        let cmds = [
            "sed -n 1,40p src/a.rs",
            "cd /w && FOO=1 make  test",
            "sed -n 1,40p src/a.rs",
            "cd /w && FOO=1 make  test",
            "make test",
        ];
        for cmd in cmds {
            let map = args(json!({ "command": cmd, "timeout": 5 }));
            let mut a = CallArgs::of("bash", &map);
            let norm = memo.normalize(&mut a).into_owned();
            assert_eq!(norm, normalize_command(cmd), "{cmd:?}");
            assert_eq!((norm, a.command_h, a.command_target), fresh("bash", cmd));
        }
        // three different commands, each remembered once
        assert_eq!(memo.0.len(), 3);
        // "make test" as written and as normalised from an assignment are one command; the
        // directory a `cd` enters keeps its own
        assert_eq!(
            fresh("bash", "make test"),
            fresh("bash", "FOO=1 make  test")
        );
        assert_ne!(
            fresh("bash", "make test").1,
            fresh("bash", "cd /w && FOO=1 make  test").1
        );
        // only bash commands are normalised
        let (norm, _, target) = fresh("task", "cd /w && ls");
        assert_eq!((norm.as_str(), target), ("cd /w && ls", 0));
        // a full memo starts again and still answers
        for i in 0..=Commands::MAX {
            let map = args(json!({ "command": format!("head -{i} a.txt") }));
            memo.normalize(&mut CallArgs::of("bash", &map));
        }
        // 3 + 4,097 commands: full at 4,096, started again, 4 since
        assert_eq!(memo.0.len(), 4);
        let map = args(json!({ "command": "sed -n 1,40p src/a.rs" }));
        let mut a = CallArgs::of("bash", &map);
        memo.normalize(&mut a);
        assert_eq!(a.command_target, fresh("bash", "sed -n 1,40p src/a.rs").2);
    }

    #[test]
    fn similar_strings_hash_apart() {
        assert_ne!(hash_str("head -519 a.txt"), hash_str("head -592 a.txt"));
        assert_ne!(hash_str("a"), hash_str("\0\0\0\0\0\0\0\0a"));
        let mut seen = std::collections::HashSet::new();
        for i in 0..300 {
            for j in 0..300 {
                assert!(seen.insert(hash_str(&format!("sed -n {i},{j}p a.txt"))));
            }
        }
        for i in 0..20_000 {
            assert!(seen.insert(hash_str(&format!("head -{i} a.txt"))));
        }
    }

    #[test]
    fn integers_are_written_as_format_writes_them() {
        for i in [0, 7, -7, 10, 1234567890, i64::MAX, i64::MIN] {
            let mut s = String::from("x");
            push_int(&mut s, i);
            assert_eq!(s, format!("x{i}"));
        }
    }

    #[test]
    fn a_command_target_is_the_same_over_bytes_or_characters() {
        for cmd in [
            "sed -n 120,180p docs/spec.md",
            "cat src/a.js|grep -c x>out.txt",
            "python3 -m pytest tests/test_nav.py -x",
            "ls",
            "echo 'v1.2' \"a.b\" x.123 -f.txt",
            "head -50 README",
        ] {
            let (mut a, mut b) = (Fx::default(), Fx::default());
            command_target(cmd, true, &mut a);
            command_target(cmd, false, &mut b);
            assert_eq!(a.finish(), b.finish(), "{cmd:?}");
        }
    }

    #[test]
    fn commands_normalise() {
        assert_eq!(
            normalize_command("cd /w && FOO=1 BAR=x  cat a.txt"),
            "cat a.txt"
        );
        assert_eq!(
            normalize_command("# look\npython3 -m pytest \\\n  -x tests  # quick"),
            "python3 -m pytest -x tests"
        );
        assert_eq!(
            normalize_command("echo 'a # not a comment'"),
            "echo 'a # not a comment'"
        );
        assert_eq!(normalize_command("cd /w; ls"), "ls");
    }

    #[test]
    fn equal_commands_after_normalising_are_the_same_call() {
        let a = keys("bash", &args(json!({"command": "LANG=C cat docs/spec.md"})));
        let b = keys(
            "bash",
            &args(json!({"command": "cat   docs/spec.md", "timeout": 5000})),
        );
        assert_eq!(a.exact, b.exact);
        assert_eq!(a.target, b.target);
        // the package tree walk: `cd X && ls -a` over many X is many calls on many things
        let walk = |d: &str| {
            keys(
                "bash",
                &args(json!({ "command": format!("cd {d} && ls -a") })),
            )
        };
        assert_ne!(walk("pkg/io").exact, walk("pkg/ui").exact);
        assert_ne!(walk("pkg/io").target, walk("pkg/ui").target);
        assert_eq!(walk("/p").exact, walk("/p").exact);
    }

    #[test]
    fn bash_target_is_files_and_slice() {
        let a = keys(
            "bash",
            &args(json!({"command": "sed -n 120,180p docs/spec.md"})),
        );
        let b = keys(
            "bash",
            &args(json!({"command": "sed -n '120,180p' docs/spec.md | head"})),
        );
        let c = keys(
            "bash",
            &args(json!({"command": "sed -n 180,240p docs/spec.md"})),
        );
        assert_ne!(a.exact, b.exact);
        assert_eq!(a.target, b.target);
        assert_ne!(a.target, c.target);
    }

    #[test]
    fn read_target_is_file_and_window() {
        let a = keys(
            "read",
            &args(json!({"filePath": "/p/a.js", "offset": 1, "limit": 50})),
        );
        let b = keys(
            "read",
            &args(json!({"filePath": "/p/a.js", "offset": 51, "limit": 50})),
        );
        assert_ne!(a.target, b.target);
    }

    #[test]
    fn requested_lines_stop_at_end_of_file() {
        assert_eq!(
            lines_requested(&args(json!({"offset": 281, "limit": 40})), 300),
            20
        );
        assert_eq!(lines_requested(&args(json!({})), 300), 300);
        assert_eq!(
            lines_requested(&args(json!({"offset": 400, "limit": 40})), 300),
            0
        );
    }

    #[test]
    fn descriptions_are_clipped_at_120_characters() {
        let long = "é".repeat(130);
        let d = describe("bash", &args(json!({ "command": long })), None);
        assert_eq!(d.chars().count(), 120);
        assert_eq!(d, format!("bash {}...", "é".repeat(112)));
        let fits = "x".repeat(115);
        let d = describe("bash", &args(json!({ "command": fits })), None);
        assert_eq!(d, format!("bash {fits}"));
        let mut buf = String::from("kept|");
        describe_into(
            &mut buf,
            "grep",
            &CallArgs::of("grep", &args(json!({"pattern": "a", "path": "/w/s"}))),
            Some("/w"),
        );
        assert_eq!(buf, "kept|grep a in s");
    }

    #[test]
    fn targets_are_described_relative_to_the_session() {
        let d = describe(
            "read",
            &args(json!({"filePath": "/w/src/navbar.js"})),
            Some("/w"),
        );
        assert_eq!(d, "read src/navbar.js");
    }
}
