//! The tool and argument vocabulary the watchdog relies on: which tool names and argument keys
//! mean something to it, and what. A `call` record carries the agent's own tool name and its
//! scrubbed arguments; everything downstream reads them by this vocabulary:
//!
//! - [`convert`](super::opencode::convert) decides from a call's [`Tool`] whether it landed a change
//!   (an edit's diff, a new file's write, a bash commit) and which arguments name its file;
//! - the scrubber (`scrub`) keeps verbatim only the [`Arg`]s whose [`Kept`] says so, in that type;
//! - the detector (`detect::target`) builds a call's target from the arguments its tool's
//!   [`Target`] names, and describes the call by them.
//!
//! The names are opencode's (1.18; `multiedit` and `patch` from older builds). A reader for
//! another agent maps its tools onto these: e.g. a `str_replace` tool onto [`Tool::Edit`] with
//! its path as [`Arg::FilePath`]; a tool it cannot map stays [`Tool::Other`] and is still judged
//! by its exact arguments.

/// A tool the watchdog knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `read {filePath, offset?, limit?}`; its metadata gives the file's total lines.
    Read,
    /// `edit {filePath, oldString, newString, replaceAll?}`; lands when its diff changed lines.
    Edit,
    /// `multiedit` (older opencode): as edit.
    MultiEdit,
    /// `apply_patch {patchText}` (models named `gpt-*`); lands as an edit, its files in metadata.
    ApplyPatch,
    /// `patch` (older opencode): as apply_patch.
    Patch,
    /// `write {filePath, content}`; lands when it created the file or the step's patch names it.
    Write,
    /// `bash {command, timeout?, workdir?}`; a non-zero exit is `completed` with metadata.exit.
    Bash,
    /// `grep {pattern, path?, include?}`.
    Grep,
    /// `glob {pattern, path?}`.
    Glob,
    /// `task {description, subagent_type, prompt}`: a subagent's session.
    Task,
    /// Any other tool (`todowrite`, `webfetch`, `skill`, `invalid`, ...): judged by its exact
    /// arguments only.
    Other,
}

/// How a tool's call lands a change, for the "did the session get anywhere" question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lands {
    /// When its metadata shows a diff that changed lines (edit, multiedit, apply_patch, patch).
    ByDiff,
    /// When it created its file, or the step's patch part names its file (write).
    ByNewFile,
    /// When it exits 0 and commits or writes files no edit explains (bash).
    ByCommand,
    Never,
}

/// What a tool's calls count as "the same place" by (the detector's target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The file and the window read ([`Arg::FilePath`], [`Arg::Offset`], [`Arg::Limit`]).
    FileWindow,
    /// The file written ([`Arg::FilePath`]).
    File,
    /// The normalised command ([`Arg::Command`]).
    Command,
    /// The search ([`Arg::Pattern`] in [`Arg::Path`]).
    Search,
    /// The subagent type ([`Arg::SubagentType`]), for descriptions; targeted by all arguments.
    Subagent,
    /// Every argument.
    Arguments,
}

impl Tool {
    pub const ALL: [Tool; 11] = [
        Tool::Read,
        Tool::Edit,
        Tool::MultiEdit,
        Tool::ApplyPatch,
        Tool::Patch,
        Tool::Write,
        Tool::Bash,
        Tool::Grep,
        Tool::Glob,
        Tool::Task,
        Tool::Other,
    ];

    /// The tool of a call's `tool` name.
    pub fn of(name: &str) -> Tool {
        match name {
            "read" => Tool::Read,
            "edit" => Tool::Edit,
            "multiedit" => Tool::MultiEdit,
            "apply_patch" => Tool::ApplyPatch,
            "patch" => Tool::Patch,
            "write" => Tool::Write,
            "bash" => Tool::Bash,
            "grep" => Tool::Grep,
            "glob" => Tool::Glob,
            "task" => Tool::Task,
            _ => Tool::Other,
        }
    }

    /// opencode's name of the tool (`None` for [`Tool::Other`]).
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Tool::Read => "read",
            Tool::Edit => "edit",
            Tool::MultiEdit => "multiedit",
            Tool::ApplyPatch => "apply_patch",
            Tool::Patch => "patch",
            Tool::Write => "write",
            Tool::Bash => "bash",
            Tool::Grep => "grep",
            Tool::Glob => "glob",
            Tool::Task => "task",
            Tool::Other => return None,
        })
    }

    pub fn lands(self) -> Lands {
        match self {
            Tool::Edit | Tool::MultiEdit | Tool::ApplyPatch | Tool::Patch => Lands::ByDiff,
            Tool::Write => Lands::ByNewFile,
            Tool::Bash => Lands::ByCommand,
            _ => Lands::Never,
        }
    }

    pub fn target(self) -> Target {
        match self {
            Tool::Read => Target::FileWindow,
            Tool::Edit | Tool::MultiEdit | Tool::Write => Target::File,
            Tool::Bash => Target::Command,
            Tool::Grep | Tool::Glob => Target::Search,
            Tool::Task => Target::Subagent,
            Tool::ApplyPatch | Tool::Patch | Tool::Other => Target::Arguments,
        }
    }
}

