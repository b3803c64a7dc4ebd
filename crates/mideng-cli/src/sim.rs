//! `mideng sim`: the channel simulator, standalone.
//!
//! Its identities and keys live in a data directory so that a merchant configured against it
//! keeps working across restarts: generated on the first start, loaded afterwards. Private keys
//! and the WeChat API v3 key are written owner-readable only and never printed; the command
//! prints where they are.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use mideng_channel::keys::{PrivateKey, PublicKey};
use mideng_sim::{MerchantKeys, SimConfig, Simulator, WechatPlatformMode};
use serde::{Deserialize, Serialize};

/// The non-key parts of the simulator's identity, kept in `sim.json`.
#[derive(Serialize, Deserialize)]
struct Identity {
    alipay_app_id: String,
    /// Absent from data directories written before notifies carried `seller_id`.
    #[serde(default = "default_seller_id")]
    alipay_seller_id: String,
    wechat_mchid: String,
    wechat_appid: String,
    wechat_merchant_serial: String,
    /// `public_key` (the default, also for files written before the mode existed) or
    /// `certificate`.
    #[serde(default)]
    wechat_platform_mode: WechatPlatformMode,
    wechat_platform_serial: String,
    wechat_api_v3_key: String,
}

fn default_seller_id() -> String {
    mideng_sim::ALIPAY_SELLER_ID.to_owned()
}

const FILES: [&str; 4] = [
    "alipay-merchant-private.pem",
    "alipay-gateway-private.pem",
    "wechat-merchant-private.pem",
    "wechat-platform-private.pem",
];

