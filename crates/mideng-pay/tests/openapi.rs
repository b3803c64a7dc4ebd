//! The OpenAPI document is generated from the handlers; the committed copy in
//! `docs/openapi.json` must match it, so that a change to the API shows up in review. After an
//! intended change: `cargo run -p mideng-cli -- openapi > docs/openapi.json`.

#[test]
fn the_committed_document_matches_the_code() {
    let generated = mideng_pay::api::openapi_json().expect("renders");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed.trim_end() == generated.trim_end(),
        "{} is out of date: run `cargo run -p mideng-cli -- openapi > docs/openapi.json`",
        path.display()
    );
    let document: serde_json::Value = serde_json::from_str(&generated).expect("JSON");
    for path in [
        "/v1/tokens",
        "/v1/orders",
        "/v1/orders/{order_id}",
        "/v1/orders/{order_id}/transitions",
        "/v1/orders/{order_id}/payments",
        "/v1/payments/{payment_no}",
        "/v1/payments/{payment_no}/close",
        "/v1/channels/alipay/notify",
        "/v1/channels/wechat/notify",
        "/v1/wallets/{user_id}/credit",
        "/v1/wallets/{user_id}/deduct",
        "/v1/wallets/{user_id}",
        "/v1/idempotency-keys/{key}",
    ] {
        assert!(document["paths"][path].is_object(), "{path} is documented");
    }
}

fn document() -> serde_json::Value {
    let generated = mideng_pay::api::openapi_json().expect("renders");
    serde_json::from_str(&generated).expect("JSON")
}

fn operations(document: &serde_json::Value) -> Vec<(String, &serde_json::Value)> {
    let mut found = Vec::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            found.push((format!("{} {path}", method.to_uppercase()), operation));
        }
    }
    found
}

#[test]
fn every_operation_has_its_own_id() {
    let document = document();
    let mut ids: Vec<&str> = operations(&document)
        .iter()
        .map(|(name, operation)| {
            operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} has an operationId"))
        })
        .collect();
    let count = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), count, "operationIds are unique: {ids:?}");
}

