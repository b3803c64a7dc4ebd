//! How the page probes' answers are judged, apart from sending them: each probe's rule as a
//! pure function of what came back ([`Seen`]), to [`Outcome`] — held, unanswered or crossed —
//! with its tests.

use mideng_pay::limits::PAGE_TOKENS_PER_ORDER_MAX;
use serde_json::Value;

use super::super::Outcome;
use super::KEY_NOT_ALLOWED;
use crate::storm::Answer;

/// One answer as the judges read it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Seen {
    pub(super) status: u16,
    /// Its JSON body (`Null` when there is none).
    pub(super) body: Value,
    /// Whether it said when to come back (`Retry-After`).
    retry_after: bool,
}

impl Seen {
    pub(super) fn of(answer: Answer) -> Self {
        Self {
            status: answer.status,
            body: answer.json(),
            retry_after: answer.retry_after.is_some(),
        }
    }

    /// Its problem code (empty when it is no problem).
    pub(super) fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or_default()
    }

    pub(super) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// An answer that says nothing of what the request would have done: a 5xx, a rate, a key
    /// in progress, a token lost with a restarted instance.
    fn tells_nothing(&self) -> bool {
        self.status >= 500
            || self.status == 429
            || self.status == 409 && matches!(self.code(), "in-progress" | "duplicate-submission")
            || self.code().starts_with("idempotency-token-")
    }

    fn describe(&self) -> String {
        format!("{} {}", self.status, self.code())
    }
}

/// `answer` against the one refusal `expected`.
pub(super) fn against(expected: (u16, &str), answer: Option<&Seen>) -> Outcome {
    Outcome::of_refusal(
        expected,
        answer
            .map(|answer| (answer.status, answer.code().to_owned()))
            .as_ref(),
    )
}

/// Whether an order's view says what `body` priced.
fn priced_as(view: &Value, body: &Value) -> bool {
    ["user_id", "amount", "entitlement"]
        .iter()
        .all(|field| view[field] == body[field])
}

/// *Price from the page*: the page's creation must be refused 403 `key-not-allowed`, and the
/// merchant's server must not find the order (`lookup`, its read of the id) afterwards.
pub(super) fn judge_price(answer: Option<&Seen>, lookup: Option<&Seen>) -> Outcome {
    if lookup.is_some_and(|lookup| lookup.status == 200) {
        return Outcome::Crossed {
            status: answer.map(|answer| answer.status),
            how: format!(
                "{}, and the order exists: the merchant's server reads it",
                answer.map_or_else(
                    || "had no answer".to_owned(),
                    |answer| format!("was answered {}", answer.describe())
                )
            ),
        };
    }
    against(KEY_NOT_ALLOWED, answer)
}

/// *Order-id squatting* on a fresh id: the page's creation refused 403 `key-not-allowed`, and
/// the merchant's own creation of `body` after it (`made`, its answers) 201 — or 200 with its
/// own order after an attempt of its own went unanswered (that attempt made it).
pub(super) fn judge_squat(page: Option<&Seen>, made: &[Option<Seen>], body: &Value) -> Outcome {
    let squat = against(KEY_NOT_ALLOWED, page);
    if let Outcome::Crossed { .. } = squat {
        return squat;
    }
    let lost_before = made
        .iter()
        .rev()
        .skip(1)
        .any(|answer| answer.as_ref().is_none_or(|answer| answer.status >= 500));
    let merchant = match made.last() {
        None | Some(None) => Outcome::Unanswered,
        Some(Some(answer)) if answer.status == 201 => Outcome::Held,
        Some(Some(answer))
            if answer.status == 200 && lost_before && priced_as(&answer.body, body) =>
        {
            Outcome::Held
        }
        Some(Some(answer)) if answer.status >= 500 => Outcome::Unanswered,
        Some(Some(answer)) => Outcome::Crossed {
            status: None,
            how: format!(
                "then the merchant's server's own creation of it was answered {}, not 201{}",
                answer.describe(),
                if answer.status == 200 {
                    format!(
                        " (an order of {} fen for {})",
                        answer.body["amount"], answer.body["user_id"]
                    )
                } else {
                    String::new()
                }
            ),
        },
    };
    match (squat, merchant) {
        (_, crossed @ Outcome::Crossed { .. }) => crossed,
        (Outcome::Held, _) => Outcome::Held,
        _ => Outcome::Unanswered,
    }
}