/// Writes a file readable by its owner only (keys and the API v3 key are secrets).
fn write_secret(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

fn read_key(directory: &Path, name: &str) -> anyhow::Result<PrivateKey> {
    let path = directory.join(name);
    let pem =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    PrivateKey::from_pem(&pem)
        .with_context(|| format!("{} is not an RSA private key", path.display()))
}

fn write_public(directory: &Path, name: &str, key: &PublicKey) -> anyhow::Result<()> {
    let path = directory.join(name);
    std::fs::write(&path, key.to_pem()?).with_context(|| format!("writing {}", path.display()))
}

/// Loads the simulator's configuration and the merchant's keys from `directory`, generating
/// them on the first start (in public-key mode).
pub(crate) fn load_or_generate(
    directory: &Path,
    clock_speed: u32,
) -> anyhow::Result<(SimConfig, MerchantKeys)> {
    load_or_generate_in_mode(directory, clock_speed, None)
}

/// [`load_or_generate`], generating a platform identity in `mode` on the first start; a
/// directory generated in another mode is refused rather than silently used.
pub(crate) fn load_or_generate_in_mode(
    directory: &Path,
    clock_speed: u32,
    mode: Option<WechatPlatformMode>,
) -> anyhow::Result<(SimConfig, MerchantKeys)> {
    std::fs::create_dir_all(directory)
        .with_context(|| format!("creating {}", directory.display()))?;
    let identity_path = directory.join("sim.json");
    if !identity_path.exists() {
        tracing::info!(directory = %directory.display(), "generating simulator keys (first start)");
        let (mut config, merchant) = SimConfig::generate()?;
        if let Some(mode) = mode {
            config.wechat_platform_mode = mode;
            config.wechat_platform_serial = mode.random_serial();
        }
        let keys = [
            &merchant.alipay_private,
            &config.alipay_gateway_key,
            &merchant.wechat_private,
            &config.wechat_platform_key,
        ];
        for (name, key) in FILES.iter().zip(keys) {
            write_secret(&directory.join(name), &key.to_pem()?)?;
            write_public(
                directory,
                &name.replace("private", "public"),
                &key.public_key(),
            )?;
        }
        write_secret(
            &identity_path,
            &serde_json::to_string_pretty(&identity_of(&config))?,
        )?;
    }
    let identity: Identity = serde_json::from_str(&std::fs::read_to_string(&identity_path)?)
        .with_context(|| format!("{} is not a simulator identity", identity_path.display()))?;
    if let Some(mode) = mode
        && mode != identity.wechat_platform_mode
    {
        anyhow::bail!(
            "{} was generated in WeChat Pay {:?} mode, not {mode:?}: use another data directory",
            identity_path.display(),
            identity.wechat_platform_mode
        );
    }
    let merchant = MerchantKeys {
        alipay_private: read_key(directory, FILES[0])?,
        wechat_private: read_key(directory, FILES[2])?,
    };
    let mut config = SimConfig {
        alipay_app_id: identity.alipay_app_id,
        alipay_seller_id: identity.alipay_seller_id,
        alipay_merchant_public_key: merchant.alipay_private.public_key(),
        alipay_gateway_key: read_key(directory, FILES[1])?,
        wechat_mchid: identity.wechat_mchid,
        wechat_appid: identity.wechat_appid,
        wechat_merchant_public_key: merchant.wechat_private.public_key(),
        wechat_merchant_serial: identity.wechat_merchant_serial,
        wechat_platform_key: read_key(directory, FILES[3])?,
        wechat_platform_mode: identity.wechat_platform_mode,
        wechat_platform_serial: identity.wechat_platform_serial,
        wechat_api_v3_key: identity.wechat_api_v3_key,
        clock_speed,
        bills_as_the_day_runs: false,
    };
    if config.renew_outdated_serials() {
        tracing::warn!(
            identity = %identity_path.display(),
            "WeChat Pay serials in an older form replaced by serials of the real form"
        );
        write_secret(
            &identity_path,
            &serde_json::to_string_pretty(&identity_of(&config))?,
        )?;
    }
    Ok((config, merchant))
}

/// What `sim.json` keeps of `config`.
fn identity_of(config: &SimConfig) -> Identity {
    Identity {
        alipay_app_id: config.alipay_app_id.clone(),
        alipay_seller_id: config.alipay_seller_id.clone(),
        wechat_mchid: config.wechat_mchid.clone(),
        wechat_appid: config.wechat_appid.clone(),
        wechat_merchant_serial: config.wechat_merchant_serial.clone(),
        wechat_platform_mode: config.wechat_platform_mode,
        wechat_platform_serial: config.wechat_platform_serial.clone(),
        wechat_api_v3_key: config.wechat_api_v3_key.clone(),
    }
}

/// Runs the simulator until Ctrl-C.
pub(crate) async fn run(
    listen: SocketAddr,
    data_dir: PathBuf,
    clock_speed: u32,
    mode: Option<WechatPlatformMode>,
    bills_as_the_day_runs: bool,
) -> anyhow::Result<()> {
    let (mut config, _) = load_or_generate_in_mode(&data_dir, clock_speed, mode)?;
    config.bills_as_the_day_runs = bills_as_the_day_runs;
    let (app_id, mchid) = (config.alipay_app_id.clone(), config.wechat_mchid.clone());
    let simulator = Simulator::new(config).with_context(|| {
        format!(
            "{} does not describe a valid simulator",
            data_dir.join("sim.json").display()
        )
    })?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let address = listener.local_addr()?;
    tracing::info!(
        %address, alipay_app_id = %app_id, wechat_mchid = %mchid, clock_speed,
        keys = %data_dir.display(),
        "channel simulator listening: Alipay at /gateway.do, WeChat Pay at /v3/pay/transactions, control at /sim/"
    );
    let shutdown = async {
        // Ctrl-C failing to install leaves no way to stop but a signal; treat it as a stop.
        let _ = tokio::signal::ctrl_c().await;
    };
    simulator.serve(listener, shutdown).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_generated_once_then_loaded_and_secrets_are_private() {
        let directory =
            std::env::temp_dir().join(format!("mideng-sim-keys-{}", std::process::id()));
        let (first, _) = load_or_generate(&directory, 1).expect("generated");
        let (second, merchant) = load_or_generate(&directory, 60).expect("loaded");
        assert_eq!(
            merchant.alipay_private.public_key(),
            second.alipay_merchant_public_key
        );
        assert_eq!(
            first.alipay_gateway_key.public_key(),
            second.alipay_gateway_key.public_key()
        );
        assert_eq!(first.wechat_api_v3_key, second.wechat_api_v3_key);
        assert_eq!(first.wechat_platform_serial, second.wechat_platform_serial);
        assert!(second.wechat_platform_serial.starts_with("PUB_KEY_ID_"));
        assert_eq!(second.wechat_merchant_serial.len(), 40);
        assert_eq!(second.clock_speed, 60);
        use std::os::unix::fs::PermissionsExt;
        for secret in [
            "sim.json",
            "alipay-gateway-private.pem",
            "wechat-merchant-private.pem",
        ] {
            let mode = std::fs::metadata(directory.join(secret))
                .expect("exists")
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "{secret} is readable by its owner only");
        }
        assert!(
            directory.join("alipay-gateway-public.pem").exists(),
            "the merchant's half is written out"
        );
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn a_directory_from_an_older_version_starts_with_serials_of_the_real_form() {
        let directory = std::env::temp_dir().join(format!("mideng-sim-old-{}", std::process::id()));
        let (first, _) = load_or_generate(&directory, 1).expect("generated");
        // What an older version wrote: 40 random characters of [0-9A-Z] for both serials.
        let path = directory.join("sim.json");
        let mut identity: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        identity["wechat_merchant_serial"] = "Z7QK0000000000000000000000000000000000AB".into();
        identity["wechat_platform_serial"] = "PLATFORMQ000000000000000000000000000000X".into();
        std::fs::write(&path, identity.to_string()).expect("write");

        let (renewed, _) = load_or_generate(&directory, 1).expect("an old directory still starts");
        assert!(renewed.wechat_platform_serial.starts_with("PUB_KEY_ID_"));
        assert_ne!(
            renewed.wechat_merchant_serial,
            "Z7QK0000000000000000000000000000000000AB"
        );
        assert!(Simulator::new(renewed.clone()).is_ok());
        assert_eq!(
            renewed.wechat_api_v3_key, first.wechat_api_v3_key,
            "the rest is kept"
        );
        let (again, _) = load_or_generate(&directory, 1).expect("loaded");
        assert_eq!(
            again.wechat_platform_serial, renewed.wechat_platform_serial,
            "written back once"
        );
        let _ = std::fs::remove_dir_all(&directory);
    }

    #[test]
    fn a_directory_generated_in_certificate_mode_stays_in_it() {
        let directory =
            std::env::temp_dir().join(format!("mideng-sim-mode-{}", std::process::id()));
        let (first, _) =
            load_or_generate_in_mode(&directory, 1, Some(WechatPlatformMode::Certificate))
                .expect("generated");
        assert_eq!(first.wechat_platform_mode, WechatPlatformMode::Certificate);
        assert_eq!(first.wechat_platform_serial.len(), 40);
        let (again, _) = load_or_generate(&directory, 1).expect("loaded");
        assert_eq!(again.wechat_platform_serial, first.wechat_platform_serial);
        assert!(
            load_or_generate_in_mode(&directory, 1, Some(WechatPlatformMode::PublicKey)).is_err(),
            "another mode than the directory's is refused"
        );
        let _ = std::fs::remove_dir_all(&directory);
    }
}
