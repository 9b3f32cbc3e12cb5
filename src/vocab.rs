//! The tool and argument vocabulary, beside the record contract ([`crate::record`]): which tool
//! names and argument keys mean something to the watchdog, and what. A `call` record carries its
//! tool's name and its scrubbed arguments in these words, whichever agent made the call, and
//! every module that reads or writes them spells them only here:
//!
//! - the converters ([`crate::sources`]) write them: opencode's (`sources::opencode::convert`) decides from
//!   a call's [`Tool`] whether it landed a change ([`Lands`]) and which argument names its file;
//!   the other agents' readers (`sources::claude_code`, `sources::codex`) map their own tools and
//!   keys onto these (Claude Code's `Read {file_path}` onto [`Tool::Read`] with
//!   [`Arg::FilePath`], Codex's `shell` onto [`Tool::Bash`]); a tool a reader cannot map keeps
//!   its own name and is [`Tool::Other`], still judged by its exact arguments;
//! - the scrubber ([`crate::scrub`]) keeps an argument as its [`Arg::kept`] says, and hashes every
//!   key this vocabulary does not name;
//! - the detector ([`crate::detect`]) picks out the arguments it reads by their [`Arg`], builds a
//!   call's target from those its tool's [`Target`] names ([`Target::args`]), and describes the
//!   call by them.
//!
//! The names are opencode's (1.18; `multiedit` and `patch` from older builds).

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
    /// `todowrite {todos}`: the session's todo list (Claude Code's `TodoWrite`, Codex's
    /// `update_plan`); judged by its exact arguments only.
    TodoWrite,
    /// Any other tool (`webfetch`, `skill`, `invalid`, ...): judged by its exact arguments only.
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

impl Target {
    /// The arguments the target is built from (`None`: every argument, as for the call's
    /// identity). The detector hashes these and only these into a call's target.
    pub fn args(self) -> Option<&'static [Arg]> {
        match self {
            Target::FileWindow => Some(&[Arg::FilePath, Arg::Offset, Arg::Limit]),
            Target::File => Some(&[Arg::FilePath]),
            Target::Command => Some(&[Arg::Command]),
            Target::Search => Some(&[Arg::Pattern, Arg::Path]),
            Target::Subagent | Target::Arguments => None,
        }
    }
}

impl Tool {
    pub const ALL: [Tool; 12] = [
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
        Tool::TodoWrite,
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
            "todowrite" => Tool::TodoWrite,
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
            Tool::TodoWrite => "todowrite",
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
            Tool::ApplyPatch | Tool::Patch | Tool::TodoWrite | Tool::Other => Target::Arguments,
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
    /// edit's `replaceAll` flag.
    ReplaceAll,
    /// apply_patch's patch: only its hash travels.
    PatchText,
    /// task's prompt: only its hash travels.
    Prompt,
    /// todowrite's list: only the hashes of its strings travel.
    Todos,
}

/// How an argument leaves `oc-calls` (the scrubber's rule for it). An argument holding another
/// type than the one it is kept in (a `command` array, a `timeout` string) is hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A string kept as it is (a subagent type).
    Verbatim,
    /// A path, kept with a part shaped like a secret masked (`scrub::mask_path`).
    MaskedPath,
    /// A command, kept with its secrets masked (`scrub::mask_command`).
    MaskedCommand,
    /// A search pattern, kept with its secrets masked (`scrub::mask_pattern`).
    MaskedPattern,
    /// A number kept as it is.
    Number,
    /// Every string in it hashed (`sha1:`), like every key not in this vocabulary.
    Hashed,
}

