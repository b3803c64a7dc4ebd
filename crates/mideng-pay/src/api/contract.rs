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
//! - path and query identifiers follow [`ID_PATTERN`](crate::domain::ids::ID_PATTERN), and the
//!   key header its own bounds.
//!
//! The handlers' annotations keep what is particular to them (404, the business conflicts).

use std::collections::BTreeMap;

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
/// The bounds of an `Idempotency-Key`: 1 to 255 visible ASCII characters (`mideng::limits`).
const KEY_PATTERN: &str = "^[!-~]{1,255}$";
const KEY_BYTES_MAX: usize = 255;

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
             that list it (a token, an order, its payment, that order's state and grant), on the \
             orders a publishable key made. Elsewhere it is 403 key-not-allowed."
                .to_owned(),
        );
        components.add_security_scheme("publishable_key", SecurityScheme::Http(publishable));
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
    }
}

/// The shared answers and parameter bounds of one operation.
fn complete(operation: &mut Operation) {
    let authenticated = operation
        .security
        .as_ref()
        .is_some_and(|requirements| !requirements.is_empty());
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
        if matches!(parameter.parameter_in, ParameterIn::Header) && name == "Idempotency-Key" {
            parameter.schema = Some(string_schema(KEY_PATTERN, KEY_BYTES_MAX));
            keyed = true;
        }
    }

    let mut added: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
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
        added.entry("413").or_default().push("payload-too-large");
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
        added
            .entry("503")
            .or_default()
            .extend(["idempotency-store-unavailable", "response-not-stored"]);
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
