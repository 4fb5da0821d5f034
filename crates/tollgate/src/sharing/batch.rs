//! Sans-io: what one sync round sends and what its answer means.
//!
//! A round is one pipeline: for every delta not yet in Redis, `INCRBY KEY DELTA` and
//! `PEXPIRE KEY 2×period` (a period's count is read until the end of the next one), then one
//! `MGET` of the current and previous period of every key pulled. Keys are
//! `PREFIX:TABLE:KEY:PERIOD` (the prefix and the table name hold no `:`; the key is the
//! bytes between them and the last `:`, a period index in decimal).
//!
//! Invariants:
//! - [`Pending`] holds at most `max` deltas; past that the oldest periods are dropped (and
//!   counted). A delta older than the previous period is dropped too: no window reads it.
//! - a round pushes at most `max_push` deltas (the rest stay pending for the next), and
//!   removes from [`Pending`] only what it pushed, once Redis answered.
//! - a round pulls at most `max_pull` keys: first those it pushes (active here now), then
//!   the quiet ones seen here within the window, least recently pulled first.
//! - [`Recent`] holds at most `max_per_table` keys a table, each with its share: what all
//!   instances admitted per own admission between its last two reads of one period, 1..=16
//!   ([`share`]); the window scales what it counts before the next read by it.

use std::collections::HashMap;

use redis::Value;

pub(crate) use crate::limit::SyncEntry;

/// What the round needs to know of one shared table.
#[derive(Debug, Clone)]
pub(crate) struct TableSpec {
    pub name: String,
    pub period_ms: u64,
}

impl TableSpec {
    /// The period index at `now_ms` (unix milliseconds).
    pub(crate) fn period_at(&self, now_ms: u64) -> u64 {
        now_ms / self.period_ms.max(1)
    }
}

/// A pending delta's identity: table index, key, period index.
type DeltaKey = (usize, Box<[u8]>, u64);

/// Deltas not yet in Redis (a failed round's are kept for the next), per table and key.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    deltas: HashMap<DeltaKey, u64>,
    pub max: usize,
}

impl Pending {
    pub(crate) fn new(max: usize) -> Self {
        Pending {
            deltas: HashMap::new(),
            max,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.deltas.len()
    }

    pub(crate) fn add(&mut self, table: usize, entries: impl IntoIterator<Item = SyncEntry>) {
        for e in entries {
            if e.delta > 0 {
                *self.deltas.entry((table, e.key, e.period)).or_default() += e.delta;
            }
        }
    }

    /// Drops what no window reads any more (`current(table)`: its period index now), then the
    /// oldest periods while over `max`; how many deltas it dropped.
    pub(crate) fn trim(&mut self, current: impl Fn(usize) -> u64) -> u64 {
        let before = self.deltas.len();
        self.deltas
            .retain(|(table, _, period), _| period.saturating_add(1) >= current(*table));
        let over = self.deltas.len().saturating_sub(self.max);
        if over > 0 {
            // The oldest periods go first (a period's age: how far behind its table's now).
            let mut by_age: Vec<(u64, DeltaKey)> = self
                .deltas
                .keys()
                .map(|k| (current(k.0).saturating_sub(k.2), k.clone()))
                .collect();
            by_age.select_nth_unstable_by(over - 1, |a, b| b.0.cmp(&a.0));
            for (_, k) in by_age.into_iter().take(over) {
                self.deltas.remove(&k);
            }
        }
        (before - self.deltas.len()) as u64
    }

    /// A round that reached Redis pushed these.
    pub(crate) fn pushed(&mut self, keys: &[DeltaKey]) {
        for k in keys {
            self.deltas.remove(k);
        }
    }
}

/// Keys counted here within the window, per table, and what the rounds learnt of each.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    keys: Vec<HashMap<Box<[u8]>, KeyState>>,
    pub max_per_table: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyState {
    /// The last period this instance counted the key in.
    counted: u64,
    /// The round that last pulled it.
    pulled: u64,
    /// The last total read: its period and the count.
    read: Option<(u64, u64)>,
    /// All instances' admissions per own admission, ×256, from the last two reads.
    scale: u32,
}

/// One: this instance alone.
pub(crate) const SCALE_ONE: u32 = 256;
/// The most a share is believed: sixteen instances' worth per own admission.
const SCALE_MAX: u32 = 16 * SCALE_ONE;

/// What all instances admitted (`growth` of the total between two reads) per admission of
/// this one (`mine`, pushed in between), ×256, within 1..=16.
pub(crate) fn share(growth: u64, mine: u64) -> u32 {
    if mine == 0 || growth <= mine {
        return SCALE_ONE;
    }
    let scale = u128::from(growth) * u128::from(SCALE_ONE) / u128::from(mine);
    u32::try_from(scale).unwrap_or(SCALE_MAX).min(SCALE_MAX)
}

impl Recent {
    pub(crate) fn new(tables: usize, max_per_table: usize) -> Self {
        Recent {
            keys: (0..tables).map(|_| HashMap::new()).collect(),
            max_per_table,
        }
    }

