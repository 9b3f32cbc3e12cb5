//! Claude Code's PreToolUse hook, alone: what `wd-store claude-hook` does, without the rest of
//! wd-store to load on every tool call.
fn main() {
    std::process::exit(oc_watchdog::claude_hook::main())
}