/// *Replay across key kinds*, the page's way: the page paying its own order `own` under the key
/// of the merchant's payment `theirs` must be answered with a payment of `own` that is not
/// `theirs`.
pub(super) fn judge_page_reuse(answer: Option<&Seen>, own: &str, theirs: &str) -> Outcome {
    let Some(answer) = answer else {
        return Outcome::Unanswered;
    };
    if answer.ok() {
        let number = answer.body["payment_no"].as_str();
        let order = answer.body["order_id"].as_str();
        return if number == Some(theirs) {
            Outcome::Crossed {
                status: Some(answer.status),
                how: format!(
                    "was answered {} with the merchant's payment {theirs}",
                    answer.status
                ),
            }
        } else if order != Some(own) {
            Outcome::Crossed {
                status: Some(answer.status),
                how: format!(
                    "was answered {} for order {}, not the page's own",
                    answer.status,
                    order.unwrap_or("(none)")
                ),
            }
        } else {
            Outcome::Held
        };
    }
    if answer.tells_nothing() {
        return Outcome::Unanswered;
    }
    Outcome::Crossed {
        status: Some(answer.status),
        how: format!(
            "was answered {}, not the page's own payment",
            answer.describe()
        ),
    }
}

/// *Replay across key kinds*, the merchant's way: the page's request under the key for the
/// merchant's order `order` must be 404 `not-found` (not its order), and the merchant's own
/// request under the same key after it must be its payment of `order`, not the page's 404.
pub(super) fn judge_merchant_reuse(
    page: Option<&Seen>,
    merchant: Option<&Seen>,
    order: &str,
) -> Outcome {
    let page_outcome = match page {
        None => Outcome::Unanswered,
        Some(page) if page.status == 404 && page.code() == "not-found" => Outcome::Held,
        Some(page) if page.tells_nothing() => Outcome::Unanswered,
        Some(page) => {
            return Outcome::Crossed {
                status: Some(page.status),
                how: format!(
                    "the page's request for the merchant's order was answered {}, not 404 not-found",
                    page.describe()
                ),
            };
        }
    };
    let merchant_outcome = match merchant {
        None => Outcome::Unanswered,
        Some(merchant) if merchant.ok() && merchant.body["order_id"] == order => Outcome::Held,
        Some(merchant) if merchant.status >= 500 => Outcome::Unanswered,
        Some(merchant) => Outcome::Crossed {
            status: None,
            how: format!(
                "then the merchant's server's own request under the key was answered {}, not \
                 its payment of {order}",
                merchant.describe()
            ),
        },
    };
    match (page_outcome, merchant_outcome) {
        (_, crossed @ Outcome::Crossed { .. }) => crossed,
        (Outcome::Held, Outcome::Held) => Outcome::Held,
        _ => Outcome::Unanswered,
    }
}

