//! # gantry-scheduler
//!
//! The scheduler daemon around the [`gantry_controller`] and its [`gantry_engine`]: its
//! configuration ([`config`]), the plugin host that loads policy plugins from shared libraries
//! ([`plugin_host`]), the code that turns a configuration into a running engine
//! ([`build_engine`]), the daemon shell ([`server`]), its store ([`store`]), the REST API's
//! types, routes and typed client ([`api`]), authentication ([`auth`]), TLS ([`tls`]) and
//! metrics ([`metrics`]). The binary `gantry-scheduler` lives in `src/bin/`; the user-facing
//! `gantry` CLI, which builds on this library, is the `gantry` crate.

pub mod api;
pub mod auth;
pub mod config;
pub mod metrics;
pub mod plugin_host;
pub mod server;
pub mod store;
pub mod tls;

use config::SchedulerConfig;
use gantry_engine::{Engine, EngineError, Policy, Profile};
use plugin_host::{DynamicPlugin, LoadError};
use thiserror::Error;

/// Why an engine could not be built from a configuration.
#[derive(Debug, Error)]
pub enum BuildError {
    /// A plugin failed to load or to create its instance.
    #[error("plugin `{name}`: {error}")]
    Plugin {
        /// Local name of the plugin in the config.
        name: String,
        /// Why.
        error: LoadError,
    },
    /// The profile assigns a hook to a plugin that does not implement it.
    #[error("profile.{hook} names plugin `{name}`, which does not implement {hook} (it has: {has})")]
    Profile {
        /// The extension point.
        hook: &'static str,
        /// Local name of the plugin.
        name: String,
        /// The hooks it does implement.
        has: String,
    },
    /// A plugin's config table could not be turned into JSON.
    #[error("plugin `{name}`: its config table cannot be passed on: {message}")]
    PluginConfig {
        /// Local name.
        name: String,
        /// Why.
        message: String,
    },
    /// The engine refused the configuration or profile.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A plugin under its configured name, so that logs and reports (`gantry sim`'s summary.json)
/// name it as the daemon's metrics do, and two entries of one library stay apart.
struct Named {
    name: String,
    policy: DynamicPlugin,
}

impl Policy for Named {
    fn name(&self) -> &str {
        &self.name
    }

    fn hooks(&self) -> gantry_sdk::Hooks {
        self.policy.hooks()
    }

    fn call(
        &mut self,
        view: &gantry_sdk::View<'_>,
        out: &mut gantry_sdk::Decisions,
    ) -> Result<(), gantry_engine::PolicyError> {
        self.policy.call(view, out)
    }
}

/// Loads every configured plugin, maps the profile onto them, and builds the engine. With
/// `metrics`, each plugin is wrapped in a [`metrics::TimedPolicy`] under its configured name, so
/// its hook latency, rejections, failures and quarantine are exported per plugin.
pub fn build_engine(
    config: &SchedulerConfig,
    metrics: Option<&std::sync::Arc<metrics::SchedulerMetrics>>,
) -> Result<Engine, BuildError> {
    build_engine_with(config, metrics, config.engine_config())
}

/// [`build_engine`] with the engine's configuration given (the simulator's flags may replace the
/// file's reservation plan).
pub fn build_engine_with(
    config: &SchedulerConfig,
    metrics: Option<&std::sync::Arc<metrics::SchedulerMetrics>>,
    engine_config: gantry_engine::EngineConfig,
) -> Result<Engine, BuildError> {
    let mut policies: Vec<Box<dyn Policy>> = Vec::with_capacity(config.plugins.len());
    for p in &config.plugins {
        let json = serde_json::to_string(&p.config)
            .map_err(|e| BuildError::PluginConfig { name: p.name.clone(), message: e.to_string() })?;
        let plugin = DynamicPlugin::load_budgeted(&config.plugin_path(p), &json, p.call_budget())
            .map_err(|error| BuildError::Plugin { name: p.name.clone(), error })?;
        tracing::info!(
            plugin = %p.name,
            library = %plugin.info().name,
            version = %plugin.info().version,
            hooks = ?plugin.info().hook_names(),
            call_budget_ms = p.call_budget_ms,
            "plugin loaded"
        );
        let hooks = plugin.info().hooks;
        for (hook, id, assigned) in [
            ("admit", gantry_sdk::abi::GANTRY_HOOK_ADMIT, &config.profile.admit),
            ("order", gantry_sdk::abi::GANTRY_HOOK_ORDER, &config.profile.order),
            ("place", gantry_sdk::abi::GANTRY_HOOK_PLACE, &config.profile.place),
            ("rebalance", gantry_sdk::abi::GANTRY_HOOK_REBALANCE, &config.profile.rebalance),
            ("reserve", gantry_sdk::abi::GANTRY_HOOK_RESERVE, &config.profile.reserve),
        ] {
            if assigned.as_deref() == Some(p.name.as_str()) && !hooks.has(id) {
                return Err(BuildError::Profile {
                    hook,
                    name: p.name.clone(),
                    has: plugin.info().hook_names().join(", "),
                });
            }
        }
        policies.push(match metrics {
            Some(m) => Box::new(metrics::TimedPolicy::new(p.name.clone(), Box::new(plugin), m.clone())),
            None => Box::new(Named { name: p.name.clone(), policy: plugin }),
        });
    }
    let index =
        |name: &Option<String>| name.as_ref().and_then(|n| config.plugins.iter().position(|p| &p.name == n));
    let profile = Profile {
        admit: index(&config.profile.admit),
        order: index(&config.profile.order),
        place: index(&config.profile.place),
        rebalance: index(&config.profile.rebalance),
        reserve: index(&config.profile.reserve),
    };
    Ok(Engine::new(engine_config, policies, profile)?)
}
