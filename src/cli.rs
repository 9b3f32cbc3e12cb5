//! Plumbing shared by every command: the exit-code table, error printing, broken-pipe handling,
//! line-numbered JSONL input, buffered JSONL output, and the `WHEN` syntax of `--since`.
//!
//! A binary's `main` calls [`main`] with its `run` function; `run` gets parsed arguments, a
//! reader for stdin and a writer for stdout, so all logic is testable without a process.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Exit status, documented in every man page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success, also when nothing was flagged.
    Ok = 0,
    /// A check failed (only where checking is the command's purpose, e.g. a backtest).
    Check = 1,
    /// Any error, including bad input lines that were skipped.
    Error = 2,
}

/// Runs a command: parses arguments, wires stdin/stdout, prints `name: context: cause` for
/// errors and maps the result to an exit code. A broken pipe on stdout is a quiet success.
pub fn main<A, F>(name: &str, run: F) -> i32
where
    A: clap::Parser,
    F: FnOnce(A, &mut dyn BufRead, &mut Out) -> Result<Exit>,
{
    let _ = PROGRAM.set(name.to_string());
    let args = match A::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let stdout = io::stdout();
    let terminal = stdout.is_terminal();
    // not locked: an `Out` may be written from another thread (progress-detect judges on one);
    // its own buffer takes the lock once per 64 KiB
    let mut out = Out::new(Box::new(stdout), terminal);
    out.width = table_width(
        std::env::var("COLUMNS").ok().as_deref(),
        terminal_size::terminal_size_of(io::stdout()).map(|(w, _)| w.0 as usize),
    );
    let result = run(args, &mut input, &mut out).and_then(|code| {
        out.flush()?;
        Ok(code)
    });
    match result {
        Ok(code) => code as i32,
        Err(e) if is_broken_pipe(&e) => 0,
        Err(e) => {
            let _ = out.flush();
            eprintln!("{name}: {e:#}");
            2
        }
    }
}

/// Follow mode: SIGTERM (systemd stopping the service) ends the command at once with status
/// 0 and no message, as the end of its input would; what it wrote up to its last sweep was
/// flushed there.
pub fn exit_quietly_on_sigterm() -> Result<()> {
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    signal_hook::flag::register_conditional_shutdown(signal_hook::consts::SIGTERM, 0, armed)
        .context("cannot handle SIGTERM")?;
    Ok(())
}

/// Follow mode: a flag SIGTERM raises, for a loop that stops between reads.
pub fn sigterm_flag() -> Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, flag.clone())
        .context("cannot handle SIGTERM")?;
    Ok(flag)
}

/// True when any error in the chain is a broken pipe, including one wrapped by serde_json.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return io.kind() == io::ErrorKind::BrokenPipe;
        }
        if let Some(js) = c.downcast_ref::<serde_json::Error>() {
            return js.io_error_kind() == Some(io::ErrorKind::BrokenPipe);
        }
        false
    })
}

/// Buffered line output. Flushes per line when asked to (`--line-buffered`) or when stdout is a
/// terminal.
pub struct Out {
    w: io::BufWriter<Box<dyn Write + Send>>,
    per_line: bool,
    pub terminal: bool,
    /// How wide a table may be: the terminal's ([`table_width`]).
    pub width: usize,
}

impl Out {
    pub fn new(w: Box<dyn Write + Send>, terminal: bool) -> Out {
        Out {
            w: io::BufWriter::with_capacity(64 * 1024, w),
            per_line: terminal,
            terminal,
            width: TABLE_WIDTH,
        }
    }

    /// An `Out` writing into a shared buffer, for tests.
    pub fn buffer() -> (Out, SharedBuf) {
        let buf = SharedBuf::default();
        (Out::new(Box::new(buf.clone()), false), buf)
    }

    /// Flushes after every line (`true`) or per 64 KiB block (`false`), whatever stdout is.
    pub fn line_buffered(&mut self, on: bool) {
        self.per_line = on;
    }

    /// `--line-buffered`: flush after every line when `asked`; otherwise keep the default (per
    /// line on a terminal, in blocks into a pipe).
    pub fn line_buffered_if(&mut self, asked: bool) {
        if asked {
            self.per_line = true;
        }
    }

