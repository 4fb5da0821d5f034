//! The regexes of `rewrite_path`: `regex-automata`'s meta regex (the `regex` crate's
//! linear-time engine: no backtracking blow-up whatever the pattern or the path), compiled
//! at load with a size bound, searched with a per-thread cache and capture slots, so that
//! no search takes a lock another core may hold, nor allocates after a thread's first
//! search with a regex.
//!
//! Invariant: a [`PathRegex`]'s `id` is unique in the process and shared only by its clones
//! (same compiled program), so the slots made for one id fit every regex with it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use regex_automata::util::captures::Captures;
use regex_automata::{Input, PatternID, meta};

/// Slots one thread keeps before dropping them all (old generations' regexes).
const MAX_SLOTS_PER_THREAD: usize = 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone)]
pub struct PathRegex {
    id: u64,
    re: meta::Regex,
    text: Box<str>,
}

thread_local! {
    static SLOTS: RefCell<std::collections::HashMap<u64, (meta::Cache, Captures), foldhash::fast::FixedState>> =
        const { RefCell::new(std::collections::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))) };
}

/// Why a regex was refused at load, on one line (routes' conditions and rewrites alike).
pub(crate) fn refusal(e: &meta::BuildError) -> String {
    match e.size_limit() {
        Some(limit) => format!("compiles to more than {} KiB: simplify it", limit / 1024),
        // The syntax error's own text is several lines (the pattern, a caret).
        None => e
            .syntax_error()
            .map_or_else(|| e.to_string(), ToString::to_string)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

impl PathRegex {
    /// Compiles `pattern`; the error says why it was refused (syntax, or over `size_limit`).
    pub fn new(pattern: &str, size_limit: usize) -> Result<PathRegex, String> {
        let config = meta::Config::new().nfa_size_limit(Some(size_limit));
        let re = meta::Builder::new()
            .configure(config)
            .build(pattern)
            .map_err(|e| refusal(&e))?;
        Ok(PathRegex {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            re,
            text: pattern.into(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The index of a capture group named by number (`1`) or by name (`id`), if it has one.
    pub fn group(&self, name: &str) -> Option<usize> {
        let info = self.re.group_info();
        match name.parse::<usize>() {
            Ok(n) => (n < info.group_len(PatternID::ZERO)).then_some(n),
            Err(_) => info.to_index(PatternID::ZERO, name),
        }
    }

    /// Runs `f` with the captures of the leftmost-first match in `hay` (`None`: no match),
    /// searched with this thread's slots for the regex.
    pub fn with_captures<R>(&self, hay: &[u8], f: impl FnOnce(Option<&Captures>) -> R) -> R {
        let input = Input::new(hay);
        SLOTS.with(|slots| {
            let Ok(mut slots) = slots.try_borrow_mut() else {
                // Searches never nest; were one to, it would search with fresh slots.
                let mut caps = self.re.create_captures();
                self.re.search_captures(&input, &mut caps);
                return f(caps.is_match().then_some(&caps));
            };
            if slots.len() >= MAX_SLOTS_PER_THREAD && !slots.contains_key(&self.id) {
                slots.clear();
            }
            let (cache, caps) = slots
                .entry(self.id)
                .or_insert_with(|| (self.re.create_cache(), self.re.create_captures()));
            self.re.search_captures_with(cache, &input, caps);
            f(caps.is_match().then_some(&*caps))
        })
    }
}
