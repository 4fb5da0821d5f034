//! Stable identities: `backend` and `backend/server` names to ids.
//!
//! The table only grows: a name seen once keeps its id for the life of the table (a server
//! removed by one reload and added back by the next gets its old id again, which is what an
//! operator reading counters by id expects), and an id is never handed to another name. The
//! master keeps one table for its whole life and sends it with every generation's config; a
//! process without a master (`--no-master`, tests) builds one from its config.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Config;
pub use crate::ids::{BackendId, IdHasher, IdMap, ServerId};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdTable {
    backends: BTreeMap<String, BackendId>,
    /// Keyed `backend/server` (names cannot contain `/`, config validation makes sure).
    servers: BTreeMap<String, ServerId>,
    next_backend: u32,
    next_server: u32,
}

impl IdTable {
    /// Ids for every backend and server of `config`, allocating new ones for new names.
    pub(crate) fn assign(&mut self, config: &mut Config) {
        for backend in &mut config.backends {
            backend.id = self.backend(&backend.name);
            for server in &mut backend.servers {
                server.id = self.server(&backend.name, &server.name);
            }
        }
    }

    pub(crate) fn backend(&mut self, name: &str) -> BackendId {
        if let Some(id) = self.backends.get(name) {
            return *id;
        }
        let id = BackendId(self.next_backend);
        self.next_backend += 1;
        self.backends.insert(name.to_string(), id);
        id
    }

    pub(crate) fn server(&mut self, backend: &str, name: &str) -> ServerId {
        let key = format!("{backend}/{name}");
        if let Some(id) = self.servers.get(&key) {
            return *id;
        }
        let id = ServerId(self.next_server);
        self.next_server += 1;
        self.servers.insert(key, id);
        id
    }

    /// The id a server has, without allocating one.
    #[cfg(test)]
    pub(crate) fn find_server(&self, backend: &str, name: &str) -> Option<ServerId> {
        self.servers.get(&format!("{backend}/{name}")).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_never_reused() {
        let mut t = IdTable::default();
        let a = t.server("app", "a");
        let b = t.server("app", "b");
        assert_ne!(a, b);
        assert_eq!(t.server("app", "a"), a, "same name, same id");
        let other = t.server("api", "a");
        assert_ne!(other, a, "same server name in another backend is another server");
        let c = t.server("app", "c");
        assert!(c.0 > b.0 && c.0 > other.0, "fresh ids only grow");
        assert_eq!(t.backend("app"), t.backend("app"));
        assert_eq!(t.find_server("app", "zz"), None);
    }
}
