//! What a load run measured and how it is reported: round-trip latencies, the run's settings,
//! status and submission figures, the processes' CPU and memory, and what was lost — as JSON
//! (`--json`, `--out`) and as the text summary.

use super::quantile_ms;
use gantry_scheduler::api::types::AppState;
use std::time::Duration;

/// Latency figures of one kind of round trip, ms.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Latency {
    /// Samples measured (sent within the measured window and answered).
    pub samples: u64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    pub(super) fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort_unstable();
        Latency {
            samples: samples.len() as u64,
            p50_ms: quantile_ms(&samples, 0.5),
            p99_ms: quantile_ms(&samples, 0.99),
            p999_ms: quantile_ms(&samples, 0.999),
            max_ms: quantile_ms(&samples, 1.0),
        }
    }
}

/// The run's settings, as used.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadSettings {
    /// Simulated agents.
    pub agents: u32,
    /// Status reports per second per agent.
    pub status_hz: f64,
    /// Applications submitted per second.
    pub submit_rate: f64,
    /// Warm-up, s.
    pub warmup_s: f64,
    /// Measured window, s.
    pub duration_s: f64,
    /// Each container's run time, s.
    pub run_time_s: f64,
    /// Containers per application.
    pub containers_per_app: u32,
    /// `child <binary>` or the REST address of a running scheduler.
    pub scheduler: String,
    /// The child's `node_timeout_ms` (0 for a running scheduler: its own).
    pub node_timeout_ms: u64,
}

/// Where an acknowledged application ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AppVerdict {
    Finished,
    /// FAILED, KILLED or REJECTED.
    Failed,
    /// Not over yet.
    Live,
}

impl AppVerdict {
    pub(super) fn from_api(state: AppState) -> AppVerdict {
        match state {
            AppState::Finished => AppVerdict::Finished,
            AppState::Failed | AppState::Killed => AppVerdict::Failed,
            AppState::New | AppState::Accepted | AppState::Running => AppVerdict::Live,
        }
    }

    pub(super) fn from_engine(state: u32) -> AppVerdict {
        use gantry_sdk::abi::{
            GANTRY_APP_FAILED, GANTRY_APP_FINISHED, GANTRY_APP_KILLED, GANTRY_APP_REJECTED,
        };
        match state {
            GANTRY_APP_FINISHED => AppVerdict::Finished,
            GANTRY_APP_FAILED | GANTRY_APP_KILLED | GANTRY_APP_REJECTED => AppVerdict::Failed,
            _ => AppVerdict::Live,
        }
    }
}

/// Status reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StatusFigures {
    /// Sent over the whole run.
    pub sent: u64,
    /// Acknowledged over the whole run.
    pub acked: u64,
    /// Never acknowledged (`sent - acked`).
    pub unacked: u64,
    /// Acknowledged per second within the measured window.
    pub acked_per_s: f64,
    /// Round trip, sent → `StatusAck`, of those sent within the measured window.
    pub latency: Latency,
}

/// Submissions through the REST API.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SubmitFigures {
    /// Attempted over the whole run.
    pub attempted: u64,
    /// Answered with an id (durable in the scheduler's store).
    pub acknowledged: u64,
    /// Answered with an error status.
    pub refused: u64,
    /// No answer (transport error or timeout).
    pub failed: u64,
    /// Ticks skipped because too many submissions were in flight.
    pub skipped: u64,
    /// Acknowledged per second within the measured window.
    pub acked_per_s: f64,
    /// Round trip of those sent within the measured window.
    pub latency: Latency,
    /// The first error seen, if any.
    pub first_error: Option<String>,
}

/// A process's use of the machine over the measured window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ProcessFigures {
    /// Its pid.
    pub pid: u32,
    /// CPU time (user + system) over wall time: cores kept busy on average.
    pub cpu_cores: f64,
    /// Peak resident set (`VmHWM`) at the end of the window, bytes.
    pub peak_rss_bytes: u64,
    /// Resident set (`VmRSS`) at the end of the window, bytes.
    pub rss_bytes: u64,
}