    /// `table` counted `key` in `period`.
    pub(crate) fn touch(&mut self, table: usize, key: &[u8], period: u64) {
        let Some(keys) = self.keys.get_mut(table) else {
            return;
        };
        if let Some(state) = keys.get_mut(key) {
            state.counted = state.counted.max(period);
        } else if keys.len() < self.max_per_table {
            let state = KeyState {
                counted: period,
                pulled: 0,
                read: None,
                scale: SCALE_ONE,
            };
            keys.insert(key.into(), state);
        }
        // Full: a new key is pulled while it is pushed, not afterwards (and at scale one).
    }

    /// Notes a key's totals read back (`mine`: what this round pushed of its period) and
    /// returns its scale: unchanged unless this round pushed some and the last read was of
    /// the same period.
    pub(crate) fn observe(&mut self, r: &Remote, mine: u64) -> u32 {
        let Some(state) = self.keys.get_mut(r.table).and_then(|m| m.get_mut(&r.key)) else {
            return SCALE_ONE;
        };
        if let Some((period, total)) = state.read
            && period == r.period
            && mine > 0
        {
            state.scale = share(r.current.saturating_sub(total), mine);
        }
        state.read = Some((r.period, r.current));
        state.scale
    }

    /// Forgets keys counted before the previous period.
    pub(crate) fn trim(&mut self, current: impl Fn(usize) -> u64) {
        for (t, keys) in self.keys.iter_mut().enumerate() {
            let now = current(t);
            keys.retain(|_, state| state.counted.saturating_add(1) >= now);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.iter().map(HashMap::len).sum()
    }
}

/// One key whose totals a round reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pull {
    pub table: usize,
    pub key: Box<[u8]>,
    /// The period index the totals are read for (and the one before it).
    pub period: u64,
    /// What the round pushes of that period.
    pub mine: u64,
}

/// A round's pipeline and what its `MGET` answers.
pub(crate) struct Batch {
    pub pipeline: redis::Pipeline,
    pub pulls: Vec<Pull>,
    /// The deltas it pushes (removed from [`Pending`] once Redis answered).
    pub pushed: Vec<DeltaKey>,
}

impl Batch {
    pub(crate) fn is_empty(&self) -> bool {
        self.pushed.is_empty() && self.pulls.is_empty()
    }
}

/// Global totals of one key: what `set_remote` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remote {
    pub table: usize,
    pub key: Box<[u8]>,
    pub period: u64,
    /// What the round pushed of `period` (`Pull::mine`).
    pub mine: u64,
    pub current: u64,
    pub previous: u64,
}

/// `PREFIX:TABLE:KEY:PERIOD`.
pub(crate) fn redis_key(prefix: &str, table: &str, key: &[u8], period: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + table.len() + key.len() + 24);
    out.extend_from_slice(prefix.as_bytes());
    out.push(b':');
    out.extend_from_slice(table.as_bytes());
    out.push(b':');
    out.extend_from_slice(key);
    out.push(b':');
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(digits.format(period).as_bytes());
    out
}

