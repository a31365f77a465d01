//! # gantry-exposition
//!
//! The Prometheus exposition both gantry daemons serve on `/metrics`. prometheus-client encodes
//! OpenMetrics text only; Prometheus asks for that and gets it, while every other client (curl,
//! `promtool check metrics`, older scrapers) gets the classic Prometheus text format 0.0.4, derived
//! from the OpenMetrics text (the two differ only in how counters are named in `# HELP`/`# TYPE`,
//! and in the `# UNIT`/`# EOF` lines). One implementation, so a fix serves the agent and the
//! scheduler alike.
//!
//! It also holds the pieces both daemons' registries share: the `state` label of per-state
//! gauges and the `*_build_info` gauge.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use thiserror::Error;

/// The label of per-state gauges (`gantry_containers{state=…}`, `gantry_nodes{state=…}`, …).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StateLabels {
    /// The state's name.
    pub state: String,
}

/// Registers `<name>{version="…"} 1`, the conventional build-info gauge.
pub fn register_build_info(registry: &mut Registry, name: &str, help: &str, version: &str) {
    #[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
    struct BuildLabels {
        version: String,
    }
    let family = Family::<BuildLabels, Gauge<u64, AtomicU64>>::default();
    family.get_or_create(&BuildLabels { version: version.to_owned() }).set(1);
    registry.register(name, help, family);
}

/// `Content-Type` of the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of the OpenMetrics text format 1.0.0.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Why the metrics could not be encoded.
#[derive(Debug, Error)]
pub enum ExpositionError {
    /// prometheus-client failed to write the exposition.
    #[error("encoding the metrics failed")]
    Encode(#[from] std::fmt::Error),
    /// A metric type that has no equivalent in the Prometheus text format.
    #[error("metric {name} has type {kind}, which the Prometheus text format cannot carry")]
    UnsupportedType {
        /// Metric family name.
        name: String,
        /// OpenMetrics type.
        kind: String,
    },
}

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (what `promtool check metrics` reads).
    PrometheusText,
    /// OpenMetrics text 1.0.0 (what prometheus-client writes and Prometheus prefers).
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` to send with this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => PROMETHEUS_TEXT_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }

    /// Picks the format for an `Accept` header: OpenMetrics when the client accepts it (version
    /// 1.0.0 or unversioned) at least as much as plain text, else the Prometheus text format.
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else { return Format::PrometheusText };
        let (mut openmetrics_q, mut text_q) = (0.0f64, 0.0f64);
        for entry in accept.split(',') {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default().to_ascii_lowercase();
            let (mut q, mut version) = (1.0f64, None);
            for param in parts {
                let Some((key, value)) = param.split_once('=') else { continue };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => q = value.parse::<f64>().ok().filter(|q| q.is_finite()).unwrap_or(0.0),
                    "version" => version = Some(value.to_owned()),
                    _ => {}
                }
            }
            match media.as_str() {
                "application/openmetrics-text" if version.as_deref().is_none_or(|v| v == "1.0.0") => {
                    openmetrics_q = openmetrics_q.max(q)
                }
                "text/plain" if version.as_deref().is_none_or(|v| v == "0.0.4") => text_q = text_q.max(q),
                "text/*" | "*/*" => text_q = text_q.max(q),
                _ => {}
            }
        }
        if openmetrics_q > 0.0 && openmetrics_q >= text_q {
            Format::OpenMetrics
        } else {
            Format::PrometheusText
        }
    }
}

/// Encodes `registry` in `format` (with the `# EOF` line OpenMetrics requires).
pub fn encode(registry: &Registry, format: Format) -> Result<String, ExpositionError> {
    let mut openmetrics = String::with_capacity(4096);
    prometheus_client::encoding::text::encode_registry(&mut openmetrics, registry)?;
    match format {
        Format::OpenMetrics => {
            prometheus_client::encoding::text::encode_eof(&mut openmetrics)?;
            Ok(openmetrics)
        }
        Format::PrometheusText => openmetrics_to_prometheus(&openmetrics),
    }
}

/// Rewrites OpenMetrics text (without `# EOF`) as Prometheus text 0.0.4: a counter family `x`
/// is announced as `x_total` (the name of its sample), and `# UNIT` lines go.
pub fn openmetrics_to_prometheus(openmetrics: &str) -> Result<String, ExpositionError> {
    let mut out = String::with_capacity(openmetrics.len());
    // A `# HELP` line waits for its `# TYPE` line, which says whether the name changes.
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "gauge" | "histogram" | "summary" => (family.to_owned(), kind),
                "unknown" => (family.to_owned(), "untyped"),
                other => {
                    return Err(ExpositionError::UnsupportedType { name: family.into(), kind: other.into() });
                }
            };
            if let Some((_, text)) = help.take().filter(|(help_name, _)| *help_name == family) {
                out.push_str("# HELP ");
                out.push_str(&name);
                out.push(' ');
                out.push_str(text);
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(&name);
            out.push(' ');
            out.push_str(kind);
            out.push('\n');
        } else if !line.starts_with("# UNIT ") && line != "# EOF" {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Unit;

    #[test]
    fn negotiation_follows_the_accept_header() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::negotiate(Some("application/openmetrics-text")), Format::OpenMetrics);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;version=2.0.0")),
            Format::PrometheusText
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::PrometheusText
        );
        assert_eq!(Format::negotiate(None), Format::PrometheusText);
        assert_eq!(Format::negotiate(Some("*/*")), Format::PrometheusText);
    }

    #[test]
    fn counters_and_units_become_classic_text() {
        let mut registry = Registry::default();
        let counter: Counter = Counter::default();
        counter.inc_by(3);
        registry.register("jobs", "Jobs done", counter);
        registry.register_with_unit("wait", "Time waited", Unit::Seconds, Histogram::new([0.1, 1.0]));
        let om = encode(&registry, Format::OpenMetrics).expect("encodes");
        assert!(om.contains("# TYPE jobs counter\n") && om.contains("# UNIT wait_seconds seconds\n"));
        assert!(om.ends_with("# EOF\n"));
        let text = encode(&registry, Format::PrometheusText).expect("encodes");
        assert!(
            text.contains("# HELP jobs_total Jobs done.\n# TYPE jobs_total counter\njobs_total 3\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE wait_seconds histogram\n")
                && !text.contains("# UNIT")
                && !text.contains("# EOF")
        );
    }

    #[test]
    fn types_without_a_classic_equivalent_are_refused() {
        let err = openmetrics_to_prometheus("# TYPE x stateset\nx{x=\"a\"} 1\n").expect_err("refused");
        assert!(
            matches!(err, ExpositionError::UnsupportedType { ref kind, .. } if kind == "stateset"),
            "{err}"
        );
    }
}
