//! A frontend's routes compiled for matching: hash maps of exact hosts, wildcard host
//! suffixes and exact paths, a byte trie of path prefixes, and one regex set of every path
//! regex. Each route is filed under one condition every request it matches must meet (its
//! "key"; routes with none are always candidates); a request's candidates come from those
//! lookups, are checked in full, and the lowest route index that holds wins, exactly as a
//! walk through the routes in order would decide.

/// Looked up per request with keys fixed at load: a fast hasher, no flooding possible.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;
use std::ops::Deref;

use super::pattern::{self, Regex, SetSearch};
use super::view::{RequestView, cookie_has, query_has};
use super::{Cond, Conditions, Matcher, ValueTest};
use crate::config::model::{HostPattern, Route};

/// Routes in order (what `Frontend::routes` derefs to) and the indexes over them.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    matchers: Vec<Matcher>,
    /// Every path regex of the routes and matchers (`Cond::PathRegex::ids`).
    path_set: Option<Regex>,
    /// For each path-set pattern, the route it is the key of (if it is one).
    keyed_by_regex: Vec<Option<u32>>,
    /// The lowest route keyed by a regex (`u32::MAX`: none).
    first_regex_route: u32,
    hosts: HashMap<Box<str>, Vec<u32>>,
    /// `*.example` is filed under `example`.
    wildcard_hosts: HashMap<Box<str>, Vec<u32>>,
    paths: HashMap<Box<[u8]>, Vec<u32>>,
    prefixes: Trie,
    /// Routes without a key, in order.
    unkeyed: Vec<u32>,
}

impl Deref for RouteTable {
    type Target = [Route];

    fn deref(&self) -> &[Route] {
        &self.routes
    }
}

