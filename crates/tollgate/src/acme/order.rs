//! One issuance: a new order for the block's domains, each authorization's challenge
//! answered through the `ChallengeBook` (tls-alpn-01, http-01) or the `dns_hook` (dns-01),
//! then a CSR (a fresh ECDSA P-256 key, rcgen) and the chain. Every answer published for
//! this order is withdrawn when it ends, whatever the outcome.

use std::time::Duration;

use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewOrder, OrderStatus, Problem, RetryPolicy,
};

use crate::config::acme::{AcmeOrder, ChallengeBook, ChallengeKind, alpn_challenge_cert};

/// Longest a hook may run before the attempt counts as failed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the CA may take to validate, and then to issue.
const VALIDATION_TIMEOUT: Duration = Duration::from_secs(90);

/// What an order produced.
pub(super) struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
}

/// Why an order failed: a sentence, and the CA's problem document when it sent one.
#[derive(Debug)]
pub(super) struct Failure {
    pub what: String,
    pub problem: Option<Problem>,
}

impl Failure {
    pub(super) fn new(what: impl Into<String>) -> Self {
        Failure {
            what: what.into(),
            problem: None,
        }
    }

    pub(super) fn of(context: &str, e: instant_acme::Error) -> Self {
        match e {
            instant_acme::Error::Api(problem) => Failure {
                what: context.to_string(),
                problem: Some(problem),
            },
            other => Failure::new(super::describe(context, &other)),
        }
    }

    /// Whether the CA's problem is `urn:ietf:params:acme:error:<kind>` (`rateLimited`:
    /// the CA asks to wait; `accountDoesNotExist`).
    pub(super) fn is(&self, kind: &str) -> bool {
        self.problem
            .as_ref()
            .and_then(|p| p.r#type.as_deref())
            .and_then(|t| t.strip_prefix("urn:ietf:params:acme:error:"))
            == Some(kind)
    }
}

/// Published answers, withdrawn by `withdraw`.
#[derive(Default)]
struct Published {
    alpn: Vec<String>,
    http: Vec<String>,
    dns: Vec<(String, String)>,
}

pub(super) async fn issue(account: &Account, order: &AcmeOrder, book: &ChallengeBook) -> Result<Issued, Failure> {
    let mut published = Published::default();
    let outcome = run(account, order, book, &mut published).await;
    for name in &published.alpn {
        book.clear_alpn(name);
    }
    for token in &published.http {
        book.clear_http(token);
    }
    for (name, value) in &published.dns {
        if let Err(msg) = dns_hook(&order.dns_hook, "clear", name, value).await {
            tracing::warn!(record = %name, "acme: dns_hook clear: {msg}");
        }
    }
    outcome
}

async fn run(
    account: &Account,
    order: &AcmeOrder,
    book: &ChallengeBook,
    published: &mut Published,
) -> Result<Issued, Failure> {
    let identifiers: Vec<Identifier> = order
        .domains
        .iter()
        // A wildcard is ordered as written (`*.b.example`); its authorization is for the
        // base name with `wildcard: true` (RFC 8555 7.1.3).
        .map(|d| Identifier::Dns(d.clone()))
        .collect();
    let mut acme_order = account
        .new_order(&NewOrder::new(&identifiers))
        .await
        .map_err(|e| Failure::of("new order", e))?;
    let kind = match order.challenge {
        ChallengeKind::TlsAlpn01 => ChallengeType::TlsAlpn01,
        ChallengeKind::Http01 => ChallengeType::Http01,
        ChallengeKind::Dns01 => ChallengeType::Dns01,
    };
    let mut authorizations = acme_order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let mut authorization = authorization.map_err(|e| Failure::of("authorization", e))?;
        match authorization.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(Failure::new(format!("an authorization is {other:?}"))),
        }
        let mut challenge = authorization
            .challenge(kind.clone())
            .ok_or_else(|| Failure::new(format!("the CA offers no {} challenge", order.challenge.as_str())))?;
        let name = match challenge.identifier().identifier {
            Identifier::Dns(name) => name.clone(),
            other => return Err(Failure::new(format!("unexpected identifier {other:?}"))),
        };
        let key_authorization = challenge.key_authorization();
        match order.challenge {
            ChallengeKind::TlsAlpn01 => {
                let cert = alpn_challenge_cert(&name, key_authorization.digest().as_ref()).map_err(Failure::new)?;
                book.set_alpn(&name, cert);
                published.alpn.push(name.clone());
            }
            ChallengeKind::Http01 => {
                book.set_http(&challenge.token, key_authorization.as_str());
                published.http.push(challenge.token.clone());
            }
            ChallengeKind::Dns01 => {
                let record = format!("_acme-challenge.{name}");
                let value = key_authorization.dns_value();
                dns_hook(&order.dns_hook, "set", &record, &value)
                    .await
                    .map_err(Failure::new)?;
                published.dns.push((record, value));
            }
        }
        tracing::debug!(name = %name, challenge = order.challenge.as_str(), "acme: challenge ready");
        challenge
            .set_ready()
            .await
            .map_err(|e| Failure::of("challenge ready", e))?;
    }
    let retries = RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .timeout(VALIDATION_TIMEOUT);
    let status = acme_order
        .poll_ready(&retries)
        .await
        .map_err(|e| Failure::of("validation", e))?;
    if status != OrderStatus::Ready {
        return Err(validation_problem(&mut acme_order, status).await);
    }
    let key = rcgen::KeyPair::generate().map_err(|e| Failure::new(format!("key: {e}")))?;
    let mut params = rcgen::CertificateParams::new(order.domains.clone()).map_err(|e| Failure::new(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| Failure::new(format!("CSR: {e}")))?;
    acme_order
        .finalize_csr(csr.der())
        .await
        .map_err(|e| Failure::of("finalize", e))?;
    let chain_pem = acme_order
        .poll_certificate(&retries)
        .await
        .map_err(|e| Failure::of("certificate", e))?;
    Ok(Issued {
        chain_pem,
        key_pem: key.serialize_pem(),
    })
}

/// An order that did not become ready: the first challenge error the CA recorded.
async fn validation_problem(acme_order: &mut instant_acme::Order, status: OrderStatus) -> Failure {
    let mut authorizations = acme_order.authorizations();
    while let Some(Ok(authorization)) = authorizations.next().await {
        if let Some(problem) = authorization.challenges.iter().find_map(|c| c.error.clone()) {
            return Failure {
                what: format!("validation of {}", authorization.identifier()),
                problem: Some(problem),
            };
        }
    }
    Failure::new(format!("the order is {status:?}"))
}

/// Runs `hook... ACTION NAME VALUE` (`set` before validation, `clear` after).
async fn dns_hook(hook: &[String], action: &str, name: &str, value: &str) -> Result<(), String> {
    let (program, args) = hook.split_first().ok_or("no dns_hook")?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .args([action, name, value])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(HOOK_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("{program} {action}: no exit within {HOOK_TIMEOUT:?}"))?
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "{program} {action} {name}: {}: {}",
        output.status,
        stderr.trim()
    ))
}
