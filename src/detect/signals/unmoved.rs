//! `unmoved`: edits land on one spot, each replacing the text the edit before it wrote, and the
//! check the agent runs after each passes with exactly the same answer, `unmoved_min` times:
//! 20 rewrites of a comment, the same pass after each, change nothing the check can see. Such
//! edits are no progress, though each lands. A pass after edits on new ground is how work goes
//! and ends the streak, as does a different answer; an unknown output never matches. The same
//! check failing is `same_failure`'s; a streak of one call back to back, nothing between, is
//! `run`'s.

use super::same_failure::{extend, start, Streak};
use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::Obs;
use crate::record::{Reading, Signal};
use crate::vocab::Tool;

const UNMOVED_MIN: usize = key("unmoved_min");

pub struct Unmoved;

/// By check (`exact`): its streak of one same passing answer while edits rework one spot.
#[derive(Default, Clone)]
pub struct UnmovedState(Vec<Streak>);

fn longest(st: &UnmovedState) -> Option<&Streak> {
    st.0.iter().max_by_key(|s| s.len)
}

impl Rule for Unmoved {
    const NAME: Signal = Signal::Unmoved;
    const KEYS: &'static [Key] = &[Key::count(
        "unmoved_min",
        4,
        "Times a check passes with the same answer while edits rework one spot that flag",
    )];
    const ABOUT: &'static str =
        "edits reworking one spot, the check after each passing with the same answer";
    const WHAT: Option<&'static str> = Some("unmoved_call");
    type State = UnmovedState;

    fn call(st: &mut UnmovedState, c: &Obs, cx: &Cx) {
        let at = st.0.iter().position(|s| s.exact == c.exact);
        let pass = !c.failed && c.args.tool == Tool::Bash && c.exit.is_some() && cx.rewriting;
        let (true, Some(out)) = (pass, c.out) else {
            if let Some(i) = at {
                st.0.remove(i);
            }
            return;
        };
        match at {
            Some(i) if st.0[i].out == out => extend(&mut st.0[i], c),
            _ => {
                if let Some(i) = at {
                    st.0.remove(i);
                }
                start(&mut st.0, c, out);
            }
        }
    }
    /// A landed change does not end a streak: the edits are what it is about.
    fn landed(_st: &mut UnmovedState) {}
    fn fires(st: &UnmovedState, cx: &Cx) -> bool {
        st.0
            .iter()
            .any(|s| s.apart && s.len >= cx.cfg.count(UNMOVED_MIN) as u32)
    }
    fn reading(st: &UnmovedState, _cx: &Cx) -> Reading {
        match longest(st) {
            Some(s) => Reading {
                value: s.len as f64,
                what: Some(s.described.to_string()),
            },
            None => Reading::default(),
        }
    }
    fn case(st: &UnmovedState, _cx: &Cx) -> Case {
        longest(st).map_or_else(Case::default, |s| Case::of(s.calls.clone()))
    }
}