/// The condition a route is filed under.
enum Key<'r> {
    Hosts(&'r [HostPattern]),
    Paths(&'r [Box<[u8]>]),
    Prefixes(&'r [Box<[u8]>]),
    Regexes(std::ops::Range<usize>),
    None,
}

impl RouteTable {
    /// Compiles `routes`; `path_regexes` are the patterns the conditions' `PathRegex` ids
    /// refer to. Fails only when the regex set is too big.
    pub fn new(routes: Vec<Route>, matchers: Vec<Matcher>, path_regexes: &[String]) -> Result<RouteTable, String> {
        let path_set = match path_regexes {
            [] => None,
            patterns => Some(Regex::set(patterns)?),
        };
        let mut table = RouteTable {
            keyed_by_regex: vec![None; path_regexes.len()],
            first_regex_route: u32::MAX,
            path_set,
            matchers,
            ..RouteTable::default()
        };
        for (i, route) in routes.iter().enumerate() {
            let Ok(i) = u32::try_from(i) else { break };
            match key_of(&table.matchers, &route.when) {
                Key::Hosts(patterns) => {
                    for p in patterns {
                        let map = match p {
                            HostPattern::Exact(_) => &mut table.hosts,
                            HostPattern::Wildcard(_) => &mut table.wildcard_hosts,
                        };
                        let name = match p {
                            HostPattern::Exact(n) => n.as_str(),
                            HostPattern::Wildcard(s) => s.strip_prefix('.').unwrap_or(s),
                        };
                        push_once(map.entry(name.into()).or_default(), i);
                    }
                }
                Key::Paths(paths) => {
                    for p in paths {
                        push_once(table.paths.entry(p.clone()).or_default(), i);
                    }
                }
                Key::Prefixes(prefixes) => {
                    for p in prefixes {
                        table.prefixes.insert(p, i);
                    }
                }
                Key::Regexes(ids) => {
                    for id in ids {
                        if let Some(slot) = table.keyed_by_regex.get_mut(id) {
                            *slot = Some(i);
                        }
                    }
                    table.first_regex_route = table.first_regex_route.min(i);
                }
                Key::None => table.unkeyed.push(i),
            }
        }
        table.routes = routes;
        Ok(table)
    }
}

/// The most selective condition every match of `when` meets: its own or that of a matcher
/// it requires (hosts, then exact paths, then prefixes, then regexes). A matcher's regex is
/// never a key: its pattern ids are shared by every route using the matcher, and a pattern
/// keys one route (keyed patterns are numbered in route order).
fn key_of<'r>(matchers: &'r [Matcher], when: &'r Conditions) -> Key<'r> {
    let required = || {
        when.0.iter().chain(
            when.0
                .iter()
                .filter_map(|c| match c {
                    Cond::Matcher { index, .. } => matchers.get(*index),
                    _ => None,
                })
                .flat_map(|m| m.when.0.iter())
                .filter(|c| !matches!(c, Cond::PathRegex { .. })),
        )
    };
    let mut key = Key::None;
    let rank = |k: &Key<'_>| match k {
        Key::Hosts(_) => 4,
        Key::Paths(_) => 3,
        Key::Prefixes(_) => 2,
        Key::Regexes(_) => 1,
        Key::None => 0,
    };
    for c in required() {
        let candidate = match c {
            Cond::Host(p) => Key::Hosts(p),
            Cond::Path(p) => Key::Paths(p),
            Cond::PathPrefix(p) => Key::Prefixes(p),
            Cond::PathRegex { ids, .. } => Key::Regexes(ids.clone()),
            _ => Key::None,
        };
        if rank(&candidate) > rank(&key) {
            key = candidate;
        }
    }
    key
}

impl RouteTable {
    pub fn matchers(&self) -> &[Matcher] {
        &self.matchers
    }

    /// The index of the first route whose conditions all hold for `view`.
    pub fn first_match(&self, view: &RequestView<'_>) -> Option<usize> {
        if self.routes.is_empty() {
            return None;
        }
        self.with_eval(view, |ev| {
            let mut best = u32::MAX;
            ev.scan(&self.unkeyed, &mut best);
            if let Some(host) = view.host {
                if let Some(list) = self.hosts.get(host) {
                    ev.scan(list, &mut best);
                }
                if let Some((first, rest)) = host.split_once('.')
                    && !first.is_empty()
                    && let Some(list) = self.wildcard_hosts.get(rest)
                {
                    ev.scan(list, &mut best);
                }
            }
            if let Some(list) = self.paths.get(view.path) {
                ev.scan(list, &mut best);
            }
            self.prefixes.walk(view.path, |list| ev.scan(list, &mut best));
            if self.first_regex_route < best {
                // Keyed patterns are numbered in route order, so the walk stops at `best`.
                for (id, route) in self.keyed_by_regex.iter().enumerate() {
                    let Some(route) = *route else { continue };
                    if route >= best {
                        break;
                    }
                    if ev.path_hit(id) && ev.route_holds(route) {
                        best = route;
                        break;
                    }
                }
            }
            (best != u32::MAX).then_some(best as usize)
        })
    }

    /// The first condition of route `index` that does not hold for `view` (`None`: all
    /// hold, or no such route). What `tollgate explain` reports: the proxy's own check.
    pub fn first_miss(&self, index: usize, view: &RequestView<'_>) -> Option<&Cond> {
        let route = self.routes.get(index)?;
        self.with_eval(view, |ev| route.when.0.iter().find(|c| !ev.holds(c)))
    }

    /// The first condition of matcher `index` that does not hold (as `first_miss`).
    pub fn matcher_miss(&self, index: usize, view: &RequestView<'_>) -> Option<&Cond> {
        let m = self.matchers.get(index)?;
        self.with_eval(view, |ev| m.when.0.iter().find(|c| !ev.holds(c)))
    }

    /// The first of `conds` that holds (why a `not` failed).
    pub fn first_holding<'c>(&self, conds: &'c [Cond], view: &RequestView<'_>) -> Option<&'c Cond> {
        self.with_eval(view, |ev| conds.iter().find(|c| ev.holds(c)))
    }

    /// The route walk itself, without the indexes (what `first_match` must equal).
    #[cfg(test)]
    pub(super) fn first_match_in_order(&self, view: &RequestView<'_>) -> Option<usize> {
        (0..self.routes.len()).find(|&i| self.first_miss(i, view).is_none())
    }

    fn with_eval<R>(&self, view: &RequestView<'_>, f: impl FnOnce(&mut Eval<'_, '_, '_>) -> R) -> R {
        match &self.path_set {
            Some(set) => set.with_set(|search| {
                f(&mut Eval {
                    table: self,
                    view,
                    set: Some(search),
                })
            }),
            None => f(&mut Eval {
                table: self,
                view,
                set: None,
            }),
        }
    }
}

fn push_once(list: &mut Vec<u32>, route: u32) {
    if list.last() != Some(&route) {
        list.push(route);
    }
}

