//! The master's side of `show stat|sessions|errors|budgets|certs`: the query checked against the
//! current config before any worker is asked, and the generations' answers folded into one
//! report (generations oldest first; error captures of every generation merged, oldest
//! first; at most `MAX_SESSIONS` sessions in all, the rest counted).

use crate::command::show::{GenerationShow, MAX_SESSIONS, Query, ShowReport, bound_errors};
use crate::config::Config;

/// Why `query` names something the config does not have.
pub(crate) fn validate(config: &Config, query: &Query) -> Result<(), String> {
    let (frontend, backend) = match query {
        Query::Stat { frontend, backend } => (frontend.as_deref(), backend.as_deref()),
        Query::Sessions { backend, .. } => (None, backend.as_deref()),
        Query::Errors | Query::Budgets => (None, None),
        Query::Certs { frontend } => {
            if let Some(f) = frontend
                && config.frontends.iter().any(|fe| fe.name == *f && fe.tls.is_none())
            {
                return Err(format!("frontend `{f}` does not terminate TLS"));
            }
            (frontend.as_deref(), None)
        }
    };
    if let Some(f) = frontend
        && !config.frontends.iter().any(|fe| fe.name == f)
    {
        return Err(format!("no frontend `{f}`"));
    }
    if let Some(b) = backend
        && config.backend(b).is_none()
    {
        return Err(format!("no backend `{b}`"));
    }
    Ok(())
}

/// One report from every generation's answer.
pub(crate) fn merge(mut generations: Vec<GenerationShow>, what: &str) -> ShowReport {
    generations.sort_by_key(|g| g.generation);
    let mut report = ShowReport {
        what: what.to_string(),
        ..ShowReport::default()
    };
    for g in &mut generations {
        for e in &mut g.errors {
            e.generation = g.generation;
        }
        report.errors.append(&mut g.errors);
    }
    report.errors.sort_by_key(|e| e.time_ms);
    report.errors_left_out =
        generations.iter().map(|g| g.errors_left_out).sum::<u64>() + bound_errors(&mut report.errors);
    let mut listed = 0usize;
    for g in &mut generations {
        let room = MAX_SESSIONS.saturating_sub(listed);
        if g.sessions.len() > room {
            g.sessions_left_out += (g.sessions.len() - room) as u64;
            g.sessions.truncate(room);
        }
        listed += g.sessions.len();
        report.sessions_left_out += g.sessions_left_out;
    }
    report.generations = generations;
    report
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing)]
    use super::*;
    use crate::command::show::{ErrorCapture, MAX_ERRORS_TEXT, SessionView};

    #[test]
    fn generations_fold_into_one_bounded_report() {
        let capture = |t| ErrorCapture {
            time_ms: t,
            ..Default::default()
        };
        let sessions = |n| vec![SessionView::default(); n];
        let newer = GenerationShow {
            generation: 3,
            errors: vec![capture(5)],
            sessions: sessions(MAX_SESSIONS - 1),
            ..Default::default()
        };
        let older = GenerationShow {
            generation: 2,
            errors: vec![capture(1), capture(9)],
            sessions: sessions(3),
            sessions_left_out: 1,
            ..Default::default()
        };
        let r = merge(vec![newer, older], "errors");
        assert_eq!(r.generations[0].generation, 2);
        let times: Vec<(u64, u64)> = r.errors.iter().map(|e| (e.time_ms, e.generation)).collect();
        assert_eq!(times, [(1, 2), (5, 3), (9, 2)]);
        let listed: usize = r.generations.iter().map(|g| g.sessions.len()).sum();
        assert_eq!((listed, r.sessions_left_out), (MAX_SESSIONS, 3));
        // Captures beyond the text bound go, oldest first.
        let big = |t| ErrorCapture {
            time_ms: t,
            escaped: "x".repeat(MAX_ERRORS_TEXT / 2),
            ..Default::default()
        };
        let g = GenerationShow {
            generation: 1,
            errors: vec![big(1), big(2), big(3)],
            ..Default::default()
        };
        let r = merge(vec![g], "errors");
        let kept: Vec<u64> = r.errors.iter().map(|e| e.time_ms).collect();
        assert_eq!((kept, r.errors_left_out), (vec![2, 3], 1));
    }
}
