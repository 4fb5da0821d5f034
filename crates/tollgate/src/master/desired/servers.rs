//! `add server`, `del server` and `set server address` as the master checks them: against
//! the file's servers as runtime commands have changed them (added, deleted, moved), so a
//! name is in use exactly when `show servers` would list it. Each becomes a `ServerChange`
//! for `record` and the workers; the reason for a refusal is for the operator.
//!
//! Choices (docs/runtime-api.md): as HAProxy's `add server`, a server is added in maint
//! unless `enabled`; it gets its id from the master's table, which never hands that id to
//! another name. As HAProxy's `del server`, deletion needs a server out of rotation with no
//! connection (the workers check that part); unlike HAProxy a file server may be deleted
//! too, and it stays deleted across reloads until the file changes it.

use std::net::{IpAddr, SocketAddr};

use super::{Desired, find};
use crate::command::{AddServerArgs, NewServer, ServerChange};
use crate::config::Config;
use crate::live::server::AdminState;

/// What a server's recorded change was before an `add` or `del` that the workers may still
/// refuse (a busy server): put back if they do.
#[derive(Debug)]
pub(crate) struct Undo {
    key: (String, String),
    before: Option<ServerChange>,
}

impl Desired {
    pub(crate) fn undo_point(&self, change: &ServerChange) -> Undo {
        let key = (change.backend.clone(), change.server.clone());
        let before = self.changes.get(&key).cloned();
        Undo { key, before }
    }

    /// Puts a server's record back as it was at `undo_point` (a refused `del`: the server is
    /// still there, and a reload must keep it).
    pub(crate) fn restore(&mut self, undo: Undo) {
        match undo.before {
            Some(before) => self.changes.insert(undo.key, before),
            None => self.changes.remove(&undo.key),
        };
    }

    /// Whether `backend/server` exists now (file or runtime, not deleted).
    pub(crate) fn exists(&self, config: &Config, backend: &str, server: &str) -> bool {
        match self.changes.get(&(backend.to_string(), server.to_string())) {
            Some(c) if c.add.is_some() => true,
            Some(c) if c.delete => false,
            _ => find(config, backend, server).is_some(),
        }
    }

    /// Where new connections to an existing server go now.
    fn address_of(&self, config: &Config, backend: &str, server: &str) -> Option<SocketAddr> {
        let change = self.changes.get(&(backend.to_string(), server.to_string()));
        change
            .and_then(|c| c.address.or(c.add.as_ref().map(|n| n.address)))
            .or_else(|| find(config, backend, server).map(|s| s.address))
    }

    /// `add server`: the change that creates it, its id allocated.
    pub(crate) fn new_server(
        &mut self,
        config: &Config,
        backend: &str,
        server: &str,
        args: &AddServerArgs,
    ) -> Result<ServerChange, String> {
        let Some(b) = config.backend(backend) else {
            return Err(format!("no backend `{backend}`"));
        };
        if server.is_empty() || !server.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(format!(
                "server name `{server}` must be non-empty and use only letters, digits, `-`, `_`, `.`"
            ));
        }
        if self.exists(config, backend, server) {
            return Err(format!("backend `{backend}` already has a server `{server}`"));
        }
        let address = parse_address(&args.address, None)?;
        let weight = args.weight.unwrap_or(1);
        if !(0..=256).contains(&weight) {
            return Err(format!("weight {weight} is out of range (0 to 256)"));
        }
        if args.check && b.health.is_none() {
            return Err(format!("`check` needs [backend.health] in backend `{backend}`"));
        }
        let id = self.ids.server(backend, server);
        Ok(ServerChange {
            backend: backend.to_string(),
            server: server.to_string(),
            state: Some(if args.enabled {
                AdminState::Ready
            } else {
                AdminState::Maint
            }),
            add: Some(NewServer {
                id,
                address,
                weight,
                maxconn: args.maxconn.unwrap_or(0),
                backup: args.backup,
                check: args.check,
                slowstart_ms: args.slowstart_ms,
            }),
            ..Default::default()
        })
    }

    /// `set server address`: `text` is `IP:PORT`, or `IP` to keep the server's port.
    pub(crate) fn readdress(
        &self,
        config: &Config,
        backend: &str,
        server: &str,
        text: &str,
    ) -> Result<ServerChange, String> {
        if config.backend(backend).is_none() {
            return Err(format!("no backend `{backend}`"));
        }
        let Some(current) = self
            .address_of(config, backend, server)
            .filter(|_| self.exists(config, backend, server))
        else {
            return Err(format!("no server `{server}` in backend `{backend}`"));
        };
        let runtime = self
            .changes
            .get(&(backend.to_string(), server.to_string()))
            .is_some_and(|c| c.add.is_some());
        if let Some(host) = find(config, backend, server).and_then(|s| s.host.as_deref())
            && !runtime
        {
            return Err(format!(
                "{backend}/{server} takes its address from DNS (`{host}`); change it in the file"
            ));
        }
        let address = parse_address(text, Some(current.port()))?;
        Ok(ServerChange {
            backend: backend.to_string(),
            server: server.to_string(),
            address: Some(address),
            ..Default::default()
        })
    }
}

