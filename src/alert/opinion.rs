//! The optional local second opinion: a local model (Ollama's `/api/chat`) asked "looping
//! without progress? yes/no + one line" on a digest of tool names, targets and exit codes,
//! never content. At most `max_in_flight` questions at once, each with a short timeout. The
//! answer may raise severity; it never vetoes a flag.

use crate::config::SecondOpinionConfig;
use crate::record::Verdict;
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Opinion {
    /// `yes`, `no`, `unclear` (an answer that is neither) or `error`.
    pub answer: String,
    /// The model's one line (or what went wrong), clipped.
    pub line: String,
    pub model: String,
}

impl Opinion {
    pub fn yes(&self) -> bool {
        self.answer == "yes"
    }
}

/// The digest the model sees: agent, counts, signals, recent tool/target/exit lines.
pub fn digest(v: &Verdict) -> String {
    let mut s = format!(
        "agent: {}\ncalls: {} ({} since the last landed change)\nflagged by: {}\n",
        v.agent.as_deref().unwrap_or("unknown"),
        v.calls,
        v.calls_since_landed,
        v.reasons
            .iter()
            .map(|r| r.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (sig, r) in &v.signals.0 {
        s += &format!("{sig}: {}\n", r.value);
        if let (Some(k), Some(w)) = (sig.what_key(), &r.what) {
            s += &format!("{k}: {w}\n");
        }
    }
    if !v.digest.is_empty() {
        s += "recent calls (tool target [exit]):\n";
        for d in &v.digest {
            s += &format!("  {d}\n");
        }
    }
    s
}

const SYSTEM: &str = "You review an AI coding agent's recent tool calls. Answer 'yes' if it is \
looping without progress, else 'no'. Reply with yes or no, then one short line of reason.";

/// Parses the model's reply: the first word decides.
pub fn parse(reply: &str) -> (String, String) {
    let line = reply.trim().lines().next().unwrap_or("").trim();
    let first: String = line
        .split(|c: char| !c.is_alphanumeric())
        .find(|w| !w.is_empty())
        .unwrap_or("")
        .to_ascii_lowercase();
    let answer = match first.as_str() {
        "yes" => "yes",
        "no" => "no",
        _ => "unclear",
    };
    (answer.into(), line.chars().take(200).collect())
}

/// Asks one question.
pub fn ask(cfg: &SecondOpinionConfig, v: &Verdict) -> Opinion {
    let url = format!("{}/api/chat", cfg.url.trim_end_matches('/'));
    let body = json!({
        "model": cfg.model,
        "stream": false,
        "options": {"temperature": 0},
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": digest(v)},
        ],
    });
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(2))
        .timeout(Duration::from_secs(cfg.timeout_secs.max(1)))
        .build();
    let err = |line: String| Opinion {
        answer: "error".into(),
        line,
        model: cfg.model.clone(),
    };
    let resp = match agent.post(&url).send_json(&body) {
        Ok(r) => r,
        Err(e) => return err(format!("POST {url}: {e}")),
    };
    let v: Value = match resp.into_json() {
        Ok(v) => v,
        Err(e) => return err(format!("POST {url}: not JSON: {e}")),
    };
    match v.pointer("/message/content").and_then(Value::as_str) {
        Some(text) => {
            let (answer, line) = parse(text);
            Opinion {
                answer,
                line,
                model: cfg.model.clone(),
            }
        }
        None => err(format!("POST {url}: no message.content in the answer")),
    }
}

/// Asks about several verdicts, at most `max_in_flight` at a time.
pub fn ask_all(cfg: &SecondOpinionConfig, vs: &[Verdict]) -> Vec<Opinion> {
    let mut out = Vec::with_capacity(vs.len());
    for chunk in vs.chunks(cfg.max_in_flight.max(1)) {
        let got: Vec<Opinion> = std::thread::scope(|s| {
            let hs: Vec<_> = chunk.iter().map(|v| s.spawn(move || ask(cfg, v))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        out.extend(got);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_word_decides() {
        assert_eq!(parse("Yes. It re-reads navbar.js.").0, "yes");
        assert_eq!(parse("no - it edits and commits").0, "no");
        assert_eq!(parse("The answer is yes").0, "unclear");
        assert_eq!(parse("").0, "unclear");
    }
}
