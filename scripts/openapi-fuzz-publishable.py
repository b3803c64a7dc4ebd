# A schemathesis check for the fuzzer's run with a publishable key (scripts/openapi-fuzz): the
# key a checkout page shows every visitor must open the checkout's operations only. Any 2xx
# answer to an authenticated operation outside them fails the run, whatever the document says
# of that operation's security: the list below is the rule, written down apart from the code.
import schemathesis

# What a checkout page does with an order's client secret: a token, a payment of that order,
# its state and its grant. Never an order: the merchant's server prices.
CHECKOUT_OPERATIONS = {
    "issue_token",
    "show_order",
    "create_payment",
    "list_entitlements",
}


@schemathesis.check
def only_checkout_operations_open(ctx, response, case):
    """A publishable key gets a 2xx from the checkout's operations alone."""
    definition = case.operation.definition.raw
    authenticated = bool(definition.get("security"))
    operation = definition.get("operationId", case.operation.label)
    if authenticated and 200 <= response.status_code < 300 and operation not in CHECKOUT_OPERATIONS:
        raise AssertionError(
            f"the publishable key opened {operation} ({response.status_code}); "
            "only the checkout's operations may answer it 2xx"
        )