/// *Token exhaustion*: of the page's burst at most [`PAGE_TOKENS_PER_ORDER_MAX`] issued, every
/// other 429 `too-many-tokens` or `rate-limited` with `Retry-After`; then the merchant's
/// server's own token (`server`) 201.
pub(super) fn judge_burst(burst: &[Option<Seen>], server: Option<&Seen>) -> Outcome {
    let cap = usize::try_from(PAGE_TOKENS_PER_ORDER_MAX).unwrap_or(usize::MAX);
    let issued = burst
        .iter()
        .flatten()
        .filter(|answer| answer.status == 201)
        .count();
    if issued > cap {
        return Outcome::Crossed {
            status: Some(201),
            how: format!(
                "issued {issued} of {} tokens to one order's page, more than its {cap}",
                burst.len()
            ),
        };
    }
    let mut unanswered = false;
    for answer in burst {
        match answer {
            None => unanswered = true,
            Some(answer) if answer.status == 201 => {}
            Some(answer) if answer.status >= 500 => unanswered = true,
            Some(answer)
                if answer.status == 429
                    && matches!(answer.code(), "too-many-tokens" | "rate-limited")
                    && answer.retry_after => {}
            Some(answer) => {
                return Outcome::Crossed {
                    status: Some(answer.status),
                    how: format!(
                        "answered a token request of the burst {}{}, not 201 or 429 \
                         too-many-tokens / rate-limited with Retry-After",
                        answer.describe(),
                        if answer.retry_after {
                            ""
                        } else {
                            " without Retry-After"
                        }
                    ),
                };
            }
        }
    }
    match server {
        None => Outcome::Unanswered,
        Some(server) if server.status == 201 && !unanswered => Outcome::Held,
        Some(server) if server.status == 201 || server.status >= 500 => Outcome::Unanswered,
        Some(server) => Outcome::Crossed {
            status: None,
            how: format!(
                "then answered the merchant's server's own token request {}, not 201",
                server.describe()
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::order_body;
    use super::*;

    fn seen(status: u16, body: Value) -> Seen {
        Seen {
            status,
            body,
            retry_after: status == 429,
        }
    }

    fn problem(status: u16, code: &str) -> Seen {
        seen(status, json!({"code": code}))
    }

    fn crossed(outcome: &Outcome) -> bool {
        matches!(outcome, Outcome::Crossed { .. })
    }

    #[test]
    fn a_price_from_the_page_holds_only_refused_and_absent() {
        let refused = problem(403, "key-not-allowed");
        let absent = problem(404, "not-found");
        let exists = seen(200, json!({"order_id": "o"}));
        assert_eq!(judge_price(Some(&refused), Some(&absent)), Outcome::Held);
        assert_eq!(judge_price(Some(&refused), None), Outcome::Held);
        assert_eq!(judge_price(None, Some(&absent)), Outcome::Unanswered);
        assert!(crossed(&judge_price(Some(&refused), Some(&exists))));
        assert!(crossed(&judge_price(None, Some(&exists))));
        let made = seen(201, json!({"order_id": "o"}));
        assert_eq!(
            judge_price(Some(&made), Some(&exists)),
            Outcome::Crossed {
                status: Some(201),
                how: "was answered 201 , and the order exists: the merchant's server reads it"
                    .to_owned()
            }
        );
        assert!(crossed(&judge_price(
            Some(&problem(401, "client-secret-invalid")),
            Some(&absent)
        )));
    }

    #[test]
    fn a_squatted_id_holds_when_the_merchant_still_makes_its_order() {
        let body = order_body("o", "u", 50, Some(("vip-month", 1)));
        let refused = problem(403, "key-not-allowed");
        let created = seen(201, body.clone());
        assert_eq!(
            judge_squat(Some(&refused), &[Some(created.clone())], &body),
            Outcome::Held
        );
        // Its own order, its first answer lost: the merchant's attempt made it.
        let again = seen(200, body.clone());
        assert_eq!(
            judge_squat(Some(&refused), &[None, Some(again.clone())], &body),
            Outcome::Held
        );
        // 200 at once: the order was there before the merchant's server made it.
        assert!(crossed(&judge_squat(Some(&refused), &[Some(again)], &body)));
        // The page's order under the id, then the merchant's own refused as a reuse.
        let page_order = seen(200, order_body("o", "victim", 1, Some(("vip-month", 1000))));
        assert!(crossed(&judge_squat(
            Some(&refused),
            &[None, Some(page_order)],
            &body
        )));
        assert!(crossed(&judge_squat(
            Some(&refused),
            &[Some(problem(422, "order-id-reused"))],
            &body
        )));
        assert!(crossed(&judge_squat(
            Some(&seen(201, json!({}))),
            &[Some(created.clone())],
            &body
        )));
        assert_eq!(
            judge_squat(None, &[Some(created)], &body),
            Outcome::Unanswered
        );
        assert_eq!(judge_squat(Some(&refused), &[None], &body), Outcome::Held);
    }

    #[test]
    fn a_page_reusing_the_merchants_key_gets_its_own_payment_only() {
        let own = seen(201, json!({"payment_no": "P-PAGE", "order_id": "page"}));
        assert_eq!(
            judge_page_reuse(Some(&own), "page", "P-SHOP"),
            Outcome::Held
        );
        let replayed = seen(201, json!({"payment_no": "P-SHOP", "order_id": "shop"}));
        assert_eq!(
            judge_page_reuse(Some(&replayed), "page", "P-SHOP"),
            Outcome::Crossed {
                status: Some(201),
                how: "was answered 201 with the merchant's payment P-SHOP".to_owned()
            }
        );
        let elsewhere = seen(200, json!({"payment_no": "P-X", "order_id": "shop"}));
        assert!(crossed(&judge_page_reuse(
            Some(&elsewhere),
            "page",
            "P-SHOP"
        )));
        // A key the page never used, refused as reused: the scopes are one.
        assert!(crossed(&judge_page_reuse(
            Some(&problem(422, "idempotency-key-reused")),
            "page",
            "P-SHOP"
        )));
        for nothing in [
            problem(503, "database-unavailable"),
            problem(429, "rate-limited"),
            problem(409, "in-progress"),
            problem(409, "idempotency-token-invalid"),
        ] {
            assert_eq!(
                judge_page_reuse(Some(&nothing), "page", "P-SHOP"),
                Outcome::Unanswered
            );
        }
        assert_eq!(
            judge_page_reuse(None, "page", "P-SHOP"),
            Outcome::Unanswered
        );
    }

    #[test]
    fn the_merchant_reusing_a_pages_key_gets_its_payment_not_the_pages_404() {
        let not_found = problem(404, "not-found");
        let paid = seen(201, json!({"payment_no": "P1", "order_id": "shop"}));
        assert_eq!(
            judge_merchant_reuse(Some(&not_found), Some(&paid), "shop"),
            Outcome::Held
        );
        assert!(crossed(&judge_merchant_reuse(
            Some(&not_found),
            Some(&not_found),
            "shop"
        )));
        // The page paid the merchant's order.
        assert!(crossed(&judge_merchant_reuse(
            Some(&paid),
            Some(&paid),
            "shop"
        )));
        assert_eq!(
            judge_merchant_reuse(Some(&not_found), None, "shop"),
            Outcome::Unanswered
        );
        assert_eq!(
            judge_merchant_reuse(None, Some(&paid), "shop"),
            Outcome::Unanswered
        );
    }

    #[test]
    fn a_burst_holds_with_at_most_the_cap_issued_and_the_rest_told_to_wait() {
        let token = seen(201, json!({"token": "t"}));
        let full = problem(429, "too-many-tokens");
        let rated = problem(429, "rate-limited");
        let mut burst: Vec<Option<Seen>> = vec![Some(token.clone()); 5];
        burst.extend(vec![Some(full.clone()); 5]);
        burst.extend(vec![Some(rated); 2]);
        assert_eq!(judge_burst(&burst, Some(&token)), Outcome::Held);
        // The merchant's server refused its own token: the pages ate its places.
        assert!(crossed(&judge_burst(&burst, Some(&full))));
        assert_eq!(judge_burst(&burst, None), Outcome::Unanswered);
        // A sixth token.
        let mut six = burst.clone();
        six[5] = Some(token.clone());
        assert_eq!(
            judge_burst(&six, Some(&token)),
            Outcome::Crossed {
                status: Some(201),
                how: "issued 6 of 12 tokens to one order's page, more than its 5".to_owned()
            }
        );
        // A refusal without Retry-After, or of another kind.
        let mut bare = burst.clone();
        bare[6] = Some(Seen {
            retry_after: false,
            ..full
        });
        assert!(crossed(&judge_burst(&bare, Some(&token))));
        let mut other = burst.clone();
        other[7] = Some(problem(401, "client-secret-invalid"));
        assert!(crossed(&judge_burst(&other, Some(&token))));
        // A fault's: neither.
        let mut lost = burst;
        lost[8] = None;
        assert_eq!(judge_burst(&lost, Some(&token)), Outcome::Unanswered);
    }
}
