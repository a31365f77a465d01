//! `gantry bench store`: what a long history costs the store, and what retention buys back.
//!
//! Through the real [`Store`] (its writer thread, WAL, `synchronous=FULL`) on a file of its own:
//!
//! 1. **fill** — `apps` submitted-and-ended applications, each with one ended container, plus
//!    `live` running ones with a running container, written in big jobs (the writer's group
//!    commit), then closed;
//! 2. **upgrade** — the retention index dropped and built again on the full file, as the schema
//!    migration does when a version with retention first opens a store from before it;
//! 3. **restart before retention** — reopen + [`Store::load_recent`] (what the daemon reads:
//!    live apps and only the ended ones memory keeps), reopen + [`Core::recover`] (that read and
//!    the engine rebuilt, ready to schedule), and reopen + [`Store::load`] (every record: what a
//!    start-up read before retention); the page cache is warm, as the file was just written;
//! 4. **submit latency without pruning** — `InsertApp` jobs at a steady `rate` for
//!    `baseline_secs`, submitted on time whatever the commits do (as independent clients),
//!    each timed from when it was due to its commit;
//! 5. **submit latency while pruning** — the same, while [`Store::prune_ended`] removes the
//!    backlog down to `keep` in chunks of `chunk`; runs until the round ends;
//! 6. **restart after retention** — as 3, on the pruned file.
//!
//! Sizes are the database plus its WAL; pruning frees pages inside the file (reused by later
//! rows) rather than shrinking it, so the free pages are reported too.

