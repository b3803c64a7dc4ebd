//! Test support for whoever starts the service in process: the service's own integration
//! tests, and `mideng-storm`'s storm and bench. Compiled only with the `testing` feature, so the
//! service's own build carries none of it.
//!
//! - [`deploy`] — the one place that assembles a deployment: the channel simulator, service
//!   instances whose channels point at it (and notify them back), the database they share, and
//!   the operator's connection beside them ([`Blueprint`]).
//! - [`proxy`] — the one TCP forwarder that cuts a server (Redis, a broker) off and lets it back
//!   ([`Proxy`]).
//!
//! Why here and not in a crate of its own: `mideng-storm` depends on `mideng-pay`, and the
//! service's integration tests could only reach a separate support crate that depends on
//! `mideng-pay` through a second build of it. As a feature of `mideng-pay`, the storm enables it
//! on its dependency and the integration tests through `mideng-pay`'s dev-dependency on itself;
//! the simulator, needed only here, is an optional dependency behind the feature.
//!
//! What only the storm needs stays in the storm: instances on runtimes of their own that it
//! crashes mid-request, the servers stack behind proxies, its command-line flags.

pub mod deploy;
pub mod proxy;

pub use self::deploy::{
    Blueprint, DeployError, RunningSimulator, TenantAccess, create_database, start_simulator,
};
pub use self::proxy::{LinkFault, Proxy};