/// Round `round`'s batch: up to `max_push` pending deltas (the others wait for the next
/// round: a batch stays small enough to be answered within the round's timeout), and the
/// keys to pull (`now(table)`: the table's period index now). Marks the pulled quiet keys
/// with `round`.
pub(crate) fn build(
    prefix: &str,
    tables: &[TableSpec],
    pending: &Pending,
    recent: &mut Recent,
    (round, max_push, max_pull): (u64, usize, usize),
    now: impl Fn(usize) -> u64,
) -> Batch {
    let mut pipeline = redis::pipe();
    let mut pulls: Vec<Pull> = Vec::new();
    let mut pulled: std::collections::HashSet<(usize, &[u8])> = std::collections::HashSet::new();
    let mut pushed = Vec::new();
    for (id, delta) in pending.deltas.iter().take(max_push) {
        let (table, key, period) = id;
        let Some(spec) = tables.get(*table) else {
            continue;
        };
        pushed.push(id.clone());
        let k = redis_key(prefix, &spec.name, key, *period);
        pipeline.cmd("INCRBY").arg(&k).arg(*delta).ignore();
        pipeline
            .cmd("PEXPIRE")
            .arg(&k)
            .arg(spec.period_ms.saturating_mul(2))
            .ignore();
        if pulls.len() < max_pull && pulled.insert((*table, key)) {
            let period = now(*table);
            let mine = pending.deltas.get(&(*table, key.clone(), period)).copied().unwrap_or(0);
            pulls.push(Pull {
                table: *table,
                key: key.clone(),
                period,
                mine,
            });
        }
    }
    // Quiet keys, least recently pulled first, while the bound allows.
    let room = max_pull.saturating_sub(pulls.len());
    if room > 0 {
        let mut quiet: Vec<(u64, usize, &[u8])> = Vec::new();
        for (t, keys) in recent.keys.iter().enumerate() {
            for (key, state) in keys {
                if !pulled.contains(&(t, &key[..])) {
                    quiet.push((state.pulled, t, key));
                }
            }
        }
        if quiet.len() > room {
            quiet.select_nth_unstable_by_key(room, |(last_pull, _, _)| *last_pull);
            quiet.truncate(room);
        }
        let chosen: Vec<(usize, Box<[u8]>)> = quiet.into_iter().map(|(_, t, k)| (t, k.into())).collect();
        for (table, key) in chosen {
            if let Some(state) = recent.keys.get_mut(table).and_then(|m| m.get_mut(&key)) {
                state.pulled = round;
            }
            pulls.push(Pull {
                period: now(table),
                table,
                key,
                mine: 0,
            });
        }
    }
    if !pulls.is_empty() {
        let mget = pipeline.cmd("MGET");
        for p in &pulls {
            let name = tables.get(p.table).map_or("", |s| s.name.as_str());
            mget.arg(redis_key(prefix, name, &p.key, p.period)).arg(redis_key(
                prefix,
                name,
                &p.key,
                p.period.saturating_sub(1),
            ));
        }
    }
    Batch {
        pipeline,
        pulls,
        pushed,
    }
}

/// The totals in a round's answer (the non-ignored replies: the `MGET`'s, if any).
pub(crate) fn parse(pulls: Vec<Pull>, reply: Vec<Value>) -> Result<Vec<Remote>, String> {
    if pulls.is_empty() {
        return Ok(Vec::new());
    }
    let mut replies = reply.into_iter();
    let Some(Value::Array(values)) = replies.next() else {
        return Err("the MGET reply is not an array".into());
    };
    if values.len() != pulls.len() * 2 {
        return Err(format!(
            "the MGET reply has {} values for {} keys",
            values.len(),
            pulls.len() * 2
        ));
    }
    let mut values = values.into_iter();
    let mut out = Vec::with_capacity(pulls.len());
    for p in pulls {
        let (Some(current), Some(previous)) = (values.next(), values.next()) else {
            return Err("the MGET reply ended early".into());
        };
        out.push(Remote {
            table: p.table,
            key: p.key,
            period: p.period,
            mine: p.mine,
            current: count(current)?,
            previous: count(previous)?,
        });
    }
    Ok(out)
}

