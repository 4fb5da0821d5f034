//! A worker thread's view of one backend: the server-set version its balancer was built
//! for, and that balancer.
//!
//! Invariants: the balancer's indexes are positions in `set` (the same version), so a pick
//! is only ever answered from the set it was made over. Before each pick one atomic load
//! compares versions; a moved version rebuilds the balancer from the new set's effective
//! weights (rare: servers added, removed, readdressed). Weight changes arrive through the
//! thread's inbox as `set_weight` calls, without a rebuild. Everything that outlives a set
//! version (pooled connections, retry bookkeeping, slots) is keyed by `ServerId`.

use std::cell::RefCell;
use std::sync::Arc;

use crate::balance::{self, Balancer, Candidate, Constructor, PickContext};
use crate::config::Backend;
use crate::live::ServerId;
use crate::live::backend::{BackendLive, ServerSet};
use crate::live::server::{ServerLive, ServerSlot};

struct View {
    set: Arc<ServerSet>,
    balancer: Box<dyn Balancer>,
}

pub(crate) struct LocalBackend {
    pub live: Arc<BackendLive>,
    build: Constructor,
    worker: usize,
    /// `hash_balance_factor`, handed to every pick (only hashing reads it).
    balance_factor: u32,
    view: RefCell<View>,
    /// Cookie persistence (`[backend.sticky]`): server ↔ cookie value.
    pub sticky: Option<super::sticky::StickyTable>,
}

fn build_view(live: &BackendLive, build: Constructor, worker: usize) -> View {
    let set = live.servers();
    let candidates: Vec<Candidate> = set
        .servers
        .iter()
        .map(|s| Candidate {
            id: s.id,
            weight: s.effective_weight(),
            name_hash: balance::hash::name_hash(&s.name),
        })
        .collect();
    View {
        balancer: build(&candidates, worker),
        set,
    }
}

impl LocalBackend {
    pub(crate) fn new(spec: &Backend, live: Arc<BackendLive>, worker: usize) -> Self {
        let build = balance::lookup(&spec.balance).unwrap_or(balance::RoundRobin::boxed);
        let view = RefCell::new(build_view(&live, build, worker));
        let sticky = spec.sticky.as_ref().map(|s| super::sticky::StickyTable::new(s, &live));
        LocalBackend {
            live,
            build,
            worker,
            balance_factor: spec.hash_balance_factor,
            view,
            sticky,
        }
    }

    fn refreshed(&self) -> std::cell::RefMut<'_, View> {
        let mut view = self.view.borrow_mut();
        if view.set.version != self.live.version() {
            *view = build_view(&self.live, self.build, self.worker);
        }
        view
    }

    /// Picks a server that `accept` allows — a usable primary, else a usable backup — and
    /// takes a slot on it; the balancer hears `taken` at once (same view, no lookup).
    pub(crate) fn take(&self, accept: &dyn Fn(&ServerLive) -> bool, hash_key: Option<u64>) -> Take {
        let mut view = self.refreshed();
        let View { set, balancer } = &mut *view;
        for backup in [false, true] {
            let usable = |i: usize| {
                set.servers
                    .get(i)
                    .is_some_and(|s| s.backup == backup && s.is_usable() && accept(s))
            };
            let ctx = PickContext::new(&set.servers, &usable, hash_key).with_balance_factor(self.balance_factor);
            let Some(index) = balancer.pick(&ctx) else {
                continue;
            };
            let Some(server) = set.servers.get(index) else {
                continue;
            };
            // `Lost`: another worker took the last slot between the pick and the take.
            return take_slot(set, balancer.as_mut(), index, server, Take::Lost);
        }
        Take::Nothing
    }

    /// Takes a slot on server `id` itself, bypassing the balancer (a sticky request), if it
    /// is in the set and usable (primary or backup alike) and `accept` allows it: `None`
    /// when it cannot serve (the caller balances instead), `Some(Take::Nothing)` when it is
    /// usable but full (the caller waits for it).
    pub(crate) fn take_by_id(&self, id: ServerId, accept: &dyn Fn(&ServerLive) -> bool) -> Option<Take> {
        let mut view = self.refreshed();
        let View { set, balancer } = &mut *view;
        let index = set.position(id)?;
        let server = set.servers.get(index).filter(|s| s.is_usable() && accept(s))?;
        Some(take_slot(set, balancer.as_mut(), index, server, Take::Nothing))
    }

    /// A slot on `id` was handed over from the backend's queue (taken by another thread's
    /// release): the balancer hears `taken` as for its own pick. A server no longer in the
    /// set gets a position no version has (0), so its release falls back to the id.
    pub(crate) fn adopted(&self, id: ServerId) -> Position {
        let mut view = self.refreshed();
        let View { set, balancer } = &mut *view;
        match set.position(id) {
            Some(index) => {
                balancer.taken(index);
                Position {
                    version: set.version,
                    index,
                }
            }
            None => Position { version: 0, index: 0 },
        }
    }

    /// Whether any server of the set could take a connection once it has room (not
    /// drained, not in maintenance, not down): waiting in the queue makes sense only then.
    pub(crate) fn any_usable(&self) -> bool {
        self.refreshed().set.servers.iter().any(|s| s.is_usable())
    }

    pub(crate) fn len(&self) -> usize {
        self.refreshed().set.servers.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the server `id`, found at `at` when the set is still that version (the
    /// usual case: no lookup), else by id; not at all if it left the set. No `Arc` clone:
    /// the set is borrowed from this thread's view.
    pub(crate) fn with_server(&self, id: ServerId, at: Option<Position>, f: impl FnOnce(&ServerLive)) {
        let Ok(view) = self.view.try_borrow() else {
            return;
        };
        let index = match at {
            Some(at) if at.version == view.set.version => Some(at.index),
            _ => view.set.position(id),
        };
        if let Some(server) = index.and_then(|i| view.set.servers.get(i)).filter(|s| s.id == id) {
            f(server);
        }
    }

    fn with_position(&self, id: ServerId, f: impl FnOnce(&mut dyn Balancer, usize)) {
        let mut view = self.refreshed();
        let View { set, balancer } = &mut *view;
        if let Some(i) = set.position(id) {
            f(balancer.as_mut(), i);
        }
    }

    /// A slot taken at `at` was released: the balancer hears it if the server is still in
    /// the set (by position while the version holds, else by id).
    pub(crate) fn released(&self, id: ServerId, at: Position) {
        // `try_borrow_mut`: a slot dropped while a pick holds the view (it cannot happen
        // today, but a panic in a Drop would be the worst way to learn it) is not heard.
        if let Ok(mut view) = self.view.try_borrow_mut() {
            let View { set, balancer } = &mut *view;
            let index = if at.version == set.version {
                Some(at.index)
            } else {
                set.position(id)
            };
            if let Some(i) = index {
                balancer.released(i);
            }
        }
    }

    /// A weight command reached this thread: tell the balancer.
    pub(crate) fn set_weight(&self, id: ServerId, weight: u32) {
        self.with_position(id, |b, i| b.set_weight(i, weight));
    }
}

/// A slot on `server`, at `index` of `set`, which `balancer` hears of at once; `full` when
/// the server has no room left.
fn take_slot(set: &ServerSet, balancer: &mut dyn Balancer, index: usize, server: &Arc<ServerLive>, full: Take) -> Take {
    match server.try_take() {
        Some(slot) => {
            balancer.taken(index);
            Take::Slot(
                slot,
                Position {
                    version: set.version,
                    index,
                },
            )
        }
        None => full,
    }
}

/// Where a pick found a server: its position in one version of the set. Positions mean
/// nothing in another version; `with_server` and `released` fall back to the id then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub version: u64,
    pub index: usize,
}