    /// Writes one line (a newline is added).
    pub fn line(&mut self, s: &str) -> io::Result<()> {
        self.w.write_all(s.as_bytes())?;
        self.w.write_all(b"\n")?;
        if self.per_line {
            self.w.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.w.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

/// A cloneable in-memory writer.
#[derive(Clone, Default)]
pub struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl SharedBuf {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

static PROGRAM: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The running command's name, for messages (`oc-watchdog` when run as a library).
pub fn program() -> &'static str {
    PROGRAM.get().map(String::as_str).unwrap_or("oc-watchdog")
}

/// Reads named inputs (`-` is stdin) line by line, calling `f(name, line_no, line)` for each
/// non-blank line. Names are `stdin` or the path, so errors read `stdin:17: ...`. A line that is
/// not UTF-8 (so not JSON) is named on stderr and skipped like any unreadable line; the number of
/// lines skipped so is returned, for the caller to count with its own bad lines.
pub fn for_each_line(
    files: &[PathBuf],
    stdin: &mut dyn BufRead,
    mut f: impl FnMut(&str, usize, &str) -> Result<()>,
) -> Result<usize> {
    let mut skipped = 0usize;
    each_line(files, stdin, |name, n, line| match line {
        Ok(line) => f(name, n, line),
        Err(col) => {
            eprintln!("{}: {name}:{n}: {}", program(), not_utf8(col));
            skipped += 1;
            Ok(())
        }
    })?;
    Ok(skipped)
}

/// What a line that is not UTF-8 gets said of it, with the column of its first invalid byte.
pub fn not_utf8(col: usize) -> String {
    format!("not UTF-8 (invalid byte at column {col}); line skipped")
}

/// [`for_each_line`], handing `f` a line that is not UTF-8 too, as the column of its first
/// invalid byte, for a caller that reports it in its turn among the other lines.
pub fn each_line(
    files: &[PathBuf],
    stdin: &mut dyn BufRead,
    mut f: impl FnMut(&str, usize, std::result::Result<&str, usize>) -> Result<()>,
) -> Result<()> {
    let mut each = |name: &str, r: &mut dyn BufRead| -> Result<()> {
        let mut buf = Vec::new();
        let mut n = 0usize;
        loop {
            buf.clear();
            let got = r
                .read_until(b'\n', &mut buf)
                .with_context(|| format!("{name}:{}: read failed", n + 1))?;
            if got == 0 {
                return Ok(());
            }
            n += 1;
            let line = match std::str::from_utf8(&buf) {
                Ok(l) => l,
                Err(e) => {
                    f(name, n, Err(e.valid_up_to() + 1))?;
                    continue;
                }
            };
            let line = line.trim_end_matches(['\n', '\r']);
            if line.trim().is_empty() {
                continue;
            }
            f(name, n, Ok(line))?;
        }
    };
    if files.is_empty() {
        return each("stdin", stdin);
    }
    for p in files {
        if p.as_os_str() == "-" {
            each("stdin", stdin)?;
        } else {
            let file = File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            let name = p.display().to_string();
            each(&name, &mut BufReader::with_capacity(64 * 1024, file))?;
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Parses a duration: `90s`, `10m`, `1h`, `30d`, `500ms`, or bare seconds. Returns ms; a
/// duration longer than i64 milliseconds can hold is that longest duration (never a wrapped,
/// short one: `--older-than 213503982335d` must not mean "older than a day").
pub fn parse_duration_ms(s: &str) -> Result<i64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() {
        bail!("invalid duration {s:?}: expected a number and a unit, like 10m");
    }
    // digits beyond what i64 holds are an enormous duration, not an error
    let n: i64 = num.parse().unwrap_or(i64::MAX);
    let mult = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => bail!("invalid duration {s:?}: unknown unit {unit:?} (use ms, s, m, h, d or w)"),
    };
    Ok(n.saturating_mul(mult))
}

/// Parses `WHEN`: a duration back from `now` (`10m`), or an absolute time in epoch ms (any
/// number of 12 digits or more). An empty string means "the beginning of time" (0), so that
/// `--since "$(wd-store last-tick)"` works on a first tick.
pub fn parse_when(s: &str, now: i64) -> Result<i64> {
    let t = s.trim();
    if t.is_empty() {
        return Ok(0);
    }
    if t.len() >= 12 && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse()
            .with_context(|| format!("invalid time {t:?}: expected epoch milliseconds"));
    }
    Ok(now.saturating_sub(parse_duration_ms(t)?))
}

/// Output format for commands that talk to people as well as pipelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
pub enum Format {
    #[default]
    Jsonl,
    Table,
    Csv,
}

/// RFC 3339 UTC time of epoch milliseconds.
pub fn iso_ms(ms: i64) -> String {
    // RFC 3339 in UTC, from epoch ms, without a date crate: days from the civil calendar.
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// The widest cell of a table, in characters: one long title or path must not make every
/// row hundreds of characters wide (the JSONL output has it whole).
pub const CELL_CAP: usize = 80;

/// Writes an aligned text table (for `--format table`). Each cell as the popup shows text
/// ([`crate::notify::plain::visible`]): an escape sequence or bidi override in a title an
/// agent chose is shown as `<U+XXXX>`, never sent to the operator's terminal, and a cell is
/// capped at [`CELL_CAP`] with an ellipsis.
pub fn write_table(out: &mut dyn Write, head: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| crate::notify::plain::visible(c, CELL_CAP, false))
                .collect()
        })
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let last = cells.len().saturating_sub(1);
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == last {
                    c.to_string()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    writeln!(out, "{}", line(head.to_vec()).trim_end())?;
    for r in rows {
        writeln!(
            out,
            "{}",
            line(r.iter().map(String::as_str).collect()).trim_end()
        )?;
    }
    Ok(())
}

/// The width of a table when neither `COLUMNS` nor a terminal says one (a table sent to a
/// file or a pager).
pub const TABLE_WIDTH: usize = 100;

/// How wide a table may be: `COLUMNS` when it holds a width (a shell's own, or one set for a
/// command), else the terminal's that stdout is, else [`TABLE_WIDTH`].
pub fn table_width(columns: Option<&str>, tty: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .or(tty)
        .filter(|&w| w > 0)
        .unwrap_or(TABLE_WIDTH)
}

/// How a column of a table gives way when the table is wider than the terminal
/// ([`Give::KEEP`]: not at all, for an id to paste or a state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Give {
    /// Cut with `…`, never below this many characters.
    pub min: Option<usize>,
    /// Cut at its start (`…rk/billing-service`): a path, whose end says most.
    pub start: bool,
    /// Left out, the lowest rank first, while the table cannot fit with it (`--wide` and the
    /// JSONL have it).
    pub drop: Option<u8>,
}

impl Give {
    pub const KEEP: Give = Give {
        min: None,
        start: false,
        drop: None,
    };
    /// Cut at its end, down to `min` characters.
    pub const fn cut(min: usize) -> Give {
        Give {
            min: Some(min),
            start: false,
            drop: None,
        }
    }
    /// Cut at its start, down to `min` characters.
    pub const fn cut_start(min: usize) -> Give {
        Give {
            min: Some(min),
            start: true,
            drop: None,
        }
    }
    /// Left out at rank `rank`.
    pub const fn drop(rank: u8) -> Give {
        Give {
            min: None,
            start: false,
            drop: Some(rank),
        }
    }
    /// As it is, and left out at rank `rank` when even cut it does not fit.
    pub const fn or_drop(self, rank: u8) -> Give {
        Give {
            drop: Some(rank),
            ..self
        }
    }
}

/// Writes a table as [`write_table`] does, at most `width` characters a line, without the
/// columns empty in every row: columns that may be left out go first, the lowest rank first, until the rest fits once cut to their
/// minima; then the columns that may be cut are cut, from the left, each to its minimum before
/// the next (so the last, the free text a row is about, gives last). A table whose kept
/// columns are wider on their own is written as they are.
pub fn write_fitted(
    out: &mut dyn Write,
    head: &[&str],
    give: &[Give],
    rows: &[Vec<String>],
    width: usize,
) -> Result<()> {
    let visible = |c: &str| crate::notify::plain::visible(c, CELL_CAP, false);
    let mut rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| visible(c)).collect())
        .collect();
    let count = |s: &str| s.chars().count();
    let give = |i: usize| give.get(i).copied().unwrap_or(Give::KEEP);
    let natural: Vec<usize> = (0..head.len())
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| count(c))
                .fold(count(head[i]), usize::max)
        })
        .collect();
    let least = |i: usize| give(i).min.map_or(natural[i], |m| natural[i].min(m.max(2)));
    let gaps = |n: usize| 2 * n.saturating_sub(1);
    // a column empty in every row says nothing: it is left out
    let empty =
        |i: usize| !rows.is_empty() && rows.iter().all(|r| r.get(i).map_or(true, |c| c.is_empty()));
    let rank = |i: usize| give(i).drop;
    let mut kept: Vec<usize> = (0..head.len()).filter(|&i| !empty(i)).collect();
    while kept.iter().map(|&i| least(i)).sum::<usize>() + gaps(kept.len()) > width {
        let Some((_, _, k)) = (0..kept.len())
            .filter_map(|k| Some((rank(kept[k])?, std::cmp::Reverse(kept[k]), k)))
            .min()
        else {
            break;
        };
        kept.remove(k);
    }
    let mut widths: Vec<usize> = kept.iter().map(|&i| natural[i]).collect();
    let mut over = (widths.iter().sum::<usize>() + gaps(kept.len())).saturating_sub(width);
    for (k, &i) in kept.iter().enumerate() {
        let by = over.min(widths[k] - least(i));
        widths[k] -= by;
        over -= by;
    }
    let cut = |c: &str, to: usize, start: bool| -> String {
        let n = count(c);
        if n <= to {
            c.to_string()
        } else if start {
            "…".to_string() + &c.chars().skip(n + 1 - to).collect::<String>()
        } else {
            c.chars().take(to - 1).collect::<String>() + "…"
        }
    };
    // a header is cut at its end, whatever its column's cells
    let head: Vec<String> = kept
        .iter()
        .zip(&widths)
        .map(|(&i, &w)| cut(head[i], w, false))
        .collect();
    for r in rows.iter_mut() {
        *r = kept
            .iter()
            .zip(&widths)
            .map(|(&i, &w)| {
                r.get(i)
                    .map(|c| cut(c, w, give(i).start))
                    .unwrap_or_default()
            })
            .collect();
    }
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    write_table(out, &head, &rows)
}

