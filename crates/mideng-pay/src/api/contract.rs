//! The parts of the OpenAPI document that many routes share, added once instead of repeated in
//! every handler's annotation, so that the document states every answer the service can give:
//!
//! - every refusal is `application/problem+json` with the [`ProblemBody`](super::ProblemBody)
//!   schema (named `Problem`), never `application/json`;
//! - an authenticated route can answer 401 (no or unknown key) and 503 (database unavailable),
//!   and one that a publishable key does not open (its security names only `api_key`, the
//!   secret key) 403 `key-not-allowed`;
//! - a route with a JSON body can answer 400 (not JSON), 413 (too large), 415 (not
//!   `application/json`) and 422 (valid JSON that breaks the contract);
//! - a route with an `Idempotency-Key` can answer 400 (key missing or malformed), 409 (the same
//!   key in flight), 422 (the same key with another request) and 503 (the record store
//!   unavailable, or the answer could not be stored);
//! - path and query identifiers follow [`ID_PATTERN`](crate::domain::ids::ID_PATTERN), an event
//!   id and the key and token headers their own bounds;
//! - a route with path parameters can answer 400 `invalid-path` (not percent-encoded UTF-8),
//!   and any route with a body 413 `payload-too-large`;
//! - the flows are [links](LINKS): an order's answer leads to its payments, a payment's to its
//!   refunds and its close, a deduction's to its reversal, an endpoint's to its changes, so
//!   that a client generator or a stateful fuzzer follows them from the document alone;
//! - a route open without a key says so (`security: []`), every operation has a description
//!   (its summary when it has nothing more to say), every tag is declared, and the document
//!   names its server (relative: the address it was fetched from).
//!
//! `redocly lint` and Spectral's `spectral:oas` check the result in CI (`scripts/openapi-lint`;
//! the rulesets, with the reason of each exception, are `redocly.yaml` and `.spectral.yaml`).
//!
//! The handlers' annotations keep what is particular to them (404, the business conflicts).

use std::collections::BTreeMap;

use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder, Schema};

use crate::domain::ids::{ID_BYTES_MAX, ID_PATTERN};

/// The media type of every refusal.
pub(super) const PROBLEM_JSON: &str = "application/problem+json";
/// The schema name of a refusal.
const PROBLEM: &str = "Problem";
/// Identifiers in paths and queries that follow the client identifier rule.
const IDENTIFIER_PARAMETERS: [&str; 7] = [
    "delivery_id",
    "endpoint_id",
    "order_id",
    "user_id",
    "payment_no",
    "refund_no",
    "deduction_no",
];
/// The bounds of an `Idempotency-Key` and of an `Idempotency-Token`: 1 to 255 visible ASCII
/// characters (`mideng::limits`).
const KEY_PATTERN: &str = "^[!-~]{1,255}$";
const KEY_BYTES_MAX: usize = 255;
/// The bounds of an event id in a query: 1 to 64 visible ASCII characters.
const EVENT_ID_PATTERN: &str = "^[!-~]{1,64}$";
const EVENT_ID_BYTES_MAX: usize = 64;
/// The tags, each with what it groups.
const TAGS: [(&str, &str); 12] = [
    ("tokens", "One-time submit tokens for creating a payment"),
    ("orders", "Orders and their transitions"),
    ("payments", "Payment attempts of an order, their close"),
    ("refunds", "Refunds of a paid payment"),
    (
        "channels",
        "The channels' asynchronous notifications (Alipay, WeChat Pay)",
    ),
    ("wallets", "Wallets: credits, deducts and their reversal"),
    ("entitlements", "What a paid order granted"),
    ("webhooks", "Merchant webhook endpoints and deliveries"),
    (
        "events",
        "What happened to the tenant, in order, for the webhook retention",
    ),
    (
        "reconciliation",
        "Cases found by matching the channels' daily bills",
    ),
    (
        "idempotency",
        "The idempotency records of the caller's keys",
    ),
    ("ops", "Liveness and readiness"),
];

