//! Stick tables, trackers and the deny rules that read their counters, as
//! `[[frontend.limit]]`s.

use std::collections::BTreeMap;

use super::super::cond::{Acls, Conj, Ctx, Test};
use super::super::emit::{Frontend, Table, q};
use super::super::lexer::Line;
use super::rules::rule_condition;
use super::values::{duration, size, time_ms};
use super::{Builder, View};

impl Builder<'_, '_> {
    /// Stick tables, trackers and the `deny if { sc_http_req_rate(N) gt X }` rules that
    /// read them become `[[frontend.limit]]`s.
    pub(super) fn limits(&mut self, v: &View<'_>, acls: &Acls, ctx: &Ctx<'_>, fe: &mut Frontend, head: &mut Table) {
        // slot → (key, table name, line)
        let mut trackers: BTreeMap<u8, (String, String, &Line)> = BTreeMap::new();
        let tracking = |l: &Line| -> Option<(u8, usize)> {
            let (i, w) = l.words.iter().enumerate().find(|(_, w)| w.starts_with("track-sc"))?;
            let slot = w.trim_start_matches("track-sc").parse().ok()?;
            Some((slot, i))
        };
        for l in v.all("http-request").chain(v.all("tcp-request")).collect::<Vec<_>>() {
            let Some((slot, i)) = tracking(l) else { continue };
            let expr = l.word(i + 1);
            let table = match (l.word(i + 2), l.word(i + 3)) {
                ("table", t) => t.to_string(),
                _ => v.name.clone(),
            };
            let key = match expr {
                "src" => Some("source".to_string()),
                "path" => Some("path".to_string()),
                "ssl_fc_sni" | "req.ssl_sni" | "req_ssl_sni" => Some("sni".to_string()),
                e => e
                    .strip_prefix("req.hdr(")
                    .or_else(|| e.strip_prefix("hdr("))
                    .and_then(|h| h.strip_suffix(')'))
                    .map(|h| format!("header:{}", h.to_ascii_lowercase())),
            };
            // `if { req.hdr(X) -m found }` on a tracker of X is what tollgate does anyway: a
            // request without the header is not counted.
            let only_when_present = key.as_deref().and_then(|k| k.strip_prefix("header:")).is_some_and(|h| {
                let tail: Vec<&str> = l.words.iter().skip_while(|w| *w != "if").map(String::as_str).collect();
                tail.len() == 6
                    && tail
                        .get(1..)
                        .is_some_and(|t| t.first() == Some(&"{") && t.get(2..) == Some(&["-m", "found", "}"][..]))
                    && tail.get(2).is_some_and(|f| {
                        f.eq_ignore_ascii_case(&format!("req.hdr({h})")) || f.eq_ignore_ascii_case(&format!("hdr({h})"))
                    })
            });
            let conditional = l.words.iter().any(|w| w == "if" || w == "unless") && !only_when_present;
            match key {
                Some(k) if !conditional => {
                    trackers.insert(slot, (k, table, l));
                }
                _ => self.drop_line(
                    head,
                    l,
                    "only an unconditional tracker of src, path, the SNI or a request header becomes a limit key",
                ),
            }
        }
        if trackers.is_empty() {
            return;
        }
        let tables: Vec<&Line> = self
            .sections
            .iter()
            .flat_map(|s| s.lines.iter())
            .filter(|l| l.word(0) == "stick-table")
            .collect();
        let owner_of = |l: &Line| {
            self.sections
                .iter()
                .find(|s| s.lines.iter().any(|x| std::ptr::eq(x, l)))
                .map(|s| s.name.clone())
        };
        let mut made: BTreeMap<String, Table> = BTreeMap::new();
        let rules: Vec<&Line> = v.all("http-request").chain(v.all("tcp-request")).collect();
        for l in rules {
            let start = if l.word(0) == "tcp-request" { 2 } else { 1 };
            let action = l.word(start);
            if !matches!(action, "deny" | "tarpit" | "reject" | "silent-drop") {
                continue;
            }
            let Ok((words, dnf)) = rule_condition(l.words.get(start..).unwrap_or_default(), acls, ctx) else {
                continue;
            };
            let counter = match dnf.0.as_slice() {
                [Conj { pos, neg }] if neg.is_empty() && pos.len() == 1 => match pos.first() {
                    Some(Test::Counter(c)) => c.clone(),
                    _ => continue,
                },
                _ if dnf
                    .0
                    .iter()
                    .flat_map(Conj::tests)
                    .any(|t| matches!(t, Test::Counter(_))) =>
                {
                    self.drop_line(head, l, "a limit with other conditions besides the counter has no equivalent (a limit counts every request of the frontend, or of routes naming it)");
                    continue;
                }
                _ => continue,
            };
            let Some((key, table_name, track_line)) = trackers.get(&counter.slot).cloned() else {
                self.drop_line(head, l, "the counter reads a slot no `track-sc` line fills");
                continue;
            };
            let table_name = counter.table.clone().unwrap_or(table_name);
            let Some(table) = tables
                .iter()
                .find(|t| owner_of(t).as_deref() == Some(table_name.as_str()))
            else {
                self.drop_line(head, l, &format!("no `stick-table` in `{table_name}`"));
                continue;
            };
            let limit = made
                .entry(format!("{}-{}", table_name, counter.slot))
                .or_insert_with(|| {
                    let mut t = Table::default();
                    let name: String = format!("{}-sc{}", table_name, counter.slot)
                        .chars()
                        .map(|c| {
                            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                                c
                            } else {
                                '_'
                            }
                        })
                        .collect();
                    t.set("name", q(&name), &table.at());
                    t.set("key", q(&key), &track_line.at());
                    t
                });
            self.use_line(track_line);
            self.use_line(table);
            let store = table
                .words
                .iter()
                .position(|w| w == "store")
                .and_then(|i| table.words.get(i + 1))
                .cloned()
                .unwrap_or_default();
            let period = |what: &str| {
                store.split(',').find_map(|s| {
                    s.strip_prefix(&format!("{what}("))
                        .and_then(|p| p.strip_suffix(')'))
                        .and_then(|p| time_ms(p).ok())
                })
            };
            match counter.what.as_str() {
                "http_req_rate" | "conn_rate" => {
                    let Some(p) = period(&counter.what) else {
                        self.drop_line(head, l, &format!("the table does not store `{}`", counter.what));
                        continue;
                    };
                    limit.set("rate", q(&format!("{}/{}", counter.max, duration(p))), &l.at());
                    if let Some(size_at) = table.words.iter().position(|w| w == "size")
                        && let Some(n) = table.words.get(size_at + 1).and_then(|s| size(s).ok())
                    {
                        limit.set("size", n.to_string(), &table.at());
                    }
                    if let Some(e) = table
                        .words
                        .iter()
                        .position(|w| w == "expire")
                        .and_then(|i| table.words.get(i + 1))
                        .and_then(|e| time_ms(e).ok())
                    {
                        limit.set("expire", q(&duration(e.max(2 * p))), &table.at());
                        if e < 2 * p {
                            self.note(table, "`expire` raised to two periods of the rate: tollgate's sliding window reads the previous period");
                        }
                    }
                }
                "conn_cur" => limit.set("concurrent", counter.max.to_string(), &l.at()),
                other => {
                    self.drop_line(
                        head,
                        l,
                        &format!(
                            "`{other}` has no limit equivalent (request rate, connection rate and concurrency only)"
                        ),
                    );
                    continue;
                }
            }
            let status = words
                .iter()
                .position(|w| w == "deny_status")
                .and_then(|i| words.get(i + 1))
                .cloned();
            let act = match (action, status.as_deref()) {
                ("deny", Some("429")) if v.http => "429",
                ("deny", _) if v.http => {
                    self.note(
                        l,
                        "an over-limit request gets 429 Too Many Requests (with Retry-After), not this status",
                    );
                    "429"
                }
                ("tarpit", _) => {
                    if let Some(t) = &self.g.tarpit {
                        limit.set("tarpit", q(t), &l.at());
                    }
                    "tarpit"
                }
                _ => "close",
            };
            limit.set("action", q(act), &l.at());
            self.note(l, "a limit: tollgate counts only admitted requests, so a client over the rate gets exactly the rate; HAProxy's counter also counts refused ones");
        }
        fe.limits = made.into_values().collect();
    }
}
