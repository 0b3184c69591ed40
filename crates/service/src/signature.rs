//! Webhook signatures: the schemes senders use, checked as a pure function of the secret, the
//! request's headers, its body and the time (given, so tests can check published examples).
//!
//! Every scheme is an HMAC under the source's secret: DataBuild's own and GitHub's of the body,
//! Stripe's of `t.body`, Slack's of `v0:timestamp:body`, and a generic one of the body with a
//! header, prefix, algorithm and encoding of the graph's choosing. Stripe and Slack sign a
//! timestamp too, which must be within the source's `signature_tolerance` of the clock, so a
//! captured request cannot be replayed later. Comparisons are in constant time (`verify_slice`).

use std::time::Duration;

use axum::http::HeaderMap;
use base64::Engine as _;
use databuild_core::{HashAlgorithm, SignatureEncoding, SignatureScheme};
use hmac::{Hmac, Mac};

/// Why a request's signature is refused (a 401 whose message says what to send).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the request has no `{header}` header; {what}")]
    MissingHeader {
        header: &'static str,
        what: &'static str,
    },
    #[error("the request has no `{0}` header, which carries its signature")]
    MissingGenericHeader(String),
    #[error("the signature is not {0}")]
    NotEncoded(&'static str),
    #[error("the `{header}` header is not of the form {form}")]
    Malformed {
        header: &'static str,
        form: &'static str,
    },
    #[error("the signed timestamp {timestamp} is {age} s from the service's clock, more than the tolerance of {tolerance} s; a sender signs each request when it sends it")]
    Stale {
        timestamp: i64,
        age: i64,
        tolerance: u64,
    },
    #[error("the signature does not match the body")]
    Mismatch,
}

/// Checks a request's signature under `secret`; `now` is the service's clock in Unix seconds.
pub fn verify(
    scheme: &SignatureScheme,
    tolerance: Duration,
    secret: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let header = |name: &'static str, what: &'static str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .ok_or(SignatureError::MissingHeader { header: name, what })
    };
    match scheme {
        SignatureScheme::DataBuild => {
            let given = header(
                "X-DataBuild-Signature",
                "send `X-DataBuild-Signature: sha256=<hex HMAC-SHA256 of the body>`",
            )?;
            let hex = given.strip_prefix("sha256=").unwrap_or(given);
            let sig = decode_hex(hex).ok_or(SignatureError::NotEncoded("hex"))?;
            check(HashAlgorithm::Sha256, secret, &[body], &sig)
        }
        SignatureScheme::GitHub => {
            let given = header(
                "X-Hub-Signature-256",
                "GitHub sends `X-Hub-Signature-256: sha256=<hex>` when the webhook has a secret",
            )?;
            let hex = given
                .strip_prefix("sha256=")
                .ok_or(SignatureError::Malformed {
                    header: "X-Hub-Signature-256",
                    form: "`sha256=<hex>`",
                })?;
            let sig = decode_hex(hex).ok_or(SignatureError::NotEncoded("hex"))?;
            check(HashAlgorithm::Sha256, secret, &[body], &sig)
        }
        SignatureScheme::Stripe => {
            const FORM: &str = "`t=<unix time>,v1=<hex>` (Stripe's)";
            let given = header(
                "Stripe-Signature",
                "Stripe sends `Stripe-Signature: t=<unix time>,v1=<hex>`",
            )?;
            let mut timestamp = None;
            let mut candidates = Vec::new();
            for part in given.split(',') {
                match part.trim().split_once('=') {
                    Some(("t", t)) => timestamp = Some(t),
                    Some(("v1", sig)) => candidates.push(sig),
                    _ => {}
                }
            }
            let malformed = SignatureError::Malformed {
                header: "Stripe-Signature",
                form: FORM,
            };
            let (Some(t), false) = (timestamp, candidates.is_empty()) else {
                return Err(malformed);
            };
            let at: i64 = t.parse().map_err(|_| malformed.clone())?;
            fresh(at, now, tolerance)?;
            let signed: [&[u8]; 3] = [t.as_bytes(), b".", body];
            // A secret being rolled signs with both keys: any v1 may match.
            let mut outcome = Err(SignatureError::Mismatch);
            for c in candidates {
                let sig = decode_hex(c).ok_or(SignatureError::NotEncoded("hex"))?;
                if check(HashAlgorithm::Sha256, secret, &signed, &sig).is_ok() {
                    outcome = Ok(());
                }
            }
            outcome
        }
        SignatureScheme::Slack => {
            let t = header(
                "X-Slack-Request-Timestamp",
                "Slack sends it with `X-Slack-Signature`",
            )?;
            let at: i64 = t.parse().map_err(|_| SignatureError::Malformed {
                header: "X-Slack-Request-Timestamp",
                form: "Unix seconds",
            })?;
            fresh(at, now, tolerance)?;
            let given = header(
                "X-Slack-Signature",
                "Slack sends `X-Slack-Signature: v0=<hex>`",
            )?;
            let hex = given.strip_prefix("v0=").ok_or(SignatureError::Malformed {
                header: "X-Slack-Signature",
                form: "`v0=<hex>`",
            })?;
            let sig = decode_hex(hex).ok_or(SignatureError::NotEncoded("hex"))?;
            check(
                HashAlgorithm::Sha256,
                secret,
                &[b"v0:", t.as_bytes(), b":", body],
                &sig,
            )
        }
        SignatureScheme::Generic(g) => {
            let given = headers
                .get(g.header.as_str())
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .ok_or_else(|| SignatureError::MissingGenericHeader(g.header.clone()))?;
            let encoded =
                given
                    .strip_prefix(g.prefix.as_str())
                    .ok_or(SignatureError::Malformed {
                        header: "signature",
                        form: "the configured prefix followed by the signature",
                    })?;
            let sig = match g.encoding {
                SignatureEncoding::Hex => {
                    decode_hex(encoded).ok_or(SignatureError::NotEncoded("hex"))?
                }
                SignatureEncoding::Base64 => base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| SignatureError::NotEncoded("base64"))?,
            };
            check(g.algorithm, secret, &[body], &sig)
        }
    }
}