/// The flows between operations: (operation, its statuses whose answer leads on, the link's
/// name, the operation it leads to, that operation's parameters and where each comes from).
type LinkRow = (
    &'static str,
    &'static [&'static str],
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);
const ORDER_ID: (&str, &str) = ("order_id", "$response.body#/order_id");
const PAYMENT_NO: (&str, &str) = ("payment_no", "$response.body#/payment_no");
const ENDPOINT_ID: (&str, &str) = ("endpoint_id", "$response.body#/endpoint_id");
const WALLET_USER: (&str, &str) = ("user_id", "$request.path.user_id");
const LINKS: &[LinkRow] = &[
    (
        "issue_token",
        &["201"],
        "PayWithToken",
        "create_payment",
        &[("Idempotency-Token", "$response.body#/token")],
    ),
    (
        "create_order",
        &["200", "201"],
        "ShowOrder",
        "show_order",
        &[ORDER_ID],
    ),
    (
        "create_order",
        &["200", "201"],
        "PayOrder",
        "create_payment",
        &[ORDER_ID],
    ),
    (
        "create_order",
        &["200", "201"],
        "TransitionOrder",
        "transition_order",
        &[ORDER_ID],
    ),
    (
        "create_payment",
        &["200", "201", "202"],
        "ShowPayment",
        "show_payment",
        &[PAYMENT_NO],
    ),
    (
        "create_payment",
        &["200", "201", "202"],
        "ClosePayment",
        "close_payment",
        &[PAYMENT_NO],
    ),
    (
        "create_payment",
        &["200", "201", "202"],
        "RefundPayment",
        "create_refund",
        &[PAYMENT_NO],
    ),
    (
        "show_payment",
        &["200"],
        "RefundPayment",
        "create_refund",
        &[PAYMENT_NO],
    ),
    (
        "create_refund",
        &["200", "201"],
        "ShowRefund",
        "show_refund",
        &[("refund_no", "$response.body#/refund_no")],
    ),
    (
        "credit_wallet",
        &["200"],
        "ShowWallet",
        "show_wallet",
        &[WALLET_USER],
    ),
    (
        "deduct_wallet",
        &["200"],
        "ShowWallet",
        "show_wallet",
        &[WALLET_USER],
    ),
    (
        "deduct_wallet",
        &["200"],
        "ReverseDeduction",
        "reverse_deduction",
        &[
            WALLET_USER,
            ("deduction_no", "$response.body#/deduction_no"),
        ],
    ),
    (
        "create_webhook_endpoint",
        &["200", "201"],
        "ShowEndpoint",
        "show_webhook_endpoint",
        &[ENDPOINT_ID],
    ),
    (
        "create_webhook_endpoint",
        &["200", "201"],
        "UpdateEndpoint",
        "update_webhook_endpoint",
        &[ENDPOINT_ID],
    ),
    (
        "create_webhook_endpoint",
        &["200", "201"],
        "RotateSecret",
        "rotate_webhook_secret",
        &[ENDPOINT_ID],
    ),
    (
        "create_webhook_endpoint",
        &["200", "201"],
        "DeleteEndpoint",
        "delete_webhook_endpoint",
        &[ENDPOINT_ID],
    ),
];

/// Adds the shared parts to the generated document.
pub(super) struct Contract;

impl utoipa::Modify for Contract {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut secret = Http::new(HttpAuthScheme::Bearer);
        secret.description = Some(
            "The tenant's secret key: opens every route. Keep it on the merchant's server."
                .to_owned(),
        );
        components.add_security_scheme("api_key", SecurityScheme::Http(secret));
        let mut publishable = Http::new(HttpAuthScheme::Bearer);
        publishable.description = Some(
            "The tenant's publishable key, which a checkout page may show: opens only the routes \
             that list it (a token, a payment of the order, that order's state and grant), and \
             only with that order's client secret in Mideng-Client-Secret (else 401 \
             client-secret-invalid). It never makes an order: the merchant's server prices. \
             Elsewhere it is 403 key-not-allowed."
                .to_owned(),
        );
        components.add_security_scheme("publishable_key", SecurityScheme::Http(publishable));
        openapi.servers = Some(vec![utoipa::openapi::server::Server::new("/")]);
        openapi.tags = Some(
            TAGS.iter()
                .map(|(name, description)| {
                    utoipa::openapi::tag::TagBuilder::new()
                        .name(*name)
                        .description(Some(*description))
                        .build()
                })
                .collect(),
        );
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                link(operation);
            }
        }
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                complete(operation);
            }
        }
        drop_unreferenced_schemas(openapi);
    }
}

/// Removes the component schemas nothing refers to: a page's item type is inlined in its
/// `PageView_*` schema, and utoipa registers it besides, where a linter rightly calls it unused.
fn drop_unreferenced_schemas(openapi: &mut OpenApi) {
    const PREFIX: &str = "#/components/schemas/";
    loop {
        let Ok(text) = serde_json::to_string(&*openapi) else {
            return;
        };
        let Some(components) = openapi.components.as_mut() else {
            return;
        };
        let unused: Vec<String> = components
            .schemas
            .keys()
            .filter(|name| !text.contains(&format!("\"{PREFIX}{name}\"")))
            .cloned()
            .collect();
        if unused.is_empty() {
            return;
        }
        for name in unused {
            components.schemas.remove(&name);
        }
    }
}

/// The operation's links ([`LINKS`]) on its answers.
fn link(operation: &mut Operation) {
    let Some(id) = operation.operation_id.clone() else {
        return;
    };
    for (from, statuses, name, to, parameters) in LINKS {
        if *from != id {
            continue;
        }
        for status in *statuses {
            let Some(RefOr::T(response)) = operation.responses.responses.get_mut(*status) else {
                continue;
            };
            let mut built = LinkBuilder::new().operation_id(*to);
            for (parameter, value) in *parameters {
                built = built.parameter(*parameter, *value);
            }
            response
                .links
                .insert((*name).to_owned(), RefOr::T(built.build()));
        }
    }
}