use gantry_engine::{AppId, ContainerId, Engine, EngineConfig, Resources};
use gantry_scheduler::server::core::Core;
use gantry_scheduler::store::{AppRecord, ContainerRecord, PruneReport, Retention, Store, StoreError, Write};
use gantry_sdk::abi::{
    GANTRY_APP_FINISHED, GANTRY_APP_RUNNING, GANTRY_CONTAINER_COMPLETED, GANTRY_CONTAINER_RUNNING,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `gantry bench store` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreBenchArgs {
    /// Submitted-and-ended applications to fill the store with (one container each).
    #[arg(long, default_value_t = 1_000_000)]
    pub apps: u64,
    /// Running applications (one running container each), never pruned.
    #[arg(long, default_value_t = 1_000)]
    pub live: u64,
    /// Ended applications the retention keeps (`[store] max_completed_apps`); also what the
    /// engine keeps in memory (`[engine] max_completed_apps`) in the restarts.
    #[arg(long, default_value_t = 10_000)]
    pub keep: u64,
    /// Applications removed per transaction (`[store] prune_chunk_apps`).
    #[arg(long, default_value_t = 100)]
    pub chunk: usize,
    /// Submissions per second while latency is measured.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds of submissions without pruning (the baseline).
    #[arg(long, default_value_t = 20.0)]
    pub baseline_secs: f64,
    /// Applications per job while filling.
    #[arg(long, default_value_t = 10_000)]
    pub fill_batch: u64,
    /// Directory for the store (created; the file is removed afterwards). Default: the system's
    /// temporary directory. Put it on the disk you want measured.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A restart's cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RestartFigures {
    /// Reopen + `Store::load()` (every record), ms.
    pub load_all_ms: f64,
    /// Applications that read.
    pub load_all_apps: u64,
    /// Reopen + `Store::load_recent` (live apps and the newest ended that memory keeps), ms.
    pub load_recent_ms: f64,
    /// Reopen + `Core::recover` (`load_recent`, then the engine rebuilt), ms.
    pub recover_ms: f64,
    /// Applications that read.
    pub recover_apps: u64,
}

/// Submission latency over a window, ms, each from when it was due.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LatencyFigures {
    /// Submissions committed.
    pub submissions: u64,
    /// Window length, s.
    pub seconds: f64,
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoreBenchResult {
    /// Ended applications written.
    pub apps: u64,
    /// Live applications written.
    pub live: u64,
    /// Retention by count.
    pub keep: u64,
    /// Chunk size.
    pub chunk: usize,
    /// Time to fill, s.
    pub fill_secs: f64,
    /// Database + WAL after the fill, bytes.
    pub size_full_bytes: u64,
    /// Building the retention index on the full store (the upgrade's migration), s.
    pub index_build_secs: f64,
    /// Restart on the full store.
    pub restart_full: RestartFigures,
    /// Submissions without pruning.
    pub submit_baseline: LatencyFigures,
    /// Submissions while the prune ran.
    pub submit_while_pruning: LatencyFigures,
    /// Applications the prune removed.
    pub pruned_apps: u64,
    /// Transactions it used.
    pub prune_chunks: u64,
    /// Its wall time, s.
    pub prune_secs: f64,
    /// Database + WAL after the prune, bytes.
    pub size_pruned_bytes: u64,
    /// Of which free pages (reused by later rows), bytes.
    pub free_pruned_bytes: u64,
    /// Restart on the pruned store.
    pub restart_pruned: RestartFigures,
}

impl StoreBenchResult {
    /// The figures as text.
    pub fn summary(&self) -> String {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let lat = |l: &LatencyFigures| {
            format!(
                "{} in {:.1} s: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.submissions, l.seconds, l.p50_ms, l.p99_ms, l.max_ms
            )
        };
        let restart = |r: &RestartFigures| {
            format!(
                "open+load_recent {:.0} ms; open+recover {:.0} ms ({} apps); open+load() {:.0} ms ({} apps)",
                r.load_recent_ms, r.recover_ms, r.recover_apps, r.load_all_ms, r.load_all_apps
            )
        };
        format!(
            "{} ended + {} live apps, retention {} (chunks of {})\n\
             fill                   {:.1} s, {:.1} MiB (db+wal)\n\
             upgrade (index build)  {:.2} s\n\
             restart, full store    {}\n\
             submit, no pruning     {}\n\
             submit, pruning        {}\n\
             prune                  {} apps in {} chunks, {:.1} s ({:.0} apps/s)\n\
             after prune            {:.1} MiB (db+wal), of which {:.1} MiB free pages\n\
             restart, pruned store  {}\n",
            self.apps,
            self.live,
            self.keep,
            self.chunk,
            self.fill_secs,
            mib(self.size_full_bytes),
            self.index_build_secs,
            restart(&self.restart_full),
            lat(&self.submit_baseline),
            lat(&self.submit_while_pruning),
            self.pruned_apps,
            self.prune_chunks,
            self.prune_secs,
            self.pruned_apps as f64 / self.prune_secs.max(1e-9),
            mib(self.size_pruned_bytes),
            mib(self.free_pruned_bytes),
            restart(&self.restart_pruned),
        )
    }
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum StoreBenchError {
    /// Bad arguments.
    #[error("{0}")]
    Args(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Reading the file beside the store failed.
    #[error("sqlite: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The engine refused its configuration.
    #[error("engine: {0}")]
    Engine(#[from] gantry_engine::EngineError),
    /// The directory could not be made or read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs the benchmark.
pub fn run(args: &StoreBenchArgs) -> Result<StoreBenchResult, StoreBenchError> {
    let rate_ok = args.rate.is_finite() && args.rate > 0.0;
    if args.apps == 0 || args.fill_batch == 0 || args.chunk == 0 || !rate_ok {
        return Err(StoreBenchError::Args(
            "--apps, --fill-batch, --chunk and --rate must be positive".into(),
        ));
    }
    if args.baseline_secs <= 0.0 || args.baseline_secs.is_nan() || args.baseline_secs > 3600.0 {
        return Err(StoreBenchError::Args("--baseline-secs must be in (0, 3600]".into()));
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("gantry-bench-store-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| StoreBenchError::Io { path: dir.clone(), source })?;
    let result = measure(args, &dir.join("gantry.db"));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(args: &StoreBenchArgs, db: &Path) -> Result<StoreBenchResult, StoreBenchError> {
    let now = wall_ms();
    let started = Instant::now();
    fill(db, args, now)?;
    let fill_secs = started.elapsed().as_secs_f64();
    let size_full_bytes = db_size(db);
    let index_build_secs = rebuild_retention_index(db)?;
    let restart_full = restart(db, args.keep)?;

    let store = Store::open(db)?;
    let mut next_id = args.apps + args.live + 1;
    let never = AtomicBool::new(false);
    let submit_baseline =
        submit_at_rate(&store, &mut next_id, args.rate, &|t| t >= args.baseline_secs, &never)?;
    let retention = Retention { max_completed_apps: args.keep, max_age: None, chunk_apps: args.chunk };
    let done = AtomicBool::new(false);
    let (report, submit_while_pruning) = std::thread::scope(|s| {
        let pruner = s.spawn(|| {
            let r = store.prune_ended(&retention, wall_ms(), &never);
            done.store(true, Ordering::Relaxed);
            r
        });
        let latency = submit_at_rate(&store, &mut next_id, args.rate, &|_| false, &done);
        let report = pruner.join().unwrap_or(Err(StoreError::Closed));
        (report, latency)
    });
    let report: PruneReport = report?;
    let submit_while_pruning = submit_while_pruning?;
    store.close()?;
    let size_pruned_bytes = db_size(db);
    let free_pruned_bytes = free_bytes(db)?;
    let restart_pruned = restart(db, args.keep)?;
    Ok(StoreBenchResult {
        apps: args.apps,
        live: args.live,
        keep: args.keep,
        chunk: args.chunk,
        fill_secs,
        size_full_bytes,
        index_build_secs,
        restart_full,
        submit_baseline,
        submit_while_pruning,
        pruned_apps: report.pruned_apps,
        prune_chunks: report.chunks,
        prune_secs: report.took.as_secs_f64(),
        size_pruned_bytes,
        free_pruned_bytes,
        restart_pruned,
    })
}

/// Writes the ended applications (oldest first, one ms apart, ending before `now`) and then the
/// live ones, a few big jobs in flight at a time.
fn fill(db: &Path, args: &StoreBenchArgs, now: u64) -> Result<(), StoreBenchError> {
    let store = Store::open(db)?;
    let first_end = now.saturating_sub(args.apps + 1);
    let total = args.apps + args.live;
    let mut in_flight = std::collections::VecDeque::new();
    let mut id = 1;
    while id <= total {
        let last = (id + args.fill_batch - 1).min(total);
        let mut writes = Vec::with_capacity(2 * (last - id + 1) as usize);
        for i in id..=last {
            let live = i > args.apps;
            let mut app: AppRecord = gantry_scheduler::store::bench_app(i);
            app.submit_ms = first_end + i - 1;
            app.state = if live { GANTRY_APP_RUNNING } else { GANTRY_APP_FINISHED };
            app.state_ms = if live { now } else { first_end + i };
            writes.push(Write::InsertApp(app));
            writes.push(Write::UpsertContainer(ContainerRecord {
                id: ContainerId(i),
                app: AppId(i),
                request: 0,
                node: format!("node-{:04}", i % 1000),
                resources: Resources::new(100, 64 << 20, 0),
                gpus: Vec::new(),
                state: if live { GANTRY_CONTAINER_RUNNING } else { GANTRY_CONTAINER_COMPLETED },
                started_ms: Some(first_end + i - 1),
                exit_code: (!live).then_some(0),
                reason: (!live).then(|| "exited".to_owned()),
                finished_ms: (!live).then_some(first_end + i),
                cluster: gantry_proto::ClusterId::LEGACY,
            }));
        }
        in_flight.push_back(store.submit(writes)?);
        if in_flight.len() >= 4 {
            in_flight.pop_front().map_or(Ok(()), gantry_scheduler::store::Ack::wait)?;
        }
        id = last + 1;
    }
    for ack in in_flight {
        ack.wait()?;
    }
    store.close()?;
    Ok(())
}

/// Reopens the store three times: reading what the daemon reads, as the daemon starts (that
/// read and the engine rebuilt), and reading everything. An untimed open and close comes first,
/// so that no variant pays for settling what the step before it wrote (the first open after a
/// bulk write waits on the disk for a few hundred ms).
fn restart(db: &Path, keep: u64) -> Result<RestartFigures, StoreBenchError> {
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    Store::open(db)?.close()?;

    let started = Instant::now();
    let store = Store::open(db)?;
    let recent = store.load_recent(keep)?;
    let load_recent_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(recent);
    store.close()?;

    let engine = Engine::builtin(EngineConfig { history_len: keep, ..EngineConfig::default() })?;
    let started = Instant::now();
    let store = std::sync::Arc::new(Store::open(db)?);
    let core = Core::recover(engine, std::sync::Arc::clone(&store), Duration::from_secs(10))?;
    let recover_ms = started.elapsed().as_secs_f64() * 1e3;
    let recover_apps =
        (core.controller().engine().state().apps().len() + core.controller().past().len()) as u64;
    drop(core);
    if let Some(store) = std::sync::Arc::into_inner(store) {
        store.close()?;
    }

    let started = Instant::now();
    let store = Store::open(db)?;
    let all = store.load()?;
    let load_all_ms = started.elapsed().as_secs_f64() * 1e3;
    let load_all_apps = all.apps.len() as u64;
    drop(all);
    store.close()?;
    Ok(RestartFigures { load_all_ms, load_all_apps, load_recent_ms, recover_ms, recover_apps })
}

/// Submits one application every `1 / rate` s until `enough(elapsed seconds)` or `stop`,
/// without waiting for the commits (as independent clients do: the daemon answers each once its
/// commit is in); another thread collects each commit, and a latency runs from when its
/// submission was due to its commit.
fn submit_at_rate(
    store: &Store,
    next_id: &mut u64,
    rate: f64,
    enough: &dyn Fn(f64) -> bool,
    stop: &AtomicBool,
) -> Result<LatencyFigures, StoreError> {
    let period = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, gantry_scheduler::store::Ack)>();
    let (submitted, latencies) = std::thread::scope(|s| {
        // Commits resolve in submission order, so waiting for each in turn times each one.
        let collector = s.spawn(move || -> Result<Vec<Duration>, StoreError> {
            let mut latencies = Vec::new();
            for (due, ack) in rx {
                ack.wait()?;
                latencies.push(due.elapsed());
            }
            Ok(latencies)
        });
        let submitted = (|| -> Result<(), StoreError> {
            let mut due = started;
            while !stop.load(Ordering::Relaxed) && !enough(started.elapsed().as_secs_f64()) {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let mut app = gantry_scheduler::store::bench_app(*next_id);
                app.submit_ms = wall_ms();
                app.state_ms = app.submit_ms;
                *next_id += 1;
                let ack = store.submit(vec![Write::InsertApp(app)])?;
                if tx.send((due, ack)).is_err() {
                    break;
                }
                due += period;
            }
            Ok(())
        })();
        drop(tx);
        (submitted, collector.join().unwrap_or(Err(StoreError::Closed)))
    });
    submitted?;
    let mut latencies = latencies?;
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    Ok(LatencyFigures {
        submissions: latencies.len() as u64,
        seconds,
        p50_ms: super::quantile_ms(&latencies, 0.5),
        p99_ms: super::quantile_ms(&latencies, 0.99),
        max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
    })
}

/// The database file plus its WAL, bytes.
fn db_size(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    [db.to_path_buf(), PathBuf::from(wal)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

/// Drops the retention index and builds it again as its migration does; returns the seconds the
/// build took.
fn rebuild_retention_index(db: &Path) -> Result<f64, StoreBenchError> {
    let conn = rusqlite::Connection::open(db)?;
    conn.execute_batch("DROP INDEX apps_ended_by_time")?;
    let started = Instant::now();
    conn.execute_batch(gantry_scheduler::store::retention::MIGRATION_SQL)?;
    Ok(started.elapsed().as_secs_f64())
}

/// Bytes in the file's free pages.
fn free_bytes(db: &Path) -> Result<u64, StoreBenchError> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let pages: u64 = conn.pragma_query_value(None, "freelist_count", |r| r.get(0))?;
    let size: u64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    Ok(pages * size)
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run: every figure is there, the prune leaves exactly the retention plus the live
    /// apps (and what was submitted meanwhile), and bad arguments are refused.
    #[test]
    fn a_small_run_measures_every_phase_and_prunes_to_the_retention() {
        let dir = tempfile::tempdir().unwrap();
        let args = StoreBenchArgs {
            apps: 3_000,
            live: 20,
            keep: 100,
            chunk: 250,
            rate: 200.0,
            baseline_secs: 0.2,
            fill_batch: 700,
            dir: Some(dir.path().to_path_buf()),
            json: false,
        };
        let r = run(&args).expect("run");
        assert_eq!(r.pruned_apps, 2_900);
        assert_eq!(r.prune_chunks, 12, "2,900 in chunks of 250");
        assert_eq!(r.restart_full.load_all_apps, 3_020);
        assert_eq!(r.restart_full.recover_apps, 120, "live ones and the 100 newest ended");
        let submitted = r.submit_baseline.submissions + r.submit_while_pruning.submissions;
        assert_eq!(r.restart_pruned.load_all_apps, 120 + submitted, "the submissions are live");
        assert_eq!(r.restart_pruned.recover_apps, 120 + submitted);
        assert!(r.submit_baseline.submissions > 0 && r.submit_baseline.p99_ms >= r.submit_baseline.p50_ms);
        assert!(r.size_full_bytes > 0 && r.free_pruned_bytes > 0 && r.index_build_secs > 0.0);
        assert!(r.summary().contains("2900 apps in 12 chunks"), "{}", r.summary());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "its files are removed");
        let bad = StoreBenchArgs { chunk: 0, ..args };
        assert!(matches!(run(&bad), Err(StoreBenchError::Args(_))));
    }
}
