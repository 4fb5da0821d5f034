//! TLS session ticket keys: one secret per period, owned by the master and handed to every
//! worker generation, so a ticket issued before `tollgate reload` resumes after it.
//!
//! Owns: the process's [`TicketKeys`] and the ticketer every TLS frontend's `ServerConfig`
//! gets ([`ticketer`]).
//!
//! - Time is cut into periods of [`PERIOD`] (wall clock, so every process on the host agrees
//!   on the period number). A ticket is sealed (AES-256-GCM) with the key of the current
//!   period and opened with that of the current or the previous one: a ticket lives one to
//!   two periods, as with rustls's own rotating ticketer.
//! - The secret of period `n + 1` is a one-way function of that of period `n` (HMAC-SHA256),
//!   and the secret of an older period is dropped once it is not needed: a process that is
//!   broken into gives away the tickets of the current and previous period, not older ones.
//!   Every process holding the secret of some period computes the same secrets for the
//!   following ones, so generations started at different times agree without a message.
//! - Each frontend seals with its own key (HMAC of the period's secret and the frontend's
//!   name): a ticket from one frontend never resumes on another (which may ask for a client
//!   certificate the first did not).
//! - Where the keys come from: the master generates them at start (random, in memory only,
//!   never written anywhere) and sends them to each generation in its `ToWorker::Config`
//!   (`master::worker` installs them before parsing the config). A process that got none (one
//!   process without a master, `tollgate check`) generates its own.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;
use serde::{Deserialize, Serialize};

/// How long one ticket key seals new tickets; it opens them for one period more.
pub const PERIOD: Duration = Duration::from_secs(6 * 60 * 60);
const SECRET_LEN: usize = 32;
/// A ticket: the period number (8 bytes, big endian, also the AEAD's additional data),
/// the nonce, then the sealed session and its tag.
const HEADER_LEN: usize = 8 + NONCE_LEN;

/// The secrets of one period and of the one before it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TicketKeys {
    period: u64,
    previous: [u8; SECRET_LEN],
    current: [u8; SECRET_LEN],
}

impl std::fmt::Debug for TicketKeys {
    /// Never the secrets (messages to workers are logged when unexpected).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketKeys")
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl TicketKeys {
    /// New random secrets for `period` (and its predecessor).
    fn generate(period: u64) -> Option<TicketKeys> {
        let mut keys = TicketKeys {
            period,
            previous: [0; SECRET_LEN],
            current: [0; SECRET_LEN],
        };
        aws_lc_rs::rand::fill(&mut keys.previous).ok()?;
        aws_lc_rs::rand::fill(&mut keys.current).ok()?;
        Some(keys)
    }

    /// The keys of `period`, computed forward from these (never backward: a period before
    /// `self.period` gets these unchanged).
    fn advanced_to(&self, period: u64) -> TicketKeys {
        let mut keys = self.clone();
        // A clock that jumped years ahead costs a loop of hashes once; bounded all the same.
        let steps = period.saturating_sub(self.period).min(1 << 20);
        for _ in 0..steps {
            keys.previous = keys.current;
            keys.current = next_secret(&keys.current);
        }
        keys.period = keys.period.saturating_add(steps);
        keys
    }
}

fn next_secret(secret: &[u8; SECRET_LEN]) -> [u8; SECRET_LEN] {
    derive(secret, b"tollgate ticket secret of the next period")
}

fn derive(secret: &[u8; SECRET_LEN], label: &[u8]) -> [u8; SECRET_LEN] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), label);
    let mut out = [0; SECRET_LEN];
    for (o, b) in out.iter_mut().zip(tag.as_ref()) {
        *o = *b;
    }
    out
}

/// The period `now` falls in.
fn period_at(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / PERIOD.as_secs()
}

/// The process's keys: installed (a worker, from its master), or generated on first use.
static KEYS: Mutex<Option<TicketKeys>> = Mutex::new(None);

/// A worker: uses the keys its master sent (before its config is parsed).
pub(crate) fn install(keys: TicketKeys) {
    *KEYS.lock().unwrap_or_else(PoisonError::into_inner) = Some(keys);
}

/// The process's keys as of now (generated on first use), advanced to the current period:
/// what the master sends a new generation, and what a ticketer starts from.
pub(crate) fn current() -> Option<TicketKeys> {
    let now = period_at(SystemTime::now());
    let mut keys = KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    let advanced = match keys.as_ref() {
        Some(k) => k.advanced_to(now),
        None => TicketKeys::generate(now)?,
    };
    // The master forgets what it no longer needs (older periods) as time goes.
    *keys = Some(advanced.clone());
    Some(advanced)
}

/// The master, every few hundred milliseconds: steps its keys to the current period, so the
/// secret of a period is forgotten once it is past (not at the next reload).
pub(crate) fn step() {
    let now = period_at(SystemTime::now());
    let mut keys = KEYS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(k) = keys.as_mut().filter(|k| k.period < now) {
        *k = k.advanced_to(now);
    }
}

