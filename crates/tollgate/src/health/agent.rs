//! HAProxy's agent protocol, sans-io: one line from the server, words separated by spaces,
//! tabs or commas; anything after `#` is a description.
//!
//! - `up` / `down` (also `stopped`, `fail`): the server is up / down, whatever checks say
//!   (`up` only lifts the agent's own `down`; the checks still decide from there);
//! - `ready` / `drain` / `maint`: `drain` makes the effective weight 0 (no new connections,
//!   established ones finish) and `maint` marks the server down, both without touching the
//!   operator's admin state; `ready` lifts both;
//! - `N%`: the effective weight is N % of the configured one (0..=256).
//!
//! Unknown words are ignored (newer agents speak more than we know). An agent that cannot be
//! reached changes nothing: reachability is the checks' business.

/// What one reply asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct AgentReply {
    pub percent: Option<u32>,
    pub drain: Option<bool>,
    pub maint: Option<bool>,
    pub down: Option<bool>,
}

/// The longest line read from an agent.
pub(crate) const MAX_LINE: usize = 512;

pub(crate) fn parse(line: &[u8]) -> AgentReply {
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.split(|b| *b == b'#').next().unwrap_or_default();
    let mut reply = AgentReply::default();
    let words = line
        .split(|b| matches!(b, b' ' | b'\t' | b',' | b'\r'))
        .filter(|w| !w.is_empty());
    for word in words {
        let lower = word.to_ascii_lowercase();
        match lower.as_slice() {
            b"up" => reply.down = Some(false),
            b"down" | b"stopped" | b"fail" => reply.down = Some(true),
            b"ready" => (reply.drain, reply.maint) = (Some(false), Some(false)),
            b"drain" => reply.drain = Some(true),
            b"maint" => reply.maint = Some(true),
            [digits @ .., b'%'] => {
                if let Some(n) = std::str::from_utf8(digits).ok().and_then(|d| d.parse::<u32>().ok())
                    && n <= 256
                {
                    reply.percent = Some(n);
                }
            }
            _ => {}
        }
    }
    reply
}

/// What the agent has said so far (each reply changes only what it names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AgentState {
    percent: u32,
    drain: bool,
    maint: bool,
    down: bool,
}

impl Default for AgentState {
    fn default() -> Self {
        AgentState {
            percent: 100,
            drain: false,
            maint: false,
            down: false,
        }
    }
}

impl AgentState {
    /// The state a previous generation left (its percentage; drain shows as 0 %).
    pub(crate) fn with_percent(percent: u32) -> Self {
        AgentState {
            percent,
            ..AgentState::default()
        }
    }

    pub(crate) fn apply(&mut self, reply: AgentReply) {
        self.percent = reply.percent.unwrap_or(self.percent);
        self.drain = reply.drain.unwrap_or(self.drain);
        self.maint = reply.maint.unwrap_or(self.maint);
        self.down = reply.down.unwrap_or(self.down);
    }

    /// The agent's factor on the configured weight, percent (0 while draining).
    pub(crate) fn weight_percent(&self) -> u32 {
        if self.drain { 0 } else { self.percent }
    }

    /// The agent holds the server down (`down`, `stopped`, `fail` or `maint`).
    pub(crate) fn holds_down(&self) -> bool {
        self.down || self.maint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_after(lines: &[&str]) -> AgentState {
        let mut s = AgentState::default();
        for l in lines {
            s.apply(parse(l.as_bytes()));
        }
        s
    }

    #[test]
    fn words_combine_and_persist() {
        assert_eq!(state_after(&["75%\n"]).weight_percent(), 75);
        assert_eq!(state_after(&["up 50%"]).weight_percent(), 50);
        let drained = state_after(&["50%", "drain"]);
        assert_eq!(drained.weight_percent(), 0);
        assert!(!drained.holds_down());
        assert_eq!(state_after(&["50%", "drain", "ready"]).weight_percent(), 50);
        assert!(state_after(&["maint"]).holds_down());
        assert!(!state_after(&["maint", "ready"]).holds_down());
        assert!(state_after(&["down"]).holds_down());
        assert!(state_after(&["stopped"]).holds_down() && state_after(&["FAIL"]).holds_down());
        assert!(!state_after(&["down", "up"]).holds_down());
        assert!(state_after(&["maint", "up"]).holds_down(), "up does not lift maint");
    }

    #[test]
    fn descriptions_and_unknown_words_are_ignored() {
        assert_eq!(
            parse(b"up # 80% busy\n"),
            AgentReply {
                down: Some(false),
                ..Default::default()
            }
        );
        assert_eq!(
            parse(b"maxconn:30, 40%"),
            AgentReply {
                percent: Some(40),
                ..Default::default()
            }
        );
        assert_eq!(parse(b"300%").percent, None);
        assert_eq!(parse(b"").percent, None);
        assert_eq!(
            parse(b"\tdrain,\r\n"),
            AgentReply {
                drain: Some(true),
                ..Default::default()
            }
        );
    }
}
