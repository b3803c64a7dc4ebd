//! End-to-end tests of the payment service: the real router, database, Redis and the channel
//! simulator, on SQLite, PostgreSQL and MySQL/MariaDB.

mod attacks;
mod bills;
mod bounds;
mod clock;
mod endpoints;
mod event_log;
mod events;
mod harness;
mod inputs;
mod instances;
mod keys;
mod lifecycle;
mod links;
mod pages;
mod parked;
mod payments;
mod purge;
mod reconcile;
mod refunds;
mod telemetry;
mod transport;
mod wallets;
mod webhook_targets;
mod webhooks;

/// Generates `<backend>::<case>` for each case (an async fn taking the backend).
macro_rules! backend_suite {
    ($($case:path => $name:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() { $case(crate::harness::Backend::Sqlite).await; } )*
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() { $case(crate::harness::Backend::Postgres).await; } )*
        }
        mod mysql {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() { $case(crate::harness::Backend::Mysql).await; } )*
        }
    };
}

backend_suite!(
    crate::clock::a_clock_far_from_the_databases_refuses_until_it_agrees => a_clock_far_from_the_databases_refuses_until_it_agrees,
    crate::payments::identical_concurrent_creations_make_one_payment => identical_concurrent_creations_make_one_payment,
    crate::payments::fresh_tokens_race_to_one_pending_payment => fresh_tokens_race_to_one_pending_payment,
    crate::payments::a_used_token_creates_nothing => a_used_token_creates_nothing,
    crate::payments::duplicate_and_concurrent_notifies_pay_once => duplicate_and_concurrent_notifies_pay_once,
    crate::payments::close_racing_payment_is_never_both => close_racing_payment_is_never_both,
    crate::payments::forged_callbacks_change_nothing => forged_callbacks_change_nothing,
    crate::attacks::hostile_notifies_move_no_money => hostile_notifies_move_no_money,
    crate::attacks::hostile_refund_notifies_settle_nothing => hostile_refund_notifies_settle_nothing,
    crate::payments::a_lost_channel_answer_keeps_the_attempt => a_lost_channel_answer_keeps_the_attempt,
    crate::payments::a_close_before_the_scan_never_strands_a_payment => a_close_before_the_scan_never_strands_a_payment,
    crate::reconcile::lost_notifies_are_found_by_reconciliation => lost_notifies_are_found_by_reconciliation,
    crate::reconcile::expired_payments_are_closed_and_orders_canceled => expired_payments_are_closed_and_orders_canceled,
    crate::reconcile::a_late_success_for_a_closed_payment_is_recorded => a_late_success_for_a_closed_payment_is_recorded,
    crate::reconcile::unpaid_payments_never_hide_a_lost_notify => unpaid_payments_never_hide_a_lost_notify,
    crate::lifecycle::every_arrival_order_of_two_attempts_keeps_one_charge => every_arrival_order_of_two_attempts_keeps_one_charge,
    crate::bills::the_bill_finds_every_charge_and_keeps_every_disagreement => the_bill_finds_every_charge_and_keeps_every_disagreement,
    crate::events::a_paid_order_is_granted_once => a_paid_order_is_granted_once,
    crate::parked::a_failing_event_is_parked_and_replayed_once => a_failing_event_is_parked_and_replayed_once,
    crate::refunds::partial_and_full_refunds_move_money_once => partial_and_full_refunds_move_money_once,
    crate::refunds::concurrent_refunds_never_exceed_the_payment => concurrent_refunds_never_exceed_the_payment,
    crate::refunds::a_lost_refund_answer_is_settled_once => a_lost_refund_answer_is_settled_once,
    crate::refunds::a_payment_after_cancel_is_refunded_once => a_payment_after_cancel_is_refunded_once,
    crate::webhooks::webhooks_retry_under_one_id_until_acknowledged => webhooks_retry_under_one_id_until_acknowledged,
    crate::endpoints::an_endpoint_is_rotated_disabled_moved_and_deleted => an_endpoint_is_rotated_disabled_moved_and_deleted,
    crate::event_log::a_tenant_reads_what_happened_in_order_a_page_at_a_time => a_tenant_reads_what_happened_in_order_a_page_at_a_time,
    crate::webhooks::a_stalled_endpoint_delays_only_its_own_deliveries => a_stalled_endpoint_delays_only_its_own_deliveries,
    crate::webhooks::a_read_of_due_deliveries_takes_a_few_per_endpoint_and_leaves_out_what_is_held => a_read_of_due_deliveries_takes_a_few_per_endpoint_and_leaves_out_what_is_held,
    crate::wallets::one_key_debits_once => one_key_debits_once,
    crate::wallets::one_key_sent_with_different_deducts_at_once_debits_once => one_key_sent_with_different_deducts_at_once_debits_once,
    crate::wallets::identical_concurrent_credits_credit_once_and_answer_alike => identical_concurrent_credits_credit_once_and_answer_alike,
    crate::wallets::one_reference_credits_once_whatever_the_key => one_reference_credits_once_whatever_the_key,
    crate::wallets::distinct_keys_never_overdraw => distinct_keys_never_overdraw,
    crate::wallets::a_deduction_is_put_back_once => a_deduction_is_put_back_once,
    crate::wallets::distinct_keys_for_one_order_debit_once => distinct_keys_for_one_order_debit_once,
    crate::wallets::without_the_machinery_the_constraint_still_refuses => without_the_machinery_the_constraint_still_refuses,
    crate::wallets::group_commit_settles_each_deduct_once => group_commit_settles_each_deduct_once,
    crate::inputs::bad_input_is_a_problem_and_writes_nothing => bad_input_is_a_problem_and_writes_nothing,
    crate::inputs::tenants_never_see_each_other => tenants_never_see_each_other,
    crate::pages::pages_are_served_only_as_configured_and_guarded => pages_are_served_only_as_configured_and_guarded,
    crate::keys::a_page_pays_what_the_server_priced_and_nothing_else => a_page_pays_what_the_server_priced_and_nothing_else,
    crate::keys::a_pages_keys_never_meet_the_servers => a_pages_keys_never_meet_the_servers,
    crate::keys::a_visitors_flood_leaves_the_server_paying => a_visitors_flood_leaves_the_server_paying,
    crate::bounds::refund_states_are_reached_only_through_a_refund => refund_states_are_reached_only_through_a_refund,
    crate::bounds::refund_reasons_and_keys_are_checked => refund_reasons_and_keys_are_checked,
);