#[test]
fn every_refusal_is_a_documented_problem_document() {
    let document = document();
    assert!(document["components"]["schemas"]["Problem"].is_object());
    assert_eq!(
        document["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    for (name, operation) in operations(&document) {
        let responses = operation["responses"].as_object().expect("responses");
        for (status, response) in responses {
            let content = response["content"].as_object();
            if status.starts_with('4') || status.starts_with('5') {
                if name == "POST /v1/channels/wechat/notify" || name == "GET /readyz" {
                    continue; // WeChat Pay's own answer format; a health answer
                }
                let content = content.unwrap_or_else(|| panic!("{name} {status} has a body"));
                assert_eq!(
                    content.keys().collect::<Vec<_>>(),
                    ["application/problem+json"],
                    "{name} {status}"
                );
                assert_eq!(
                    content["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/Problem",
                    "{name} {status}"
                );
            }
        }
        let security = operation["security"]
            .as_array()
            .unwrap_or_else(|| panic!("{name} says whether it takes a key"));
        let authenticated = !security.is_empty();
        if authenticated {
            for status in ["401", "503"] {
                assert!(responses.contains_key(status), "{name} documents {status}");
            }
        }
        if operation["requestBody"]["content"]["application/json"].is_object() && authenticated {
            for status in ["400", "413", "415", "422"] {
                assert!(responses.contains_key(status), "{name} documents {status}");
            }
        }
    }
}

#[test]
fn amounts_ids_quantities_and_keys_carry_the_services_bounds() {
    use mideng_pay::domain::ids::{ID_BYTES_MAX, ID_PATTERN};
    use mideng_pay::domain::money::{AMOUNT_FEN_MAX, AMOUNT_FEN_MIN};
    let document = document();
    let schemas = &document["components"]["schemas"];
    for schema in ["CreateOrder", "CreditBody", "DeductBody", "CreateRefund"] {
        let amount = &schemas[schema]["properties"]["amount"];
        assert_eq!(amount["minimum"], AMOUNT_FEN_MIN, "{schema}");
        assert_eq!(amount["maximum"], AMOUNT_FEN_MAX, "{schema}");
    }
    for (schema, field) in [
        ("CreateOrder", "order_id"),
        ("CreateOrder", "user_id"),
        ("EntitlementBody", "sku"),
        ("CreditBody", "reference"),
        ("DeductBody", "order_id"),
    ] {
        let id = &schemas[schema]["properties"][field];
        assert_eq!(id["pattern"], ID_PATTERN, "{schema}.{field}");
        assert_eq!(id["maxLength"], ID_BYTES_MAX, "{schema}.{field}");
    }
    let quantity = &schemas["EntitlementBody"]["properties"]["quantity"];
    assert_eq!(
        (&quantity["minimum"], &quantity["maximum"]),
        (&1.into(), &1000.into())
    );

    for (name, operation) in operations(&document) {
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            match parameter["name"].as_str() {
                Some(
                    "user_id" | "order_id" | "payment_no" | "refund_no" | "deduction_no"
                    | "delivery_id" | "endpoint_id",
                ) => {
                    assert_eq!(parameter["schema"]["pattern"], ID_PATTERN, "{name}");
                }
                Some("Idempotency-Key") => {
                    assert_eq!(parameter["schema"]["maxLength"], 255, "{name}");
                    let required = name.contains("/wallets/")
                        || name.ends_with("/refunds")
                        || name.ends_with("/rotate-secret");
                    assert_eq!(
                        parameter["required"], required,
                        "{name}: required only where required"
                    );
                }
                _ => {}
            }
        }
    }
}

/// The schema `reference` (`#/components/schemas/…`) names, or `schema` itself.
fn resolved<'a>(
    document: &'a serde_json::Value,
    schema: &'a serde_json::Value,
) -> &'a serde_json::Value {
    match schema["$ref"].as_str() {
        Some(reference) => document
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{reference} resolves")),
        None => schema,
    }
}

#[test]
fn every_link_leads_to_an_operation_with_the_values_it_needs() {
    let document = document();
    let operations = operations(&document);
    let by_id = |id: &str| {
        operations
            .iter()
            .find(|(_, operation)| operation["operationId"] == id)
            .map(|(_, operation)| *operation)
    };
    let mut links = 0;
    for (name, operation) in &operations {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            for (link_name, link) in response["links"].as_object().into_iter().flatten() {
                links += 1;
                let here = format!("{name} {status} {link_name}");
                let target = by_id(link["operationId"].as_str().expect("operationId"))
                    .unwrap_or_else(|| panic!("{here}: no such operation"));
                for (parameter, source) in link["parameters"].as_object().expect("parameters") {
                    assert!(
                        target["parameters"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|declared| declared["name"] == parameter.as_str()),
                        "{here}: the target has no parameter {parameter}"
                    );
                    let source = source.as_str().expect("an expression");
                    if let Some(field) = source.strip_prefix("$response.body#/") {
                        let schema = resolved(
                            &document,
                            &response["content"]["application/json"]["schema"],
                        );
                        assert!(
                            schema["properties"][field].is_object(),
                            "{here}: the answer has no {field}"
                        );
                    } else if let Some(field) = source.strip_prefix("$request.path.") {
                        assert!(
                            operation["parameters"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|declared| declared["name"] == field
                                    && declared["in"] == "path"),
                            "{here}: the request has no path parameter {field}"
                        );
                    } else {
                        panic!("{here}: {source} is not an expression of this document");
                    }
                }
            }
        }
    }
    // Orders to payments, payments to refunds and closes, deductions to reversals, endpoints to
    // their changes, tokens to payments.
    assert!(links >= 16, "{links} links");
}
