//! The commands, one file each with its clap `Args` and a short `run(args, stdin, out)`; the
//! binaries in `src/bin/` only call their `main`.

pub mod oc_calls;
pub mod oc_sessions;
pub mod progress_detect;
pub mod wd_alert;
pub mod wd_store;

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every option, argument and subcommand of every command, as `--help` and the man page
    /// show it: `verdicts --since`, `prune --older-than`, `channels set` and eight more had
    /// an empty description there.
    #[test]
    fn every_option_and_subcommand_says_what_it_is() {
        fn walk(cmd: &clap::Command, path: &str, empty: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    empty.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                if sub
                    .get_about()
                    .is_none_or(|h| h.to_string().trim().is_empty())
                {
                    empty.push(name.clone());
                }
                walk(sub, &name, empty);
            }
        }
        let mut empty = Vec::new();
        for cmd in [
            super::oc_sessions::Args::command(),
            super::oc_calls::Args::command(),
            super::progress_detect::Args::command(),
            super::wd_store::Args::command(),
            super::wd_alert::Args::command(),
        ] {
            walk(&cmd, cmd.get_name(), &mut empty);
        }
        assert_eq!(empty, Vec::<String>::new());
    }
}