/// Writes `pairs` as a key/value block for a person: the keys in one column, each value beside
/// its key, wrapped at spaces to fit `width` (a value without spaces is cut with `…`); an empty
/// value is `-`.
pub fn write_pairs(out: &mut dyn Write, pairs: &[(String, String)], width: usize) -> Result<()> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| {
            (
                crate::notify::plain::visible(k, CELL_CAP, false),
                crate::notify::plain::visible(v, usize::MAX, false),
            )
        })
        .collect();
    let key_w = pairs
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let room = width.saturating_sub(key_w + 2).max(20);
    for (k, v) in &pairs {
        let v = if v.trim().is_empty() { "-" } else { v.trim() };
        let mut lines: Vec<String> = vec![String::new()];
        for word in v.split(' ').filter(|w| !w.is_empty()) {
            let last = lines.last_mut().expect("one line at least");
            let (len, wl) = (last.chars().count(), word.chars().count());
            if len > 0 && len + 1 + wl > room {
                lines.push(String::new());
            }
            let last = lines.last_mut().expect("one line at least");
            if !last.is_empty() {
                last.push(' ');
            }
            if word.chars().count() > room {
                last.extend(word.chars().take(room - 1));
                last.push('…');
            } else {
                last.push_str(word);
            }
        }
        for (n, l) in lines.iter().enumerate() {
            let key = if n == 0 { k.as_str() } else { "" };
            writeln!(out, "{key:<key_w$}  {l}")?;
        }
    }
    Ok(())
}

