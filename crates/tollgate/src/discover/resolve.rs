//! The DNS client: hickory's resolver built from `[resolvers]`, and the two lookups
//! discovery makes (addresses of a name, SRV records of a name), answered in our own types.
//!
//! Every lookup asks the nameservers: the resolver's cache is cleared before each round
//! (`resolve_interval` is the only clock; record TTLs do not hold an answer longer).

use std::net::IpAddr;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

use super::plan::SrvRecord;
use crate::config::model::Resolvers;

/// Why a lookup gave no answer. `kind` is what "once per change" logging compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub kind: &'static str,
    pub detail: String,
}

/// A resolver for `config`: its nameservers, or the system's (/etc/resolv.conf; /etc/hosts
/// is read first either way, as libc does).
pub(crate) fn build(config: &Resolvers) -> Result<TokioResolver, String> {
    let mut builder = if config.nameservers.is_empty() {
        TokioResolver::builder_tokio().map_err(|e| format!("reading the system's resolver config: {e}"))?
    } else {
        let servers = config
            .nameservers
            .iter()
            .map(|addr| {
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for connection in &mut ns.connections {
                    connection.port = addr.port();
                }
                ns
            })
            .collect();
        TokioResolver::builder_with_config(
            ResolverConfig::from_name_servers(servers),
            TokioRuntimeProvider::default(),
        )
    };
    let options = builder.options_mut();
    options.timeout = config.timeout;
    options.attempts = config.attempts as usize;
    // IPv4 first: a name with both keeps to one family; AAAA only when there is no A.
    options.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
    builder.build().map_err(|e| format!("building the resolver: {e}"))
}

/// The addresses of `name` (A, else AAAA), in answer order.
pub(crate) async fn addresses(resolver: TokioResolver, name: String) -> Result<Vec<IpAddr>, Failure> {
    let answer = resolver.lookup_ip(name.as_str()).await.map_err(failure)?;
    let ips: Vec<IpAddr> = answer.iter().collect();
    if ips.is_empty() {
        return Err(Failure {
            kind: "no address",
            detail: "the answer has no address".into(),
        });
    }
    Ok(ips)
}

/// The SRV records of `name`.
pub(crate) async fn srv(resolver: TokioResolver, name: String) -> Result<Vec<SrvRecord>, Failure> {
    let answer = resolver.srv_lookup(name.as_str()).await.map_err(failure)?;
    let records: Vec<SrvRecord> = answer
        .answers()
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some(SrvRecord {
                target: srv.target.to_utf8().trim_end_matches('.').to_ascii_lowercase(),
                port: srv.port,
                priority: srv.priority,
                weight: srv.weight,
            }),
            _ => None,
        })
        // "." as the target: the service is decidedly not available at this domain.
        .filter(|r| !r.target.is_empty() && r.port != 0)
        .collect();
    if records.is_empty() {
        return Err(Failure {
            kind: "no records",
            detail: "the answer has no usable SRV record".into(),
        });
    }
    Ok(records)
}

fn failure(e: NetError) -> Failure {
    let kind = if e.is_nx_domain() {
        "no such name"
    } else if e.is_no_records_found() {
        "no records"
    } else {
        // Timeouts, refused or unreachable nameservers, bad answers: one kind, so a
        // nameserver that alternates between timing out and refusing logs once.
        "no answer"
    };
    Failure {
        kind,
        detail: e.to_string(),
    }
}