/// What `take` found.
pub(crate) enum Take {
    Slot(ServerSlot, Position),
    /// A server was picked but its last slot went to another worker first: pick again.
    Lost,
    /// No server is acceptable now.
    Nothing,
}

/// Servers already tried by one connection attempt sequence, by id. Inline up to 8 (the
/// common `retries` values), spilling to the heap past that: no bound on backend size.
#[derive(Debug, Default)]
pub(crate) struct Tried {
    inline: [u32; 8],
    len: usize,
    spill: Vec<u32>,
}

impl Tried {
    pub(crate) fn insert(&mut self, id: ServerId) {
        if self.contains(id) {
            return;
        }
        if let Some(slot) = self.inline.get_mut(self.len) {
            *slot = id.0;
            self.len += 1;
        } else {
            self.spill.push(id.0);
        }
    }

    pub(crate) fn contains(&self, id: ServerId) -> bool {
        self.inline.iter().take(self.len).any(|&x| x == id.0) || self.spill.contains(&id.0)
    }

    pub(crate) fn len(&self) -> usize {
        self.len + self.spill.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tried_holds_any_number_of_ids() {
        let mut t = Tried::default();
        for i in 0..200 {
            assert!(!t.contains(ServerId(i)));
            t.insert(ServerId(i));
            t.insert(ServerId(i));
        }
        assert_eq!(t.len(), 200);
        assert!((0..200).all(|i| t.contains(ServerId(i))));
        assert!(!t.contains(ServerId(200)));
        t.clear();
        assert!(t.is_empty() && !t.contains(ServerId(3)));
    }

    #[test]
    fn a_swapped_set_is_picked_from_at_once_and_old_slots_release_cleanly() {
        let text = "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
                    [[backend]]\nname = \"app\"\n\
                    [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n\
                    [[backend.server]]\nname = \"b\"\naddress = \"127.0.0.1:2\"\n";
        let config = crate::config::parse(text, "t.toml").expect("valid");
        let spec = config.backends.first().expect("a backend");
        let live = Arc::new(BackendLive::new(spec, 1));
        let local = LocalBackend::new(spec, Arc::clone(&live), 0);
        let Take::Slot(held, at) = local.take(&|_| true, None) else {
            panic!("a slot")
        };
        let gone = Arc::clone(held.server());
        // Swap the set: the held server leaves, a new one (id 9) joins.
        let mut added = spec.servers.first().expect("a server").clone();
        (added.id, added.name) = (ServerId(9), "c".into());
        let version = live.update(|servers, notify, workers| {
            let name: Arc<str> = Arc::from("app");
            let mut next: Vec<Arc<ServerLive>> = servers.iter().filter(|s| s.id != gone.id).cloned().collect();
            next.push(Arc::new(ServerLive::new(
                &added,
                (spec.id, &name),
                workers,
                Arc::clone(notify),
            )));
            next
        });
        assert_eq!(version, 2);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..6 {
            let Take::Slot(slot, pos) = local.take(&|_| true, None) else {
                panic!("a slot")
            };
            assert_ne!(slot.server().id, gone.id, "a server that left the set is never picked");
            assert_eq!(pos.version, 2, "picks come from the new version at once");
            seen.insert(slot.server().id);
            local.released(slot.server().id, pos);
        }
        assert!(seen.contains(&ServerId(9)), "the new server takes traffic: {seen:?}");
        // The connection on the departed server finishes after the swap: its release finds
        // no position in the new set and is simply not heard; the slot itself is given back.
        local.released(gone.id, at);
        drop(held);
        assert_eq!(gone.active(), 0);
    }
}