/// Evaluates conditions for one request: the path set is searched at most once.
struct Eval<'t, 'v, 's> {
    table: &'t RouteTable,
    view: &'v RequestView<'v>,
    set: Option<&'v mut SetSearch<'s>>,
}

impl Eval<'_, '_, '_> {
    /// Checks `list` (ascending) below `best`; the first route that holds becomes `best`.
    fn scan(&mut self, list: &[u32], best: &mut u32) {
        for &route in list {
            if route >= *best {
                return;
            }
            if self.route_holds(route) {
                *best = route;
                return;
            }
        }
    }

    fn route_holds(&mut self, route: u32) -> bool {
        let table = self.table;
        table
            .routes
            .get(route as usize)
            .is_some_and(|r| r.when.0.iter().all(|c| self.holds(c)))
    }

    fn path_hit(&mut self, id: usize) -> bool {
        let path = self.view.path;
        self.set.as_deref_mut().is_some_and(|s| pattern::hit(s.hits(path), id))
    }

    fn holds(&mut self, c: &Cond) -> bool {
        let v = self.view;
        match c {
            Cond::Host(p) => v.host.is_some_and(|h| p.iter().any(|p| p.matches(h))),
            Cond::Path(p) => p.iter().any(|p| **p == *v.path),
            Cond::PathPrefix(p) => p.iter().any(|p| v.path.starts_with(p)),
            Cond::PathRegex { ids, .. } => ids.clone().any(|id| self.path_hit(id)),
            Cond::Method(m) => m.iter().any(|m| **m == *v.method),
            Cond::Query { name, value } => query_has(v.query, name, value.as_deref()),
            Cond::Header { name, test } => v.headers.any_value(name, &mut |value| match test {
                ValueTest::Present => true,
                ValueTest::Exact(want) => value == &**want,
                ValueTest::Prefix(p) => value.starts_with(p),
                ValueTest::Regex(re) => re.is_match(value),
            }),
            Cond::Cookie { name, value } => cookie_has(v.headers, name, value.as_deref()),
            Cond::Source(blocks) => blocks.contains(v.source),
            Cond::Scheme(s) => v.scheme == *s,
            Cond::Sni(p) => v.sni.is_some_and(|h| p.iter().any(|p| p.matches(h))),
            Cond::ClientCert(verified) => v.client_cert == *verified,
            Cond::Matcher { index, .. } => {
                let table = self.table;
                table
                    .matchers
                    .get(*index)
                    .is_some_and(|m| m.when.0.iter().all(|c| self.holds(c)))
            }
            Cond::Not(inner) => inner.iter().all(|c| !self.holds(c)),
        }
    }
}

/// Path prefixes, one byte per edge; a node lists the routes whose prefix ends there.
#[derive(Debug, Clone, Default)]
struct Trie {
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Clone, Default)]
struct TrieNode {
    /// Sorted by byte.
    next: Vec<(u8, u32)>,
    routes: Vec<u32>,
}

impl Trie {
    fn insert(&mut self, prefix: &[u8], route: u32) {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode::default());
        }
        let mut at = 0usize;
        for &b in prefix {
            let Some(node) = self.nodes.get(at) else { return };
            at = match node.next.binary_search_by_key(&b, |&(k, _)| k) {
                Ok(i) => node.next.get(i).map_or(0, |&(_, n)| n as usize),
                Err(i) => {
                    let new = self.nodes.len();
                    self.nodes.push(TrieNode::default());
                    if let Some(node) = self.nodes.get_mut(at) {
                        node.next.insert(i, (b, new as u32));
                    }
                    new
                }
            };
        }
        if let Some(node) = self.nodes.get_mut(at) {
            push_once(&mut node.routes, route);
        }
    }

    /// Calls `f` with the routes of every prefix of `path` (shortest first).
    fn walk(&self, path: &[u8], mut f: impl FnMut(&[u32])) {
        let Some(mut node) = self.nodes.first() else { return };
        for &b in path {
            let Ok(i) = node.next.binary_search_by_key(&b, |&(k, _)| k) else {
                return;
            };
            let Some(next) = node.next.get(i).and_then(|&(_, n)| self.nodes.get(n as usize)) else {
                return;
            };
            node = next;
            if !node.routes.is_empty() {
                f(&node.routes);
            }
        }
    }
}
