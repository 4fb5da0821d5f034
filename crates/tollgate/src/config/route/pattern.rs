//! Regular expressions of the config: compiled once at load with the `regex` crate's
//! linear-time engine (`regex-automata`'s meta regex: no backtracking blow-up whatever
//! the pattern or the input), each bounded in compiled size, searched with a per-thread
//! cache so that no search takes a lock another core may hold or allocates after warm-up.
//!
//! Invariant: a [`Regex`]'s `id` is unique in the process and shared only by its clones
//! (same compiled program), so a cache made for one id is valid for every regex with it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use regex_automata::{Input, MatchKind, PatternID, PatternSet, meta};

/// The most one compiled regex may take (its NFA); bigger ones are refused at load.
pub const MAX_REGEX_SIZE: usize = 1 << 20;
/// The most a frontend's path regexes may take together.
pub(super) const MAX_SET_SIZE: usize = 64 << 20;
/// Search caches one thread keeps before dropping them all (old generations' regexes).
const MAX_CACHES_PER_THREAD: usize = 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One compiled regex, or a set of them searched at once (`which`).
#[derive(Debug, Clone)]
pub struct Regex {
    id: u64,
    re: meta::Regex,
    /// As written (for one pattern; a set joins them).
    text: String,
}

/// A thread's search state for one regex: its cache and, for a set, which patterns matched.
pub(super) struct Slot {
    cache: meta::Cache,
    hits: PatternSet,
}

type Slots = RefCell<std::collections::HashMap<u64, Slot, foldhash::fast::FixedState>>;

thread_local! {
    /// Single regexes (header values); kept apart from the sets so that a header regex can
    /// be searched while a request's path set search is held.
    static CACHES: Slots = const { RefCell::new(std::collections::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))) };
    static SETS: Slots = const { RefCell::new(std::collections::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))) };
}

impl Regex {
    /// Compiles one pattern; the error says why it was refused (syntax, or too big).
    pub fn new(pattern: &str) -> Result<Regex, String> {
        Self::build(&[pattern], MatchKind::LeftmostFirst, MAX_REGEX_SIZE)
    }

    /// Compiles `patterns` as one set (`which` tells which of them match).
    pub(super) fn set(patterns: &[String]) -> Result<Regex, String> {
        Self::build(patterns, MatchKind::All, MAX_SET_SIZE)
    }

    fn build<P: AsRef<str>>(patterns: &[P], kind: MatchKind, limit: usize) -> Result<Regex, String> {
        let config = meta::Config::new().match_kind(kind).nfa_size_limit(Some(limit));
        let re = meta::Builder::new()
            .configure(config)
            .build_many(patterns)
            .map_err(|e| crate::http::path_regex::refusal(&e))?;
        let text = patterns.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(" | ");
        Ok(Regex {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            re,
            text,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it matches anywhere in `hay`.
    pub fn is_match(&self, hay: &[u8]) -> bool {
        with_slot(&CACHES, self, |slot| match slot {
            Some(slot) => self
                .re
                .search_half_with(&mut slot.cache, &Input::new(hay).earliest(true))
                .is_some(),
            None => self.re.is_match(hay),
        })
    }

    /// Runs `f` with a search of this set that runs (once, at its first `hits`) with this
    /// thread's cache for it.
    pub(super) fn with_set<R>(&self, f: impl FnOnce(&mut SetSearch<'_>) -> R) -> R {
        with_slot(&SETS, self, |slot| {
            f(&mut SetSearch {
                re: self,
                slot,
                owned: None,
                done: false,
            })
        })
    }
}

/// One request's search of a set: run at most once, on first use.
pub(super) struct SetSearch<'s> {
    re: &'s Regex,
    slot: Option<&'s mut Slot>,
    /// Only when the thread's slot was unavailable.
    owned: Option<PatternSet>,
    done: bool,
}

impl SetSearch<'_> {
    /// Which patterns match `hay` (the same `hay` at every call of one search).
    pub(super) fn hits(&mut self, hay: &[u8]) -> &PatternSet {
        let re = &self.re.re;
        if !self.done {
            self.done = true;
            match self.slot.as_deref_mut() {
                Some(slot) => {
                    slot.hits.clear();
                    re.which_overlapping_matches_with(&mut slot.cache, &Input::new(hay), &mut slot.hits);
                }
                None => {
                    let mut hits = PatternSet::new(re.pattern_len());
                    re.which_overlapping_matches(&Input::new(hay), &mut hits);
                    self.owned = Some(hits);
                }
            }
        }
        match (&self.slot, &self.owned) {
            (Some(slot), _) => &slot.hits,
            (None, Some(owned)) => owned,
            (None, None) => &EMPTY,
        }
    }
}

static EMPTY: std::sync::LazyLock<PatternSet> = std::sync::LazyLock::new(|| PatternSet::new(0));

/// Pattern `i` of a set's result.
pub(super) fn hit(hits: &PatternSet, i: usize) -> bool {
    PatternID::new(i).is_ok_and(|p| hits.contains(p))
}

/// This thread's slot for `re` (made at its first search here). `None` only if the thread's
/// caches are already borrowed (never: searches do not nest); the caller then searches
/// with the regex's own pool.
fn with_slot<R>(slots: &'static std::thread::LocalKey<Slots>, re: &Regex, f: impl FnOnce(Option<&mut Slot>) -> R) -> R {
    slots.with(|caches| {
        let Ok(mut caches) = caches.try_borrow_mut() else {
            return f(None);
        };
        if caches.len() >= MAX_CACHES_PER_THREAD && !caches.contains_key(&re.id) {
            caches.clear();
        }
        let slot = caches.entry(re.id).or_insert_with(|| Slot {
            cache: re.re.create_cache(),
            hits: PatternSet::new(re.re.pattern_len()),
        });
        f(Some(slot))
    })
}
