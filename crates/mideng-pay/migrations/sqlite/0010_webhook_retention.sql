-- Webhook deliveries are kept for the webhook retention after their last change (a delivery, a
-- failure, a redelivery by hand; for a delivery waiting on a disabled endpoint, its creation),
-- then purged with their attempts in batches, oldest first.
CREATE INDEX IF NOT EXISTS pay_webhook_deliveries_untouched ON pay_webhook_deliveries (updated_at);