/// The shared answers and parameter bounds of one operation.
fn complete(operation: &mut Operation) {
    let authenticated = operation
        .security
        .as_ref()
        .is_some_and(|requirements| !requirements.is_empty());
    if operation.security.is_none() {
        // Open without a key (the probes, the channels' notifies, which carry their own
        // signatures): said, not left for a reader to guess.
        operation.security = Some(Vec::new());
    }
    if operation.description.is_none() {
        operation.description.clone_from(&operation.summary);
    }
    let with_body = operation.request_body.is_some();
    let mut with_path = false;
    let json_body = operation
        .request_body
        .as_ref()
        .is_some_and(|body| body.content.keys().any(|media| media == "application/json"));
    let mut keyed = false;
    for parameter in operation.parameters.iter_mut().flatten() {
        let name = parameter.name.as_str();
        if matches!(
            parameter.parameter_in,
            ParameterIn::Path | ParameterIn::Query
        ) && IDENTIFIER_PARAMETERS.contains(&name)
        {
            parameter.schema = Some(string_schema(ID_PATTERN, ID_BYTES_MAX));
        }
        with_path |= matches!(parameter.parameter_in, ParameterIn::Path);
        if matches!(parameter.parameter_in, ParameterIn::Query) && name == "event_id" {
            parameter.schema = Some(string_schema(EVENT_ID_PATTERN, EVENT_ID_BYTES_MAX));
        }
        if matches!(parameter.parameter_in, ParameterIn::Header) && name == "Idempotency-Key" {
            parameter.schema = Some(string_schema(KEY_PATTERN, KEY_BYTES_MAX));
            keyed = true;
        }
        if matches!(parameter.parameter_in, ParameterIn::Header) && name == "Idempotency-Token" {
            parameter.schema = Some(string_schema(KEY_PATTERN, KEY_BYTES_MAX));
        }
    }

    let mut added: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    if with_path {
        added.entry("400").or_default().push("invalid-path");
    }
    if with_body {
        added.entry("413").or_default().push("payload-too-large");
    }
    if authenticated {
        added.entry("401").or_default().push("unauthorized");
        added
            .entry("503")
            .or_default()
            .extend(["database-unavailable", "clock-unsynchronised"]);
        let publishable = operation.security.as_ref().is_some_and(|requirements| {
            serde_json::to_string(requirements)
                .is_ok_and(|requirements| requirements.contains("\"publishable_key\""))
        });
        if !publishable {
            added.entry("403").or_default().push("key-not-allowed");
        }
    }
    // The notifies have bodies too but answer in their channel's own format.
    if authenticated && json_body {
        added
            .entry("400")
            .or_default()
            .extend(["malformed-json", "body-unreadable"]);
        added
            .entry("415")
            .or_default()
            .push("unsupported-media-type");
        added
            .entry("422")
            .or_default()
            .extend(["invalid-request", "invalid-amount"]);
    }
    if keyed {
        added
            .entry("400")
            .or_default()
            .extend(["idempotency-key-missing", "idempotency-key-malformed"]);
        added.entry("409").or_default().push("in-progress");
        added
            .entry("422")
            .or_default()
            .push("idempotency-key-reused");
        added.entry("503").or_default().extend([
            "idempotency-store-unavailable",
            "response-not-stored",
            "service-stopping",
        ]);
    }

    let responses = &mut operation.responses.responses;
    for response in responses.values_mut() {
        if let RefOr::T(response) = response {
            as_problem_json(response);
        }
    }
    for (status, codes) in added {
        let shared = format!("Problem; `code`: {}", codes.join(", "));
        match responses.get_mut(status) {
            Some(RefOr::T(existing)) if existing.content.contains_key(PROBLEM_JSON) => {
                existing.description = format!("{}. {shared}", existing.description);
            }
            Some(_) => {}
            None => {
                responses.insert(status.to_owned(), RefOr::T(problem_response(&shared)));
            }
        }
    }
}

/// A refusal documented as `application/json` becomes `application/problem+json`, which is what
/// the service sends.
fn as_problem_json(response: &mut Response) {
    let is_problem = response.content.get("application/json").is_some_and(|content| {
        matches!(&content.schema, Some(RefOr::Ref(reference)) if reference.ref_location.ends_with(&format!("/{PROBLEM}")))
    });
    if is_problem && let Some(content) = response.content.shift_remove("application/json") {
        response.content.insert(PROBLEM_JSON.to_owned(), content);
    }
}

fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(PROBLEM)))
                .build(),
        )
        .build()
}

fn string_schema(pattern: &str, length_max: usize) -> RefOr<Schema> {
    RefOr::T(Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(pattern))
            .min_length(Some(1))
            .max_length(Some(length_max))
            .build(),
    ))
}