impl Arg {
    pub const ALL: [Arg; 16] = [
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
        Arg::ReplaceAll,
        Arg::PatchText,
        Arg::Prompt,
        Arg::Todos,
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
            Arg::ReplaceAll => "replaceAll",
            Arg::PatchText => "patchText",
            Arg::Prompt => "prompt",
            Arg::Todos => "todos",
        }
    }

    /// The argument of a key in a tool's input. A `match` (not a search of [`Arg::ALL`]): the
    /// detector asks it of every argument of every call.
    pub fn of(key: &str) -> Option<Arg> {
        Some(match key {
            "filePath" => Arg::FilePath,
            "path" => Arg::Path,
            "offset" => Arg::Offset,
            "limit" => Arg::Limit,
            "command" => Arg::Command,
            "pattern" => Arg::Pattern,
            "include" => Arg::Include,
            "subagent_type" => Arg::SubagentType,
            "timeout" => Arg::Timeout,
            "workdir" => Arg::Workdir,
            "oldString" => Arg::OldString,
            "newString" => Arg::NewString,
            "replaceAll" => Arg::ReplaceAll,
            "patchText" => Arg::PatchText,
            "prompt" => Arg::Prompt,
            "todos" => Arg::Todos,
            _ => return None,
        })
    }

    /// How the scrubber keeps it.
    pub fn kept(self) -> Kept {
        match self {
            Arg::Command => Kept::MaskedCommand,
            Arg::Pattern | Arg::Include => Kept::MaskedPattern,
            // a path may hold a token (`/tmp/ghp_.../out`)
            Arg::FilePath | Arg::Path | Arg::Workdir => Kept::MaskedPath,
            Arg::SubagentType => Kept::Verbatim,
            Arg::Offset | Arg::Limit | Arg::Timeout => Kept::Number,
            Arg::OldString
            | Arg::NewString
            | Arg::ReplaceAll
            | Arg::PatchText
            | Arg::Prompt
            | Arg::Todos => Kept::Hashed,
        }
    }
}

/// bash's `timeout` when the call names none, in ms (opencode's default).
pub const BASH_TIMEOUT_MS: i64 = 120_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::target;
    use serde_json::{json, Map, Value};

    #[test]
    fn names_read_back_and_unknown_tools_are_other() {
        for t in Tool::ALL {
            match t.name() {
                Some(n) => assert_eq!(Tool::of(n), t),
                None => assert_eq!(t, Tool::Other),
            }
        }
        assert_eq!(Tool::of("webfetch"), Tool::Other);
        assert_eq!(Tool::of("Read"), Tool::Other);
        for a in Arg::ALL {
            assert_eq!(Arg::of(a.key()), Some(a));
        }
        assert_eq!(Arg::of("content"), None);
        assert_eq!(Arg::of("file_path"), None);
    }

    /// A value of the type `a` is kept in, without secrets; `n` picks one of two.
    fn plain(a: Arg, n: usize) -> Value {
        let p = ["/w/src/a.rs", "/w/src/b.rs"];
        match a.kept() {
            Kept::MaskedPath => json!(p[n]),
            Kept::Verbatim => json!(["explore", "general"][n]),
            Kept::MaskedCommand => json!(["sed -n 1,40p src/a.rs", "sed -n 41,80p src/b.rs"][n]),
            Kept::MaskedPattern => json!(["fn main", "struct Call"][n]),
            Kept::Number => json!([40, 80][n]),
            Kept::Hashed => json!(["old text", "new text"][n]),
        }
    }

    /// Every argument of the vocabulary and one it does not name, each `plain(_, 0)`.
    fn every_arg() -> Map<String, Value> {
        let mut m: Map<String, Value> = Arg::ALL
            .into_iter()
            .map(|a| (a.key().to_string(), plain(a, 0)))
            .collect();
        m.insert("content".into(), json!("body"));
        m
    }

    #[test]
    fn the_detector_targets_a_call_by_the_arguments_its_tools_target_names() {
        for t in Tool::ALL {
            let name = t.name().unwrap_or("webfetch");
            let base = every_arg();
            let before = target::keys(name, &base).target;
            for (k, v) in &base {
                let mut other = base.clone();
                other[k] = match Arg::of(k) {
                    Some(a) => plain(a, 1),
                    None => json!("other body"),
                };
                assert_ne!(&other[k], v);
                let named = match t.target().args() {
                    Some(args) => args.iter().any(|a| a.key() == k),
                    None => true,
                };
                let moved = target::keys(name, &other).target != before;
                assert_eq!(moved, named, "{name}: {k} moves the target");
            }
        }
    }

    #[test]
    fn what_the_detector_targets_and_describes_leaves_the_scrubber_as_it_was() {
        // every argument a target names is kept readable, so a call's target and description
        // are the same after scrubbing as before it
        for t in Tool::ALL {
            for a in t.target().args().unwrap_or(&[]) {
                assert_ne!(a.kept(), Kept::Hashed, "{t:?}'s target reads {a:?}");
            }
            let name = t.name().unwrap_or("webfetch");
            let args = every_arg();
            let scrubbed = crate::scrub::scrub_args(&args);
            assert_ne!(args, scrubbed);
            assert_eq!(
                target::describe(name, &scrubbed, Some("/w")),
                target::describe(name, &args, Some("/w")),
                "{name}"
            );
            if t.target().args().is_some() {
                assert_eq!(
                    target::keys(name, &scrubbed).target,
                    target::keys(name, &args).target,
                    "{name}"
                );
            }
        }
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
