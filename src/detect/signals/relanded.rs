//! `relanded`: one change the session already landed (the same tool and arguments) lands again
//! `relanded_min` times with no new change since: a fix re-sent after the harness (or the agent)
//! put the file back, the same `edit` appending its block once more. Each says it landed; none
//! changes anything the session had not changed already, so the agent is making one old change
//! over and over. Counted per change: a file rebuilt from the same lines with one new line each
//! time lands each old line again once per round, and the new line is progress that ends the
//! count. An edit that undoes an earlier one is no landing of either kind (see `progress`).

use super::thresholds::{key, Key};
use super::{Case, Cx, Rule};
use crate::detect::region::Obs;
use crate::record::{CallRef, Reading, Signal};

const RELANDED_MIN: usize = key("relanded_min");

/// The calls kept to make the case.
const CASE_CALLS: usize = 12;

pub struct Relanded;

#[derive(Default, Clone)]
pub struct RelandedState {
    /// Changes landed again since the last new one: (identity, times landed again).
    count: Vec<(u64, u32)>,
    /// The latest of them, oldest first.
    calls: Vec<CallRef>,
    /// The latest one, described.
    described: Option<Box<str>>,
}

fn most(st: &RelandedState) -> u32 {
    st.count.iter().map(|(_, n)| *n).max().unwrap_or(0)
}

impl Rule for Relanded {
    const NAME: Signal = Signal::Relanded;
    const KEYS: &'static [Key] = &[Key::count(
        "relanded_min",
        3,
        "Times one change already landed lands again, no new change since, that flag",
    )];
    const ABOUT: &'static str = "one change already landed, landed again and again, no new change since";
    const WHAT: Option<&'static str> = Some("relanded_call");
    type State = RelandedState;

    fn call(st: &mut RelandedState, c: &Obs, _cx: &Cx) {
        if !c.relanded {
            return;
        }
        super::find_or_add(&mut st.count, |(k, _)| *k == c.exact, || (c.exact, 0)).1 += 1;
        if st.calls.len() == CASE_CALLS {
            st.calls.remove(0);
        }
        st.calls.push(c.at());
        st.described = Some(c.describe());
    }
    fn fires(st: &RelandedState, cx: &Cx) -> bool {
        most(st) >= cx.cfg.count(RELANDED_MIN) as u32
    }
    fn reading(st: &RelandedState, _cx: &Cx) -> Reading {
        Reading {
            value: most(st) as f64,
            what: st.described.as_deref().map(String::from),
        }
    }
    fn case(st: &RelandedState, _cx: &Cx) -> Case {
        Case::of(st.calls.clone())
    }
}
