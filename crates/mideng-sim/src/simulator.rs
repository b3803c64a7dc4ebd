//! The simulator's handle: the router that serves both gateways and the control API, the
//! notify dispatcher, and the few controls a Rust caller needs without going over HTTP.

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use mideng_channel::keys::PublicKey;
use mideng_channel::{alipay, wechat};
use tokio::sync::watch;

use crate::config::SimConfig;
use crate::error::SimError;
use crate::shared::Shared;
use crate::{control, gateway, limits, notify};

/// The simulated channels. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct Simulator {
    /// Everything the handlers and the dispatcher share; handlers reach it through the
    /// router's state.
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Simulator")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Simulator {
    /// A simulator with an empty world, its clock starting at the host's time.
    pub fn new(config: SimConfig) -> Result<Self, SimError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(Shared::new(config)?),
        })
    }

    /// The gateways and the control API. Serving this router alone delivers no notifies; run
    /// [`Simulator::dispatch_notifies`] beside it, or use [`Simulator::serve`].
    pub fn router(&self) -> Router {
        let out_trade_no_path = format!("{}{{out_trade_no}}", wechat::PATH_OUT_TRADE_NO);
        let transaction_id_path = format!("{}{{transaction_id}}", wechat::PATH_TRANSACTION_ID);
        let wechat_other_method = gateway::wechat::method_not_routed;
        Router::new()
            .route(
                alipay::GATEWAY_PATH,
                get(gateway::alipay::gateway).post(gateway::alipay::gateway),
            )
            .route(
                alipay::v3::PATH_PRECREATE,
                post(gateway::alipay_v3::precreate),
            )
            .route(alipay::v3::PATH_QUERY, post(gateway::alipay_v3::query))
            .route(alipay::v3::PATH_CLOSE, post(gateway::alipay_v3::close))
            .route(alipay::v3::PATH_REFUND, post(gateway::alipay_v3::refund))
            .route(
                alipay::v3::PATH_REFUND_QUERY,
                post(gateway::alipay_v3::refund_query),
            )
            .route(
                wechat::PATH_NATIVE,
                post(gateway::wechat::create_native).fallback(wechat_other_method),
            )
            .route(
                &out_trade_no_path,
                get(gateway::wechat::query).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_CERTIFICATES,
                get(gateway::wechat::certificates).fallback(wechat_other_method),
            )
            .route(
                &transaction_id_path,
                get(gateway::wechat::query_by_transaction_id).fallback(wechat_other_method),
            )
            .route(
                &format!("{out_trade_no_path}/close"),
                post(gateway::wechat::close).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_REFUNDS,
                post(gateway::wechat::create_refund).fallback(wechat_other_method),
            )
            .route(
                &format!("{}/{{out_refund_no}}", wechat::PATH_REFUNDS),
                get(gateway::wechat::query_refund).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_TRADE_BILL,
                get(gateway::wechat_bill::trade_bill).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_FUNDFLOW_BILL,
                get(gateway::wechat_bill::fundflow_bill).fallback(wechat_other_method),
            )
            .route(
                wechat::PATH_BILL_DOWNLOAD,
                get(gateway::wechat_bill::download).fallback(wechat_other_method),
            )
            .route(
                gateway::alipay_bill::DOWNLOAD_PATH,
                get(gateway::alipay_bill::download),
            )
            .merge(control::routes())
            .fallback(gateway::not_found)
            .with_state(self.clone())
    }

    /// Serves the router on `listener` and delivers notifies, until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (stop_sender, stop_receiver) = watch::channel(false);
        let stop_sender = Arc::new(stop_sender);
        let dispatcher = tokio::spawn(notify::dispatcher::run_dispatcher(
            Arc::clone(&self.shared),
            stop_receiver.clone(),
        ));
        let trigger = {
            let stop_sender = Arc::clone(&stop_sender);
            tokio::spawn(async move {
                shutdown.await;
                stop_sender.send_replace(true);
            })
        };
        let mut server_stop = stop_receiver;
        let result = axum::serve(listener, self.router())
            .with_graceful_shutdown(async move {
                // An error means the sender is gone, which also means stop.
                let _ = server_stop.wait_for(|stop| *stop).await;
            })
            .await;
        // The server may also have ended on an error: stop the dispatcher either way.
        stop_sender.send_replace(true);
        trigger.abort();
        if let Err(error) = dispatcher.await
            && error.is_panic()
        {
            tracing::error!("the notify dispatcher panicked");
        }
        result
    }

    /// Delivers notifies until `shutdown` completes, for callers that serve
    /// [`Simulator::router`] themselves. Run at most one per simulator.
    pub async fn dispatch_notifies(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let (stop_sender, stop_receiver) = watch::channel(false);
        let dispatcher =
            notify::dispatcher::run_dispatcher(Arc::clone(&self.shared), stop_receiver);
        tokio::pin!(dispatcher);
        tokio::select! {
            () = &mut dispatcher => {}
            () = shutdown => {
                stop_sender.send_replace(true);
                dispatcher.await;
            }
        }
    }

    /// The key that verifies Alipay responses and notifies.
    pub fn alipay_gateway_public_key(&self) -> PublicKey {
        self.shared.config.alipay_gateway_key.public_key()
    }

    /// The key that verifies WeChat Pay responses and notifies now: the configured one until a
    /// rotation (certificate mode) replaces it.
    pub fn wechat_platform_public_key(&self) -> PublicKey {
        self.shared.wechat_platform_public_key()
    }

    /// Channel time now, Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.shared.clock.now_ms()
    }

    /// Moves channel time forward by `seconds` (at most 400 days a call; more is clamped).
    /// Expired trades close and due notifies go out at once.
    pub fn advance_clock(&self, seconds: u64) {
        self.shared
            .clock
            .advance(seconds.min(limits::CLOCK_ADVANCE_SECONDS_MAX));
        drop(self.shared.settled_world());
        self.shared.wake.notify_one();
    }
}
