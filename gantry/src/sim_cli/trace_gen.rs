//! `gantry trace gen`: a synthetic trace from weighted job classes at a target load.

use super::SimCliError;
use gantry_sim::cluster::ClusterSpec;
use gantry_sim::trace;
use std::path::PathBuf;

/// The formats `gantry trace gen` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GenFormat {
    /// gantry's JSON lines, one file.
    Gantry,
    /// CMU 15-719 CSV, one `trace<CLASS>-….csv` file per class in the output directory.
    Cmu,
}

/// `gantry trace gen` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceGenArgs {
    /// The job classes (TOML; see `gantry_sim::workload`).
    #[arg(long)]
    pub classes: PathBuf,
    /// The cluster the load is relative to.
    #[arg(long)]
    pub cluster: PathBuf,
    /// Target load ρ: offered work / capacity, in the jobs' dominant resource.
    #[arg(long)]
    pub load: f64,
    /// Arrivals over this many seconds.
    #[arg(long)]
    pub span: f64,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "gantry")]
    pub format: GenFormat,
    /// Output file (gantry) or directory (cmu).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `gantry trace gen`; returns the files written and the number of jobs.
pub fn run_trace_gen(args: &TraceGenArgs) -> Result<(Vec<PathBuf>, usize), SimCliError> {
    use gantry_sim::workload;
    let text = std::fs::read_to_string(&args.classes)
        .map_err(|e| SimCliError::Args(format!("reading {}: {e}", args.classes.display())))?;
    let classes = workload::parse_classes(&text, &args.classes.display().to_string())
        .map_err(|e| SimCliError::Args(e.to_string()))?;
    let cluster = ClusterSpec::read(&args.cluster)?;
    if args.span.is_nan() || args.span <= 0.0 {
        return Err(SimCliError::Args("--span must be positive".into()));
    }
    let spec = workload::GenSpec {
        classes: classes.clone(),
        load: args.load,
        span_ms: (args.span * 1000.0) as u64,
        seed: args.seed,
    };
    let jobs =
        workload::generate(&spec, &cluster.total_capacity()).map_err(|e| SimCliError::Args(e.to_string()))?;
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).map_err(|source| SimCliError::Write { path: path.clone(), source })
    };
    let mut written = Vec::new();
    match args.format {
        GenFormat::Gantry => {
            write(&args.out, trace::jsonl::write(&jobs))?;
            written.push(args.out.clone());
        }
        GenFormat::Cmu => {
            std::fs::create_dir_all(&args.out)
                .map_err(|source| SimCliError::Write { path: args.out.clone(), source })?;
            for c in &classes {
                let path = args.out.join(format!("trace{}-rho{}-seed{}.csv", c.name, args.load, args.seed));
                write(&path, workload::to_cmu(&jobs, &c.name))?;
                written.push(path);
            }
        }
    }
    Ok((written, jobs.len()))
}