/// `text` as `IP:PORT` or `[V6]:PORT` split at its last colon, brackets removed.
fn port_of(text: &str) -> Option<(&str, &str)> {
    let (ip, port) = text.rsplit_once(':')?;
    let ip = ip.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(ip);
    Some((ip, port))
}

/// `IP:PORT` (`[V6]:PORT`), or a bare IP taking `keep_port`. Host names are refused: the
/// master resolves nothing, and a name would need `discover`'s re-resolution to mean what
/// an operator expects.
pub(crate) fn parse_address(text: &str, keep_port: Option<u16>) -> Result<SocketAddr, String> {
    let t = text.trim();
    let address = if let Ok(a) = t.parse::<SocketAddr>() {
        a
    } else {
        let bare = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(t);
        match (bare.parse::<IpAddr>(), keep_port) {
            (Ok(ip), Some(port)) => SocketAddr::new(ip, port),
            (Ok(_), None) => return Err(format!("`{t}`: a port is needed (IP:PORT)")),
            (Err(_), _) => {
                // An IP with a port that is no port (`10.0.0.8:99999`): say so, not "host name".
                if let Some((ip, port)) = port_of(t)
                    && ip.parse::<IpAddr>().is_ok()
                {
                    return Err(format!("`{t}`: `{port}` is not a port (1 to 65535)"));
                }
                return Err(format!(
                    "`{t}` is not an address: IP:PORT (or IP to keep the port); host names are not accepted here"
                ));
            }
        }
    };
    if address.port() == 0 || address.ip().is_unspecified() {
        return Err(format!("`{t}`: neither the IP nor the port may be 0"));
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_bad_port_is_named_as_such_and_host_names_as_host_names() {
        let err = parse_address("10.0.0.8:99999", None).unwrap_err();
        assert!(err.contains("`99999` is not a port (1 to 65535)"), "{err}");
        let err = parse_address("[2001:db8::1]:http", None).unwrap_err();
        assert!(err.contains("`http` is not a port"), "{err}");
        let err = parse_address("app.internal:80", None).unwrap_err();
        assert!(err.contains("host names are not accepted"), "{err}");
        assert_eq!(
            parse_address("10.0.0.8:8080", None).unwrap(),
            "10.0.0.8:8080".parse().unwrap()
        );
    }

    fn config() -> Config {
        let text = "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
                    [[backend]]\nname = \"app\"\n\
                    [[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n\
                    [[backend.server]]\nname = \"b\"\naddress = \"127.0.0.1:2\"\n";
        crate::config::parse(text, "t.toml").unwrap()
    }

    fn args(address: &str) -> AddServerArgs {
        AddServerArgs {
            address: address.into(),
            ..Default::default()
        }
    }

    #[test]
    fn addresses_parse_or_say_why() {
        let keep = Some(8080);
        assert_eq!(parse_address("10.0.0.1:81", keep).unwrap().port(), 81);
        assert_eq!(parse_address("10.0.0.1", keep).unwrap().port(), 8080);
        assert_eq!(parse_address("[::1]", keep).unwrap().to_string(), "[::1]:8080");
        assert!(parse_address("10.0.0.1", None).unwrap_err().contains("port is needed"));
        assert!(
            parse_address("app.example:80", keep)
                .unwrap_err()
                .contains("host names")
        );
        assert!(parse_address("10.0.0.1:0", keep).unwrap_err().contains("0"));
        assert!(parse_address("0.0.0.0:80", keep).is_err());
        assert!(parse_address("", keep).is_err());
    }

    #[test]
    fn add_refuses_what_cannot_work_and_ids_are_never_reused() {
        let c = config();
        let mut d = Desired::default();
        d.ids.assign(&mut c.clone());
        assert!(
            d.new_server(&c, "zz", "n", &args("127.0.0.1:9"))
                .unwrap_err()
                .contains("no backend")
        );
        assert!(
            d.new_server(&c, "app", "a", &args("127.0.0.1:9"))
                .unwrap_err()
                .contains("already has")
        );
        assert!(
            d.new_server(&c, "app", "x/y", &args("127.0.0.1:9"))
                .unwrap_err()
                .contains("name")
        );
        assert!(
            d.new_server(&c, "app", "n", &args("nowhere"))
                .unwrap_err()
                .contains("not an address")
        );
        let heavy = AddServerArgs {
            weight: Some(257),
            ..args("127.0.0.1:9")
        };
        assert!(
            d.new_server(&c, "app", "n", &heavy)
                .unwrap_err()
                .contains("out of range")
        );
        let checked = AddServerArgs {
            check: true,
            ..args("127.0.0.1:9")
        };
        assert!(
            d.new_server(&c, "app", "n", &checked)
                .unwrap_err()
                .contains("[backend.health]")
        );

        let add = d.new_server(&c, "app", "n", &args("127.0.0.1:9")).unwrap();
        assert_eq!(add.state, Some(AdminState::Maint), "added in maint, as HAProxy does");
        let id = add.add.as_ref().unwrap().id;
        d.record(&add);
        assert!(d.exists(&c, "app", "n"));
        assert!(
            d.new_server(&c, "app", "n", &args("127.0.0.1:9"))
                .unwrap_err()
                .contains("already has")
        );
        // Moved, then deleted: gone, and a new server of another name never gets its id.
        let moved = d.readdress(&c, "app", "n", "127.0.0.2").unwrap();
        assert_eq!(moved.address.unwrap().to_string(), "127.0.0.2:9");
        d.record(&moved);
        let del = ServerChange {
            backend: "app".into(),
            server: "n".into(),
            delete: true,
            ..Default::default()
        };
        d.validate(&c, &del).unwrap();
        d.record(&del);
        assert!(!d.exists(&c, "app", "n") && d.changes().is_empty());
        let other = d.new_server(&c, "app", "m", &args("127.0.0.1:9")).unwrap();
        assert_ne!(other.add.unwrap().id, id);
        assert!(d.validate(&c, &del).unwrap_err().contains("no server `n`"));
    }

    #[test]
    fn a_deleted_file_server_stays_deleted_until_the_file_changes_it() {
        let c = config();
        let mut d = Desired::default();
        let del = ServerChange {
            backend: "app".into(),
            server: "b".into(),
            delete: true,
            ..Default::default()
        };
        d.record(&del);
        assert!(!d.exists(&c, "app", "b"));
        assert!(d.readdress(&c, "app", "b", "127.0.0.1:5").is_err());
        let report = d.reconcile(&c, &c);
        assert_eq!(report.kept, ["app/b deleted"]);
        // Replaced by a runtime server of the same name, then the file removes b: the
        // replacement stays, as a plain runtime server.
        let add = d.new_server(&c, "app", "b", &args("127.0.0.1:7")).unwrap();
        d.record(&add);
        let without_b = crate::config::parse(
            "[[frontend]]\nname = \"f\"\nbind = [\"127.0.0.1:0\"]\ndefault_backend = \"app\"\n\
             [[backend]]\nname = \"app\"\n[[backend.server]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n",
            "t.toml",
        )
        .unwrap();
        let report = d.reconcile(&c, &without_b);
        assert_eq!(report.kept.len(), 1, "{report:?}");
        assert!(!d.changes()[0].delete && d.changes()[0].add.is_some());
        // The file defines b again: the file wins, the runtime server is dropped.
        let report = d.reconcile(&without_b, &c);
        assert!(report.overridden[0].contains("the file defines app/b"), "{report:?}");
        assert!(d.changes().is_empty());
    }
}