/// Is a signed timestamp within `tolerance` of `now` (either way)?
fn fresh(at: i64, now: i64, tolerance: Duration) -> Result<(), SignatureError> {
    let age = now.saturating_sub(at);
    if age.unsigned_abs() > tolerance.as_secs() {
        return Err(SignatureError::Stale {
            timestamp: at,
            age,
            tolerance: tolerance.as_secs(),
        });
    }
    Ok(())
}

/// Checks `signature` against the HMAC of the concatenated `parts`, in constant time.
fn check(
    algorithm: HashAlgorithm,
    secret: &[u8],
    parts: &[&[u8]],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let ok = match algorithm {
        HashAlgorithm::Sha256 => {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("HMAC takes any key");
            parts.iter().for_each(|p| mac.update(p));
            mac.verify_slice(signature).is_ok()
        }
        HashAlgorithm::Sha1 => {
            let mut mac = Hmac::<sha1::Sha1>::new_from_slice(secret).expect("HMAC takes any key");
            parts.iter().for_each(|p| mac.update(p));
            mac.verify_slice(signature).is_ok()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The signature a DataBuild sender computes: `sha256=<hex HMAC-SHA256(secret, body)>`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac =
        Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    const MINUTES_5: Duration = Duration::from_secs(300);

    /// GitHub's documented example ("Validating webhook deliveries").
    #[test]
    fn github_docs_example() {
        let h = headers(&[(
            "x-hub-signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        )]);
        let secret = b"It's a Secret to Everybody";
        let verify = |body: &[u8]| verify(&SignatureScheme::GitHub, MINUTES_5, secret, &h, body, 0);
        assert_eq!(verify(b"Hello, World!"), Ok(()));
        assert_eq!(verify(b"Hello, World?"), Err(SignatureError::Mismatch));
    }

    /// Slack's documented example ("Verifying requests from Slack"), at its own time and 6
    /// minutes later.
    #[test]
    fn slack_docs_example() {
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let h = headers(&[
            ("x-slack-request-timestamp", "1531420618"),
            (
                "x-slack-signature",
                "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
            ),
        ]);
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let at = |now| verify(&SignatureScheme::Slack, MINUTES_5, secret, &h, body, now);
        assert_eq!(at(1531420618 + 10), Ok(()));
        assert!(matches!(
            at(1531420618 + 360),
            Err(SignatureError::Stale { age: 360, .. })
        ));
    }

    /// Stripe: `v1` is HMAC-SHA256 of `t.body` under the whole `whsec_...` secret. The vector
    /// was computed apart, with Python's `hmac` (`hmac.new(secret, b"1700000000." + body,
    /// sha256)`).
    #[test]
    fn stripe_vector_with_a_rolled_secret_and_tolerance() {
        let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
        let secret = b"whsec_test_secret";
        let h = headers(&[(
            "stripe-signature",
            &format!(
                "t=1700000000,v1={},v1={STRIPE_VECTOR},v0=abc",
                "00".repeat(32)
            ),
        )]);
        let at = |now| verify(&SignatureScheme::Stripe, MINUTES_5, secret, &h, body, now);
        assert_eq!(at(1700000100), Ok(()));
        assert!(matches!(at(1700000400), Err(SignatureError::Stale { .. })));
        let other = headers(&[("stripe-signature", "t=1700000000,v1=00")]);
        assert_eq!(
            verify(
                &SignatureScheme::Stripe,
                MINUTES_5,
                secret,
                &other,
                body,
                1700000000
            ),
            Err(SignatureError::Mismatch)
        );
        let bare = headers(&[("stripe-signature", "v1=00")]);
        assert!(matches!(
            verify(&SignatureScheme::Stripe, MINUTES_5, secret, &bare, body, 0),
            Err(SignatureError::Malformed { .. })
        ));
    }

    const STRIPE_VECTOR: &str = "c0475716eb2200f1fe97fcf35a3c05d1fd4f8ba9a07a596730c8d18bb87c0672";

    /// A generic scheme: HMAC-SHA1 in base64 after a prefix (vector from Python's `hmac`).
    #[test]
    fn generic_sha1_base64() {
        let scheme = SignatureScheme::generic(
            Some("X-Signature"),
            Some("sha1="),
            Some("sha1"),
            Some("base64"),
        )
        .unwrap();
        let h = headers(&[("x-signature", &format!("sha1={SHA1_VECTOR}"))]);
        assert_eq!(
            verify(
                &scheme,
                MINUTES_5,
                b"key",
                &h,
                b"The quick brown fox jumps over the lazy dog",
                0
            ),
            Ok(())
        );
        let h = headers(&[("x-signature", SHA1_VECTOR)]);
        assert!(matches!(
            verify(&scheme, MINUTES_5, b"key", &h, b"x", 0),
            Err(SignatureError::Malformed { .. })
        ));
    }

    /// HMAC-SHA1("key", "The quick brown fox jumps over the lazy dog") = de7c9b85…db4d9 in hex.
    const SHA1_VECTOR: &str = "3nybhbi3iqa8ino29wqQcBydtNk=";

    #[test]
    fn databuild_signs_what_it_verifies() {
        let h = headers(&[("x-databuild-signature", &sign("k", b"body"))]);
        assert_eq!(
            verify(&SignatureScheme::DataBuild, MINUTES_5, b"k", &h, b"body", 0),
            Ok(())
        );
    }
}