/// A counter's value: absent (expired, never written) is 0.
fn count(v: Value) -> Result<u64, String> {
    match v {
        Value::Nil => Ok(0),
        Value::Int(n) => Ok(u64::try_from(n).unwrap_or(0)),
        Value::BulkString(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .map(|n| u64::try_from(n).unwrap_or(0))
            .ok_or_else(|| format!("a counter holds `{}`, not an integer", String::from_utf8_lossy(&b))),
        other => Err(format!("a counter reads back as {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    fn entry(key: &str, period: u64, delta: u64) -> SyncEntry {
        SyncEntry {
            key: key.as_bytes().into(),
            period,
            delta,
        }
    }

    fn tables() -> Vec<TableSpec> {
        vec![
            TableSpec {
                name: "per_ip".into(),
                period_ms: 1000,
            },
            TableSpec {
                name: "per_user".into(),
                period_ms: 60_000,
            },
        ]
    }

    /// The commands of a pipeline as text, one per line.
    fn commands(p: &redis::Pipeline) -> Vec<String> {
        p.cmd_iter()
            .map(|c| {
                c.args_iter()
                    .map(|a| match a {
                        redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => "<cursor>".into(),
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    #[test]
    fn keys_are_prefix_table_key_period() {
        assert_eq!(
            redis_key("tollgate", "per_ip", b"2001:db8::1", 1_764_620_000),
            b"tollgate:per_ip:2001:db8::1:1764620000"
        );
        assert_eq!(tables()[1].period_at(120_001), 2);
    }

    #[test]
    fn a_batch_pushes_every_delta_with_its_expiry_and_reads_both_periods_back() {
        let mut pending = Pending::new(100);
        pending.add(
            0,
            [entry("10.0.0.1", 7, 3), entry("10.0.0.1", 7, 2), entry("zero", 7, 0)],
        );
        pending.add(1, [entry("alice", 1, 1)]);
        let mut recent = Recent::new(2, 100);
        let batch = build("tg", &tables(), &pending, &mut recent, (1, 100, 100), |t| [8, 1][t]);
        assert_eq!(batch.pushed.len(), 2, "a zero delta is not pushed");
        let mut cmds = commands(&batch.pipeline);
        let mget = cmds.pop().unwrap();
        cmds.sort();
        assert_eq!(
            cmds,
            [
                "INCRBY tg:per_ip:10.0.0.1:7 5",
                "INCRBY tg:per_user:alice:1 1",
                "PEXPIRE tg:per_ip:10.0.0.1:7 2000",
                "PEXPIRE tg:per_user:alice:1 120000",
            ]
        );
        assert!(mget.starts_with("MGET "), "{mget}");
        for pair in [
            "tg:per_ip:10.0.0.1:8 tg:per_ip:10.0.0.1:7",
            "tg:per_user:alice:1 tg:per_user:alice:0",
        ] {
            assert!(mget.contains(pair), "{mget}");
        }
        assert_eq!(batch.pulls.len(), 2);
    }

    #[test]
    fn a_batch_pushes_at_most_its_bound_and_the_rest_waits() {
        let mut pending = Pending::new(100);
        pending.add(0, (0..5).map(|i| entry(&format!("k{i}"), 3, 1)));
        let mut recent = Recent::new(1, 100);
        let specs = &tables()[..1];
        let first = build("p", specs, &pending, &mut recent, (1, 3, 100), |_| 3);
        assert_eq!(first.pushed.len(), 3);
        pending.pushed(&first.pushed);
        assert_eq!(pending.len(), 2);
        let second = build("p", specs, &pending, &mut recent, (2, 3, 100), |_| 3);
        pending.pushed(&second.pushed);
        assert_eq!(pending.len(), 0);
    }

    #[test]
    fn quiet_keys_are_pulled_least_recently_pulled_first_within_the_bound() {
        let pending = Pending::new(100);
        let mut recent = Recent::new(1, 100);
        for k in ["a", "b", "c"] {
            recent.touch(0, k.as_bytes(), 5);
        }
        let specs = &tables()[..1];
        let first = build("p", specs, &pending, &mut recent, (1, 100, 2), |_| 5);
        assert_eq!(first.pulls.len(), 2, "bounded");
        let second = build("p", specs, &pending, &mut recent, (2, 100, 2), |_| 5);
        let left: Vec<&[u8]> = second.pulls.iter().map(|p| &p.key[..]).collect();
        let missed = first
            .pulls
            .iter()
            .map(|p| &p.key[..])
            .chain(left.iter().copied())
            .collect::<std::collections::HashSet<_>>();
        assert_eq!(missed.len(), 3, "the key the first round left out comes next: {left:?}");
        // A key counted two periods ago is no longer read by any window.
        recent.trim(|_| 7);
        assert_eq!(recent.len(), 0);
        // Pushed keys are pulled first, whatever the quiet ones.
        let mut pending = Pending::new(100);
        pending.add(0, [entry("hot", 9, 1)]);
        recent.touch(0, b"quiet", 9);
        let b = build("p", specs, &pending, &mut recent, (3, 100, 1), |_| 9);
        assert_eq!(b.pulls.iter().map(|p| &p.key[..]).collect::<Vec<_>>(), [b"hot"]);
    }

    #[test]
    fn pending_drops_periods_no_window_reads_then_the_oldest_past_its_bound() {
        let mut pending = Pending::new(3);
        pending.add(0, [entry("a", 10, 1), entry("b", 9, 1), entry("c", 8, 1)]);
        assert_eq!(pending.trim(|_| 10), 1, "period 8 is before the previous one");
        pending.add(0, [entry("d", 10, 1), entry("e", 10, 1)]);
        assert_eq!(pending.len(), 4);
        assert_eq!(pending.trim(|_| 10), 1, "over the bound: the oldest (b at 9) goes");
        assert!(pending.deltas.keys().all(|(_, _, p)| *p == 10));
        pending.add(0, [entry("f", 10, 1)]);
        assert_eq!(pending.trim(|_| 10), 1);
        assert_eq!(pending.len(), 3);
    }

    #[test]
    fn replies_become_totals_and_malformed_ones_are_refused() {
        let pulls = vec![
            Pull {
                table: 0,
                key: b"k".as_slice().into(),
                period: 5,
                mine: 0,
            },
            Pull {
                table: 1,
                key: b"u".as_slice().into(),
                period: 2,
                mine: 0,
            },
        ];
        let reply = vec![Value::Array(vec![
            Value::BulkString(b"12".to_vec()),
            Value::Nil,
            Value::Int(3),
            Value::BulkString(b"40".to_vec()),
        ])];
        let got = parse(pulls.clone(), reply).unwrap();
        assert_eq!((got[0].current, got[0].previous, got[0].period), (12, 0, 5));
        assert_eq!((got[1].table, got[1].current, got[1].previous), (1, 3, 40));
        assert!(parse(pulls.clone(), vec![Value::Array(vec![Value::Nil])]).is_err());
        assert!(parse(pulls.clone(), vec![Value::Okay]).is_err());
        let text = vec![Value::Array(vec![
            Value::BulkString(b"x".to_vec()),
            Value::Nil,
            Value::Nil,
            Value::Nil,
        ])];
        assert!(parse(pulls, text).is_err());
        assert_eq!(parse(Vec::new(), Vec::new()), Ok(Vec::new()));
    }

    #[test]
    fn the_share_is_what_every_instance_admitted_per_own_admission() {
        assert_eq!(share(20, 10), 512);
        assert_eq!(share(10, 10), SCALE_ONE, "alone");
        assert_eq!(share(3, 10), SCALE_ONE, "a restarted Redis: the total fell");
        assert_eq!(share(5, 0), SCALE_ONE, "nothing pushed: nothing to scale");
        assert_eq!(share(1000, 1), SCALE_MAX, "bounded");
        let mut recent = Recent::new(1, 10);
        recent.touch(0, b"k", 7);
        let read = |current, mine| Remote {
            table: 0,
            key: b"k".as_slice().into(),
            period: 7,
            mine,
            current,
            previous: 0,
        };
        assert_eq!(
            recent.observe(&read(10, 10), 10),
            SCALE_ONE,
            "first read: nothing to compare"
        );
        assert_eq!(recent.observe(&read(40, 10), 10), 768, "30 more, 10 of them ours");
        assert_eq!(recent.observe(&read(45, 0), 0), 768, "a quiet round keeps the share");
        let next = Remote {
            period: 8,
            ..read(4, 2)
        };
        assert_eq!(
            recent.observe(&next, 2),
            768,
            "a new period: compared from the next read"
        );
        let unknown = Remote {
            key: b"other".as_slice().into(),
            ..read(4, 2)
        };
        assert_eq!(recent.observe(&unknown, 2), SCALE_ONE);
    }
}
