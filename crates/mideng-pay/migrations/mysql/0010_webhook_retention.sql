-- Webhook deliveries are kept for the webhook retention after their last change (a delivery, a
-- failure, a redelivery by hand; for a delivery waiting on a disabled endpoint, its creation),
-- then purged with their attempts in batches, oldest first.
ALTER TABLE pay_webhook_deliveries ADD KEY pay_webhook_deliveries_untouched (updated_at);