/// A worker, once its config is built: its ticketers hold what they need (and step it
/// themselves), the process copy is dropped.
pub(crate) fn forget() {
    *KEYS.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// The ticketer of the TLS frontend `frontend`, on the process's keys.
pub(crate) fn ticketer(frontend: &str) -> Result<Arc<dyn rustls::server::ProducesTickets>, String> {
    let keys = current().ok_or("session tickets: no random bytes for a ticket key")?;
    Ok(Arc::new(Ticketer {
        frontend: frontend.as_bytes().into(),
        state: RwLock::new(State::new(keys, frontend.as_bytes())),
    }))
}

/// A frontend's sealing keys for one period and the one before.
struct State {
    keys: TicketKeys,
    previous: LessSafeKey,
    current: LessSafeKey,
}

impl State {
    fn new(keys: TicketKeys, frontend: &[u8]) -> State {
        State {
            previous: frontend_key(&keys.previous, frontend),
            current: frontend_key(&keys.current, frontend),
            keys,
        }
    }

    /// The key that opens a ticket sealed in `period`, if it is still kept.
    fn opener(&self, period: u64) -> Option<&LessSafeKey> {
        if period == self.keys.period {
            Some(&self.current)
        } else if period.checked_add(1) == Some(self.keys.period) {
            Some(&self.previous)
        } else {
            None
        }
    }
}

fn frontend_key(secret: &[u8; SECRET_LEN], frontend: &[u8]) -> LessSafeKey {
    let mut label = b"tollgate ticket key of frontend ".to_vec();
    label.extend_from_slice(frontend);
    let key = derive(secret, &label);
    // AES-256 takes any 32 bytes: this cannot fail.
    #[allow(clippy::expect_used)]
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("a 32-byte AES-256 key"))
}

/// Seals and opens one frontend's tickets (shared by every worker thread).
struct Ticketer {
    frontend: Box<[u8]>,
    state: RwLock<State>,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer").finish_non_exhaustive()
    }
}

impl Ticketer {
    /// Runs `f` on the keys of the current period, rotating them first when it has begun.
    fn with_state<T>(&self, now: SystemTime, f: impl FnOnce(&State) -> T) -> T {
        let period = period_at(now);
        {
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            if state.keys.period >= period {
                return f(&state);
            }
        }
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if state.keys.period < period {
            *state = State::new(state.keys.advanced_to(period), &self.frontend);
        }
        f(&state)
    }

    fn seal(&self, now: SystemTime, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        self.with_state(now, |state| {
            let period = state.keys.period.to_be_bytes();
            let mut out = Vec::with_capacity(HEADER_LEN + plain.len() + AES_256_GCM.tag_len());
            out.extend_from_slice(&period);
            out.extend_from_slice(&nonce);
            out.extend_from_slice(plain);
            let mut sealed = out.split_off(HEADER_LEN);
            let nonce = Nonce::assume_unique_for_key(nonce);
            state
                .current
                .seal_in_place_append_tag(nonce, Aad::from(period), &mut sealed)
                .ok()?;
            out.append(&mut sealed);
            Some(out)
        })
    }

    fn open(&self, now: SystemTime, ticket: &[u8]) -> Option<Vec<u8>> {
        let period = ticket.get(..8)?;
        let nonce = Nonce::try_assume_unique_for_key(ticket.get(8..HEADER_LEN)?).ok()?;
        let mut sealed = ticket.get(HEADER_LEN..)?.to_vec();
        let number = u64::from_be_bytes(period.try_into().ok()?);
        self.with_state(now, |state| {
            let key = state.opener(number)?;
            let plain_len = key.open_in_place(nonce, Aad::from(period), &mut sealed).ok()?.len();
            sealed.truncate(plain_len);
            Some(sealed)
        })
    }
}

impl rustls::server::ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(PERIOD.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(SystemTime::now(), plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open(SystemTime::now(), cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(period: u64) -> SystemTime {
        UNIX_EPOCH + PERIOD * u32::try_from(period).unwrap() + Duration::from_secs(1)
    }

    fn ticketer_on(keys: &TicketKeys, frontend: &str) -> Ticketer {
        Ticketer {
            frontend: frontend.as_bytes().into(),
            state: RwLock::new(State::new(keys.clone(), frontend.as_bytes())),
        }
    }

    #[test]
    fn a_ticket_opens_for_one_period_more_then_never() {
        let keys = TicketKeys::generate(100).unwrap();
        let t = ticketer_on(&keys, "fe");
        let ticket = t.seal(at(100), b"session").unwrap();
        assert_eq!(t.open(at(100), &ticket).as_deref(), Some(&b"session"[..]));
        assert_eq!(t.open(at(101), &ticket).as_deref(), Some(&b"session"[..]));
        assert_eq!(t.open(at(102), &ticket), None);
    }

    #[test]
    fn generations_started_in_different_periods_agree() {
        let master = TicketKeys::generate(100).unwrap();
        let old = ticketer_on(&master, "fe");
        // A generation started one period later, from the master's keys of then.
        let new = ticketer_on(&master.advanced_to(101), "fe");
        let sealed_before = old.seal(at(100), b"a").unwrap();
        assert_eq!(new.open(at(101), &sealed_before).as_deref(), Some(&b"a"[..]));
        let sealed_by_old_later = old.seal(at(101), b"b").unwrap();
        assert_eq!(new.open(at(101), &sealed_by_old_later).as_deref(), Some(&b"b"[..]));
        // Older secrets cannot be computed from newer ones.
        assert_ne!(master.advanced_to(102).previous, master.current);
    }

    #[test]
    fn frontends_and_tampering_are_refused() {
        let keys = TicketKeys::generate(7).unwrap();
        let (a, b) = (ticketer_on(&keys, "a"), ticketer_on(&keys, "b"));
        let ticket = a.seal(at(7), b"session").unwrap();
        assert_eq!(b.open(at(7), &ticket), None, "another frontend's ticket");
        for i in 0..ticket.len() {
            let mut bad = ticket.clone();
            bad[i] ^= 1;
            assert_eq!(a.open(at(7), &bad), None, "byte {i} flipped");
        }
        for len in 0..ticket.len() {
            assert_eq!(a.open(at(7), &ticket[..len]), None);
        }
    }

    #[test]
    fn debug_shows_no_secret() {
        let keys = TicketKeys::generate(1).unwrap();
        assert_eq!(format!("{keys:?}"), "TicketKeys { period: 1, .. }");
    }
}