/// `s` as one shell word a reader can paste into sh, bash, zsh or fish: as it is when it holds
/// only characters no shell gives a meaning (and does not start with zsh's `=`), else in single
/// quotes, so nothing in it (`$(...)`, backquotes, `;`, `&&`) is run. A `'` and a `\` are written
/// outside the quotes, escaped (`\'`, `\\`): inside single quotes fish reads `\'` and `\\` as
/// escapes where POSIX shells do not, so neither may stand there. Every command the
/// watchdog prints for a person to paste builds its words with this function.
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./:@%+=,-".contains(c);
    if !s.is_empty() && !s.starts_with('=') && s.chars().all(plain) {
        return s.to_string();
    }
    let mut w = String::with_capacity(s.len() + 2);
    let mut open = false;
    for c in s.chars() {
        if c == '\'' || c == '\\' {
            if open {
                w.push('\'');
                open = false;
            }
            w.push('\\');
            w.push(c);
        } else {
            if !open {
                w.push('\'');
                open = true;
            }
            w.push(c);
        }
    }
    if open || w.is_empty() {
        w.push('\'');
        if w.len() == 1 {
            w.push('\'');
        }
    }
    w
}

/// A command line for a person to paste: `program` (the watchdog's own, fixed) and each argument
/// quoted by [`shell_word`], separated by spaces.
pub fn shell_line(program: &str, args: &[&str]) -> String {
    let mut line = program.to_string();
    for a in args {
        line.push(' ');
        line.push_str(&shell_word(a));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_ms(1_796_069_494_828), "2026-11-30T20:11:34.828Z");
        assert_eq!(iso_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn a_table_never_sends_control_characters_to_the_terminal() {
        let mut out = Vec::new();
        write_table(
            &mut out,
            &["title"],
            &[vec!["loop \u{1b}]0;pwned\u{7}\u{1b}[2J".into()]],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "title\nloop <U+001B>]0;pwned<U+0007><U+001B>[2J\n"
        );
    }

    #[test]
    fn a_bidi_override_is_shown_and_one_long_cell_does_not_widen_every_row() {
        let mut out = Vec::new();
        write_table(
            &mut out,
            &["agent", "title"],
            &[
                vec!["safe\u{202e}txt.exe".into(), "x".repeat(400)],
                vec!["y".repeat(400), "t".into()],
            ],
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[1],
            format!("safe<U+202E>txt.exe{}  {}…", " ".repeat(61), "x".repeat(79))
        );
        assert_eq!(lines[2], format!("{}…  t", "y".repeat(79)));
    }

    #[test]
    fn a_fitted_table_drops_then_cuts_from_the_left_and_keeps_what_is_pasted() {
        let head = ["state", "id", "when", "burned", "path", "title"];
        let give = [
            Give::KEEP,
            Give::KEEP,
            Give::drop(1),
            Give::cut(6).or_drop(2),
            Give::cut_start(6),
            Give::cut(8),
        ];
        let rows = [vec![
            "warning".to_string(),
            "ses_0123456789".into(),
            "11-30 01:53".into(),
            "41 calls, $0.41".into(),
            "~/work/billing".into(),
            "Fix the flaky payment retry test".into(),
        ]];
        let fitted = |width| {
            let mut out = Vec::new();
            write_fitted(&mut out, &head, &give, &rows, width).unwrap();
            String::from_utf8(out).unwrap()
        };
        // wide enough: as write_table writes it
        assert_eq!(
            fitted(200).lines().nth(1).unwrap(),
            "warning  ses_0123456789  11-30 01:53  41 calls, $0.41  ~/work/billing  Fix the flaky payment retry test"
        );
        // `when` goes first; then burned, then the path (at its start), then the title are cut
        assert_eq!(
            fitted(60),
            "state    id              burned  path    title\n\
             warning  ses_0123456789  41 ca…  …lling  Fix the flaky paym…\n"
        );
        // too narrow for burned even cut: it goes too; the kept columns are never cut
        assert_eq!(
            fitted(40).lines().nth(1).unwrap(),
            "warning  ses_0123456789  …lling  Fix the…"
        );
        assert_eq!(
            fitted(10).lines().nth(1).unwrap(),
            "warning  ses_0123456789  …lling  Fix the…"
        );
    }

    #[test]
    fn a_tables_width_is_columns_else_the_terminals_else_100() {
        assert_eq!(table_width(Some("80"), Some(120)), 80);
        assert_eq!(table_width(Some("wide"), Some(120)), 120);
        assert_eq!(table_width(None, Some(132)), 132);
        assert_eq!(table_width(None, None), 100);
        assert_eq!(table_width(Some("0"), None), 100);
    }

    #[test]
    fn a_key_value_block_wraps_long_values_under_themselves() {
        let mut out = Vec::new();
        let pairs = [
            ("mode".to_string(), "timer".to_string()),
            ("blind".to_string(), String::new()),
            (
                "channels".to_string(),
                "desktop:on:info hook:off:warning pager:on:critical".to_string(),
            ),
        ];
        write_pairs(&mut out, &pairs, 34).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "mode      timer\n\
             blind     -\n\
             channels  desktop:on:info\n\
             \x20         hook:off:warning\n\
             \x20         pager:on:critical\n"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("10m").unwrap(), 600_000);
        assert_eq!(parse_duration_ms("30d").unwrap(), 30 * 86_400_000);
        assert_eq!(parse_duration_ms("250ms").unwrap(), 250);
        assert_eq!(parse_duration_ms("45").unwrap(), 45_000);
        assert!(parse_duration_ms("ten minutes").is_err());
        assert!(parse_duration_ms("10y").is_err());
    }

    #[test]
    fn enormous_durations_saturate_instead_of_wrapping() {
        // 213503982335 days in ms wraps i64 to about a day
        assert_eq!(parse_duration_ms("213503982335d").unwrap(), i64::MAX);
        assert_eq!(
            parse_duration_ms("99999999999999999999999s").unwrap(),
            i64::MAX
        );
        assert_eq!(
            parse_when("213503982335d", 1_796_000_000_000).unwrap(),
            1_796_000_000_000 - i64::MAX
        );
    }

    #[test]
    fn when_is_duration_epoch_or_empty() {
        let now = 1_796_000_000_000;
        assert_eq!(parse_when("10m", now).unwrap(), now - 600_000);
        assert_eq!(parse_when("1796069494828", now).unwrap(), 1_796_069_494_828);
        assert_eq!(parse_when("", now).unwrap(), 0);
    }

    #[test]
    fn broken_pipe_is_found_through_serde_json() {
        let io = io::Error::new(io::ErrorKind::BrokenPipe, "pipe");
        let js = serde_json::Error::io(io);
        let e = anyhow::Error::new(js).context("writing");
        assert!(is_broken_pipe(&e));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }

    /// Writes that reach the sink, one entry per `write` or `flush` call that carried bytes.
    #[derive(Clone, Default)]
    struct Flushes(std::sync::Arc<std::sync::Mutex<Vec<usize>>>);

    impl Write for Flushes {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().push(buf.len());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn line_buffered_false_turns_per_line_flushing_off_on_a_terminal() {
        let sink = Flushes::default();
        let mut out = Out::new(Box::new(sink.clone()), true);
        out.line("a").unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [2], "a terminal flushes per line");
        out.line_buffered(false);
        out.line("b").unwrap();
        out.line("c").unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [2], "block-buffered until flushed");
        out.flush().unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [2, 4]);
    }

    #[test]
    fn line_buffered_if_asks_for_per_line_and_otherwise_keeps_the_default() {
        let sink = Flushes::default();
        let mut out = Out::new(Box::new(sink.clone()), true);
        out.line_buffered_if(false);
        out.line("a").unwrap();
        let mut pipe = Out::new(Box::new(sink.clone()), false);
        pipe.line("b").unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [2]);
        pipe.line_buffered_if(true);
        pipe.line("c").unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [2, 4]);
    }

    #[test]
    fn lines_are_numbered_and_blank_lines_skipped() {
        let mut input: &[u8] = b"a\n\nb\r\n";
        let mut seen = vec![];
        for_each_line(&[], &mut input, |name, n, l| {
            seen.push(format!("{name}:{n}:{l}"));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["stdin:1:a", "stdin:3:b"]);
    }

    #[test]
    fn a_model_id_with_shell_syntax_is_one_quoted_word() {
        assert_eq!(shell_word("anthropic/claude-3.5"), "anthropic/claude-3.5");
        assert_eq!(shell_word("x/$(touch pwned)"), "'x/$(touch pwned)'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("'"), "\\'");
        assert_eq!(shell_word("a\\'b"), "'a'\\\\\\''b'");
        assert_eq!(shell_word("=ls"), "'=ls'");
        assert_eq!(shell_word("a=b"), "a=b");
        assert_eq!(
            shell_line("wd-store", &["stop", "ses_x;id"]),
            "wd-store stop 'ses_x;id'"
        );
    }
}
