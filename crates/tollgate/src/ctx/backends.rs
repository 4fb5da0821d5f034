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
use crate::live::server::ServerLive;

struct View {
    set: Arc<ServerSet>,
    balancer: Box<dyn Balancer>,
}

pub(crate) struct LocalBackend {
    pub live: Arc<BackendLive>,
    build: Constructor,
    worker: usize,
    view: RefCell<View>,
}

fn build_view(live: &BackendLive, build: Constructor, worker: usize) -> View {
    let set = live.servers();
    let candidates: Vec<Candidate> = set
        .servers
        .iter()
        .map(|s| Candidate {
            id: s.id,
            weight: s.effective_weight(),
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
        LocalBackend {
            live,
            build,
            worker,
            view,
        }
    }

    fn refreshed(&self) -> std::cell::RefMut<'_, View> {
        let mut view = self.view.borrow_mut();
        if view.set.version != self.live.version() {
            *view = build_view(&self.live, self.build, self.worker);
        }
        view
    }

    /// Picks a server that `accept` allows: a usable primary, else a usable backup.
    pub(crate) fn pick(&self, accept: &dyn Fn(&ServerLive) -> bool, hash_key: Option<u64>) -> Option<Arc<ServerLive>> {
        let mut view = self.refreshed();
        let View { set, balancer } = &mut *view;
        for backup in [false, true] {
            let usable = |i: usize| {
                set.servers
                    .get(i)
                    .is_some_and(|s| s.backup == backup && s.is_usable() && accept(s))
            };
            let ctx = PickContext::new(&set.servers, &usable, hash_key);
            if let Some(server) = balancer.pick(&ctx).and_then(|i| set.servers.get(i)) {
                return Some(Arc::clone(server));
            }
        }
        None
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

    /// Runs `f` on the server with this id in the current set, if it is there (no `Arc`
    /// clone: the set is borrowed from this thread's view).
    pub(crate) fn with_server(&self, id: ServerId, f: impl FnOnce(&ServerLive)) {
        if let Ok(view) = self.view.try_borrow()
            && let Some(server) = view.set.get(id)
        {
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

    pub(crate) fn taken(&self, id: ServerId) {
        self.with_position(id, |b, i| b.taken(i));
    }

    pub(crate) fn released(&self, id: ServerId) {
        // `try_borrow_mut`: a slot dropped while a pick holds the view (it cannot happen
        // today, but a panic in a Drop would be the worst way to learn it) is not heard.
        if let Ok(mut view) = self.view.try_borrow_mut() {
            let View { set, balancer } = &mut *view;
            if let Some(i) = set.position(id) {
                balancer.released(i);
            }
        }
    }

    /// A weight command reached this thread: tell the balancer.
    pub(crate) fn set_weight(&self, id: ServerId, weight: u32) {
        self.with_position(id, |b, i| b.set_weight(i, weight));
    }
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
}
