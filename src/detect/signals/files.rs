//! What `coverage` and `circling` both compute: the lines each file's reads requested, over its
//! length, and the file that leads (the most read over its length). Each signal keeps its own
//! tally (coverage's over the window, circling's since the last landed change) and reads its
//! own figure from it.

use super::{find_or_add, round3, Case, Cx};
use crate::detect::region::{Obs, ReadSpan, RegionEntry};
use crate::record::Reading;

/// One file read: the lines its reads requested, its latest known length, how many reads.
#[derive(Clone)]
pub struct File {
    pub key: u64,
    pub lines: i64,
    pub total: u32,
    pub reads: u32,
    name: Box<str>,
}

impl File {
    /// The lines requested over the file's length: its coverage, or its passes.
    pub fn ratio(&self) -> f64 {
        self.lines as f64 / self.total.max(1) as f64
    }
}

/// The files read, first read first (a handful: a scan is cheaper than a map), and the leader
/// kept as reads come and go.
#[derive(Default, Clone)]
pub struct Files {
    pub files: Vec<File>,
    leader: Option<(f64, u64)>,
}

/// A read's file path as shown: relative to the session's directory when under it.
fn shown(c: &Obs) -> Box<str> {
    let p = c.args.file();
    match c.dir {
        Some(d) if !d.is_empty() => p
            .strip_prefix(d)
            .map(|r| r.trim_start_matches('/'))
            .unwrap_or(p),
        _ => p,
    }
    .into()
}

impl Files {
    /// A read of call `c` came.
    pub fn add(&mut self, c: &Obs, r: ReadSpan) {
        let f = find_or_add(
            &mut self.files,
            |f| f.key == r.file,
            || File {
                key: r.file,
                lines: 0,
                total: 0,
                reads: 0,
                name: shown(c),
            },
        );
        f.lines += r.lines as i64;
        f.total = r.total;
        f.reads += 1;
        // a file's length can change, so its ratio can fall: judge them all again
        self.elect();
    }

    /// A read left; a file none of whose lines are left goes.
    pub fn remove(&mut self, r: ReadSpan) {
        if let Some(i) = self.files.iter().position(|f| f.key == r.file) {
            self.files[i].lines -= r.lines as i64;
            if self.files[i].lines <= 0 {
                self.files.remove(i);
            }
            self.elect();
        }
    }

    pub fn clear(&mut self) {
        self.files.clear();
        self.leader = None;
    }

    fn elect(&mut self) {
        self.leader = self
            .files
            .iter()
            .map(|f| (f.ratio(), f.key))
            .max_by(|a, b| a.0.total_cmp(&b.0));
    }

    /// The leading file's ratio and key; of equals, the one first read last.
    pub fn leader(&self) -> Option<(f64, u64)> {
        self.leader
    }

    /// The leader's ratio and its file.
    pub fn reading(&self) -> Reading {
        match self.leader {
            Some((x, k)) => Reading {
                value: round3(x),
                what: self
                    .files
                    .iter()
                    .find(|f| f.key == k)
                    .map(|f| f.name.to_string()),
            },
            None => Reading::default(),
        }
    }

    /// The region's reads of the leading file.
    pub fn case(&self, cx: &Cx) -> Case {
        let Some((_, k)) = self.leader else {
            return Case::default();
        };
        Case::of(
            cx.region
                .entries
                .iter()
                .filter(|e| e.read.is_some_and(|r| r.file == k))
                .map(RegionEntry::at)
                .collect(),
        )
    }
}