/// An argument key the watchdog reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arg {
    FilePath,
    Path,
    Offset,
    Limit,
    Command,
    Pattern,
    Include,
    SubagentType,
    Timeout,
    Workdir,
    /// edit's replaced text: only its hash travels, for "the same edit again".
    OldString,
    /// edit's new text: only its hash travels.
    NewString,
}

/// How an argument leaves `oc-calls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A string kept as it is (a path, a subagent type).
    Verbatim,
    /// A command, kept with its secrets masked (`scrub::mask_command`).
    MaskedCommand,
    /// A search text, kept with its secrets masked (`scrub::mask_text`).
    MaskedText,
    /// A number kept as it is.
    Number,
    /// Hashed (`sha1:`), like every key not in this vocabulary.
    Hashed,
}

impl Arg {
    pub const ALL: [Arg; 12] = [
        Arg::FilePath,
        Arg::Path,
        Arg::Offset,
        Arg::Limit,
        Arg::Command,
        Arg::Pattern,
        Arg::Include,
        Arg::SubagentType,
        Arg::Timeout,
        Arg::Workdir,
        Arg::OldString,
        Arg::NewString,
    ];

    /// The key in a tool's input.
    pub fn key(self) -> &'static str {
        match self {
            Arg::FilePath => "filePath",
            Arg::Path => "path",
            Arg::Offset => "offset",
            Arg::Limit => "limit",
            Arg::Command => "command",
            Arg::Pattern => "pattern",
            Arg::Include => "include",
            Arg::SubagentType => "subagent_type",
            Arg::Timeout => "timeout",
            Arg::Workdir => "workdir",
            Arg::OldString => "oldString",
            Arg::NewString => "newString",
        }
    }

    pub fn of(key: &str) -> Option<Arg> {
        Arg::ALL.into_iter().find(|a| a.key() == key)
    }

    /// How the scrubber keeps it (in this type only; another type is hashed).
    pub fn kept(self) -> Kept {
        match self {
            Arg::Command => Kept::MaskedCommand,
            Arg::Pattern | Arg::Include => Kept::MaskedText,
            Arg::FilePath | Arg::Path | Arg::Workdir | Arg::SubagentType => Kept::Verbatim,
            Arg::Offset | Arg::Limit | Arg::Timeout => Kept::Number,
            Arg::OldString | Arg::NewString => Kept::Hashed,
        }
    }
}

/// bash's `timeout` when the call names none, in ms (opencode's default).
pub const BASH_TIMEOUT_MS: i64 = 120_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_unknown_tools_are_other() {
        for t in Tool::ALL {
            match t.name() {
                Some(n) => assert_eq!(Tool::of(n), t),
                None => assert_eq!(t, Tool::Other),
            }
        }
        assert_eq!(Tool::of("todowrite"), Tool::Other);
        assert_eq!(Tool::of("Read"), Tool::Other);
        for a in Arg::ALL {
            assert_eq!(Arg::of(a.key()), Some(a));
        }
        assert_eq!(Arg::of("content"), None);
    }

    #[test]
    fn the_scrubbers_verbatim_keys_are_the_vocabularys_kept_ones() {
        let mut kept: Vec<&str> = Arg::ALL
            .into_iter()
            .filter(|a| a.kept() != Kept::Hashed)
            .map(Arg::key)
            .collect();
        let mut verbatim = crate::scrub::VERBATIM.to_vec();
        kept.sort_unstable();
        verbatim.sort_unstable();
        assert_eq!(kept, verbatim);
    }

    #[test]
    fn what_lands_and_what_is_targeted_by_the_file() {
        let by = |l: Lands| -> Vec<&str> {
            Tool::ALL
                .into_iter()
                .filter(|t| t.lands() == l)
                .filter_map(Tool::name)
                .collect()
        };
        assert_eq!(
            by(Lands::ByDiff),
            ["edit", "multiedit", "apply_patch", "patch"]
        );
        assert_eq!(by(Lands::ByNewFile), ["write"]);
        assert_eq!(by(Lands::ByCommand), ["bash"]);
        let file: Vec<&str> = Tool::ALL
            .into_iter()
            .filter(|t| t.target() == Target::File)
            .filter_map(Tool::name)
            .collect();
        assert_eq!(file, ["edit", "multiedit", "write"]);
    }
}