/// What was lost. Every count but the first four should be zero.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LostFigures {
    /// Where the apps' ends were checked: `store` (the child's SQLite store after it stopped,
    /// integrity-checked) or `api` (the REST listing, which forgets ended apps beyond the
    /// scheduler's `history_len` until it restarts: those count as missing).
    pub verified_in: String,
    /// Agents that registered.
    pub agents_registered: u64,
    /// Acknowledged applications that reached FINISHED.
    pub apps_finished: u64,
    /// Container launches received over all agents.
    pub launches: u64,
    /// Distinct containers launched.
    pub containers: u64,
    /// Agents that could not register.
    pub agents_not_registered: u64,
    /// Agent streams that ended or failed before the generator closed them.
    pub streams_dropped: u64,
    /// Acknowledged applications that ended FAILED or KILLED.
    pub apps_failed: u64,
    /// Acknowledged applications still not over when the drain timed out.
    pub apps_unfinished: u64,
    /// Acknowledged applications the scheduler does not know (see `verified_in`).
    pub apps_missing: u64,
    /// Launches beyond the first of a container (`launches - containers`).
    pub duplicate_launches: u64,
    /// Exits sent and never acknowledged.
    pub exits_unacked: u64,
    /// Status reports never acknowledged.
    pub statuses_unacked: u64,
    /// Nodes the scheduler reported LOST at the end.
    pub nodes_lost: u64,
    /// Agents that did not end within the stop grace.
    pub agents_hung: u64,
}

impl LostFigures {
    /// Whether nothing was lost.
    pub fn nothing_lost(&self) -> bool {
        self.agents_not_registered == 0
            && self.streams_dropped == 0
            && self.apps_failed == 0
            && self.apps_unfinished == 0
            && self.apps_missing == 0
            && self.duplicate_launches == 0
            && self.exits_unacked == 0
            && self.statuses_unacked == 0
            && self.nodes_lost == 0
            && self.agents_hung == 0
    }
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LoadReport {
    /// The settings.
    pub settings: LoadSettings,
    /// Status reports.
    pub status: StatusFigures,
    /// Submissions.
    pub submissions: SubmitFigures,
    /// The child scheduler (absent for a running scheduler: it may be on another machine).
    pub scheduler: Option<ProcessFigures>,
    /// The generator itself.
    pub generator: ProcessFigures,
    /// How long the drain took, s.
    pub drain_s: f64,
    /// What was lost.
    pub lost: LostFigures,
    /// `lost.nothing_lost()`.
    pub nothing_lost: bool,
}

impl LoadReport {
    /// The report for people.
    pub fn summary(&self) -> String {
        let s = &self.settings;
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let mut out = format!(
            "{} agents at {} Hz, {} apps/s, {:.0} s measured after {:.0} s warm-up, scheduler: {}\n",
            s.agents, s.status_hz, s.submit_rate, s.duration_s, s.warmup_s, s.scheduler
        );
        let l = &self.status.latency;
        out += &format!(
            "  status round trip   p50 {:.2} ms  p99 {:.2} ms  p99.9 {:.2} ms  max {:.2} ms  ({} samples, {:.0}/s)\n",
            l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms, l.samples, self.status.acked_per_s
        );
        let l = &self.submissions.latency;
        out += &format!(
            "  submission          p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} samples, {:.1}/s)\n",
            l.p50_ms, l.p99_ms, l.max_ms, l.samples, self.submissions.acked_per_s
        );
        if let Some(p) = &self.scheduler {
            out += &format!(
                "  scheduler           {:.3} cores, peak RSS {:.1} MiB, RSS {:.1} MiB\n",
                p.cpu_cores,
                mib(p.peak_rss_bytes),
                mib(p.rss_bytes)
            );
        }
        out += &format!(
            "  generator           {:.3} cores, peak RSS {:.1} MiB\n",
            self.generator.cpu_cores,
            mib(self.generator.peak_rss_bytes)
        );
        let x = &self.lost;
        let sub = &self.submissions;
        out += &format!(
            "  submissions         {} attempted: {} acknowledged, {} refused, {} failed, {} skipped\n",
            sub.attempted, sub.acknowledged, sub.refused, sub.failed, sub.skipped
        );
        if let Some(e) = &sub.first_error {
            out += &format!("                      first error: {e}\n");
        }
        out += &format!(
            "  apps                {} finished, {} failed or killed, {} unfinished, {} missing (drain {:.1} s, checked in the {})\n",
            x.apps_finished, x.apps_failed, x.apps_unfinished, x.apps_missing, self.drain_s, x.verified_in
        );
        out += &format!(
            "  containers          {} launched, {} duplicate launches, {} exits unacknowledged\n",
            x.containers, x.duplicate_launches, x.exits_unacked
        );
        out += &format!(
            "  agents              {} registered, {} not, {} streams dropped, {} hung, {} nodes lost, {} statuses unacknowledged\n",
            x.agents_registered,
            x.agents_not_registered,
            x.streams_dropped,
            x.agents_hung,
            x.nodes_lost,
            x.statuses_unacked
        );
        out += if self.nothing_lost { "  nothing lost\n" } else { "  SOMETHING WAS LOST (see above)\n" };
        out
    }
}
