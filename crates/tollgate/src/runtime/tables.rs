//! A worker process's answers to `show table` and `clear table`: its stick tables are
//! shared by all its threads (`ctx::Shared::limits`), so they are read and cleared here
//! directly, each shard locked in turn for a moment; no thread is asked.

use std::sync::atomic::Ordering::Relaxed;

use crate::command::Answer;
use crate::command::table::{MAX_TABLE_ROWS, TableOp, TableReport, TableRow};
use crate::config::limit::Rate;
use crate::ctx::Shared;
use crate::limit::{StickTable, key, now_ms};

pub(crate) fn answer(shared: &Shared, op: &TableOp) -> Result<Answer, String> {
    let name = op.limit();
    let table = shared.table(name).ok_or_else(|| format!("no limit `{name}`"))?;
    match op {
        TableOp::Show { .. } => Ok(Answer::Table(report(shared, table))),
        TableOp::Clear { key: Some(text), .. } => {
            let bytes = key::parse(&table.spec().key, text)?;
            let n = table.clear(Some(&bytes));
            Ok(Answer::Text {
                text: format!("table {name}: {} cleared (key {text})", entries(n)),
            })
        }
        TableOp::Clear { key: None, .. } => {
            let n = table.clear(None);
            Ok(Answer::Text {
                text: format!("table {name}: {} cleared", entries(n)),
            })
        }
    }
}

fn entries(n: u64) -> String {
    format!("{n} {}", if n == 1 { "entry" } else { "entries" })
}

fn report(shared: &Shared, t: &StickTable) -> TableReport {
    let spec = t.spec();
    let frontend = shared
        .config
        .frontends
        .iter()
        .find(|f| f.limits.iter().any(|l| l.name == spec.name))
        .map_or_else(String::new, |f| f.name.clone());
    let now = now_ms();
    let (entries, left_out) = t.show(now, MAX_TABLE_ROWS);
    let c = &t.counters;
    TableReport {
        name: spec.name.clone(),
        frontend,
        key: spec.key.describe(),
        rate: spec.rate.map(rate_text),
        burst: spec.burst,
        concurrent: spec.concurrent,
        action: spec.action.as_str().to_string(),
        size: u64::from(spec.size),
        entries: t.entries(),
        denied: c.denied.load(Relaxed),
        tarpitted: c.tarpitted.load(Relaxed),
        evicted: c.evicted.load(Relaxed),
        expired: c.expired.load(Relaxed),
        untracked: c.untracked.load(Relaxed),
        rows: entries
            .into_iter()
            .map(|e| TableRow {
                key: key::display(&spec.key, &e.key),
                rate: e.rate,
                in_flight: e.in_flight,
                last_seen_ms: e.last_seen_ms,
                idle_ms: now.saturating_sub(e.last_seen_ms),
            })
            .collect(),
        rows_left_out: left_out,
    }
}

/// `100/s`, `6000/m`, `5/h`, else the period in ms (`10/5000ms`).
fn rate_text(r: Rate) -> String {
    let unit = match r.period.as_millis() {
        1000 => "s".to_string(),
        60_000 => "m".to_string(),
        3_600_000 => "h".to_string(),
        ms => format!("{ms}ms"),
    };
    format!("{}/{unit}", r.count)
}