/// Bounds that a tenant must not be able to pass: tokens on the in-process store and on a
/// Redis Cluster (a thousand unspent tokens each: not run on every backend, since they stay in
/// the shared Redis for their thirty minutes), and a delivery's last attempt.
mod bounded {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_a_tenant_past_its_token_limit_is_answered_429() {
        crate::bounds::a_tenant_past_its_token_limit_is_answered_429(
            crate::harness::Backend::Sqlite,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_and_redis_cluster_a_tenant_past_its_token_limit_is_answered_429() {
        crate::bounds::a_tenant_past_its_token_limit_is_answered_429(
            crate::harness::Backend::PostgresOnRedisCluster,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_a_delivery_is_attempted_at_most_a_hundred_times() {
        crate::bounds::a_delivery_is_attempted_at_most_a_hundred_times().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_nats_refused_outbox_rows_are_parked_and_settled_on_the_console() {
        crate::parked::refused_outbox_rows_are_parked_and_settled_on_the_console().await;
    }
}

/// The outbound-address guard: a tenant's webhook URL never reaches into our network. On one
/// backend: the guard is the dispatcher's and registration's, not the store's.
mod guarded {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_private_targets_are_refused_at_registration() {
        crate::webhook_targets::private_targets_are_refused_at_registration(
            crate::harness::Backend::Sqlite,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_stored_private_targets_are_never_connected_to_and_fail_like_a_closed_port() {
        crate::webhook_targets::stored_private_targets_are_never_connected_to_and_fail_like_a_closed_port(
            crate::harness::Backend::Sqlite,
        )
        .await;
    }
}

/// The HTTP edge: deadlines, the connection cap, problem documents, the metrics listener.
mod edge {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn headers_never_finished_are_cut_off() {
        crate::transport::headers_never_finished_are_cut_off().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_kept_alive_connection_is_closed() {
        crate::transport::an_idle_kept_alive_connection_is_closed().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_never_arrives_in_full_is_refused_with_408() {
        crate::transport::a_body_that_never_arrives_in_full_is_refused_with_408().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_over_the_cap_wait_for_a_free_one() {
        crate::transport::connections_over_the_cap_wait_for_a_free_one().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_refusal_at_the_edge_is_a_problem_document() {
        crate::transport::every_refusal_at_the_edge_is_a_problem_document().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn metrics_are_served_on_their_own_listener() {
        crate::transport::metrics_are_served_on_their_own_listener().await;
    }
}

/// The database link: on the servers, the only backends with one.
mod link {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_a_commit_whose_answer_is_lost_is_settled_by_the_retry() {
        crate::links::a_commit_whose_answer_is_lost_is_settled_by_the_retry(
            crate::harness::Backend::Postgres,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql_a_commit_whose_answer_is_lost_is_settled_by_the_retry() {
        crate::links::a_commit_whose_answer_is_lost_is_settled_by_the_retry(
            crate::harness::Backend::Mysql,
        )
        .await;
    }
}

mod shared_deployment {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_and_redis_a_held_order_lock_answers_in_progress_and_fences_off_its_paused_holder()
     {
        crate::payments::a_held_order_lock_answers_in_progress_and_fences_off_its_paused_holder(
            crate::harness::Backend::Postgres,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_and_redis_two_instances_one_effect() {
        crate::instances::two_instances_one_effect(crate::harness::Backend::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_and_redis_cluster_two_instances_one_effect() {
        crate::instances::two_instances_one_effect(crate::harness::Backend::PostgresOnRedisCluster)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mysql_and_redis_two_instances_one_effect() {
        crate::instances::two_instances_one_effect(crate::harness::Backend::Mysql).await;
    }
}

/// The outbox relays and the entitlement consumer on the real brokers, each deployment on a
/// PostgreSQL database of its own.
mod brokers {
    use crate::events::{
        NATS, NATS_PORT, QUEUE, RABBIT, RABBIT_PORT, a_broker_outage_loses_nothing,
        a_relay_killed_after_publishing_grants_once, two_relays_and_two_consumers_one_effect_each,
    };

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rabbitmq_a_relay_killed_after_publishing_grants_once() {
        a_relay_killed_after_publishing_grants_once(RABBIT, RABBIT_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn nats_a_relay_killed_after_publishing_grants_once() {
        a_relay_killed_after_publishing_grants_once(NATS, NATS_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn queue_a_relay_killed_after_publishing_grants_once() {
        a_relay_killed_after_publishing_grants_once(QUEUE, 0).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rabbitmq_an_outage_loses_nothing() {
        a_broker_outage_loses_nothing(RABBIT, RABBIT_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn nats_an_outage_loses_nothing() {
        a_broker_outage_loses_nothing(NATS, NATS_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rabbitmq_two_relays_and_two_consumers_one_effect_each() {
        two_relays_and_two_consumers_one_effect_each(RABBIT, RABBIT_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn nats_two_relays_and_two_consumers_one_effect_each() {
        two_relays_and_two_consumers_one_effect_each(NATS, NATS_PORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn queue_two_relays_and_two_consumers_one_effect_each() {
        two_relays_and_two_consumers_one_effect_each(QUEUE, 0).await;
    }
}
