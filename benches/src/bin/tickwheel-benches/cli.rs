//! The command line, on lexopt: one parser per subcommand, each with its `--help`.
//!
//! Every option keeps the name and meaning it had; a value that does not parse is refused with the
//! option and the value named (`--reps many: invalid digit found in string`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;

use lexopt::prelude::*;
use tickwheel_benches::Kind;
use tickwheel_benches::percore::keepalive::{Design, Load};
use tickwheel_benches::shm;
use tickwheel_benches::workload::Workload;

use crate::SEED;
use crate::wheel::Plan;

pub(crate) const HELP: &str = "\
tickwheel-benches: tickwheel against the usual timer structures, side by side

usage: tickwheel-benches [OPTIONS]            every workload, memory, the per-core sections
       tickwheel-benches SUBCOMMAND [ARGS]    one section (SUBCOMMAND --help for its options)

options:
  --quick               small sizes, one repetition (a minute or two)
  --out DIR             where tables.md, summary.csv and the charts go [target/bench-results]
  --reps N              repetitions at every size [5; 1 at 10^7]
  --sizes A,B,..        live timers of the workloads [1000,100000,1000000,10000000]
  --only KIND,..        structures to run [all]: KINDS
  --workloads W,..      workloads to run [all]: WORKLOADS
  --no-memory           skip the bytes-per-timer measurement
  --no-cores            skip the multi-core sections (scaling, timeliness)
  --per-core N          keepalive timers per core in the scaling section [10000, 100000, 1000000]
  --scaling-only        run the per-core keepalive section alone
  -h, --help            this text

subcommands:
  async       tickwheel-percpu's `time` module against `tokio::time`, tokio's per-worker timer
              (built with --cfg tokio_unstable) and pingora-timeout, on the same runtimes
  keepalive   one run of the per-core keepalive load on one design
  shm         the shared-memory timer set against a wheel behind a process-shared mutex
  mem         (internal) bytes per timer of one structure, in a fresh process
  async-mem   (internal) bytes per pending sleep of one API, in a fresh process
  async-one   one async workload of one API in one task (for an instruction counter)
  percore-mem (internal) bytes per pending timer on a base or a locked wheel, in a fresh process
";

const ASYNC_HELP: &str = "\
usage: tickwheel-benches async [--quick] [--reps N] [--out DIR] [--workloads W,..] [--no-memory]
  writes async.md into DIR [target/bench-results]; --quick: one repetition, small sizes";

const KEEPALIVE_HELP: &str = "\
usage: tickwheel-benches keepalive DESIGN THREADS REMOTE_SHARE PER_CORE OPS [SEED]
  DESIGN: DESIGNS; REMOTE_SHARE in 0..=1; OPS: refreshes per thread";

const SHM_HELP: &str = "\
usage: tickwheel-benches shm [--pairs N] [--live N] [--reps N] [--processes 1|2] [--horizon N]
  --pairs: schedule+cancel pairs per process; --live: timers each keeps live;
  --processes 1: the cost without contention;
  --horizon N: instead, the owner's turn at its horizon with N timers in its far set";

const MEM_HELP: &str = "usage: tickwheel-benches mem KIND N SEED (run by the runner itself)";
const ASYNC_ONE_HELP: &str = "\
usage: tickwheel-benches async-one API WORKLOAD current|multi N
  runs N operations in one task and prints CPU ns per operation; under
  `valgrind --tool=callgrind`, two sizes' difference over their N gives instructions per op";
const ASYNC_MEM_HELP: &str =
    "usage: tickwheel-benches async-mem tokio|pingora|tickwheel N (internal)";

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Command {
    Wheel(Plan),
    Async(AsyncPlan),
    Keepalive(Design, Load),
    Shm(shm::Plan),
    Mem(Kind, usize, u64),
    PercoreMem(String, usize),
    AsyncMem(String, usize),
    /// API, workload, flavour, operations.
    AsyncOne(String, String, String, usize),
    /// `--help` somewhere: the text to print.
    Help(String),
}

/// The `async` subcommand's options.
#[derive(Debug)]
pub(crate) struct AsyncPlan {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) out: PathBuf,
    pub(crate) workloads: Vec<String>,
    pub(crate) skip_memory: bool,
}

type Result<T> = std::result::Result<T, String>;

fn unknown(arg: lexopt::Arg<'_>) -> String {
    let shown = match arg {
        Short(c) => format!("-{c}"),
        Long(l) => format!("--{l}"),
        Value(v) => v.to_string_lossy().into_owned(),
    };
    format!("unknown argument {shown:?}; see --help")
}

fn text(v: OsString, what: &str) -> Result<String> {
    v.into_string()
        .map_err(|v| format!("{what} {v:?}: not UTF-8"))
}

/// The next value, parsed; errors name the option and the value.
fn value<T: FromStr>(p: &mut lexopt::Parser, name: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let v = text(p.value().map_err(|e| format!("{name}: {e}"))?, name)?;
    v.parse().map_err(|e| format!("{name} {v}: {e}"))
}

fn list(p: &mut lexopt::Parser, name: &str) -> Result<Vec<String>> {
    let v: String = value(p, name)?;
    Ok(v.split(',').map(str::to_owned).collect())
}

fn names<T: Copy>(all: &[T], name: fn(T) -> &'static str) -> String {
    all.iter().map(|&t| name(t)).collect::<Vec<_>>().join(", ")
}

/// The error for a structure name this build does not have.
fn no_structure(name: &str) -> String {
    if name == Kind::TimeoutC.name() {
        format!(
            "no structure {name}: build with TICKWHEEL_TIMEOUT_C naming a checkout of C's timeout.c (BENCHMARKS.md, \"Reproducing\")"
        )
    } else {
        format!("no structure {name}")
    }
}

/// The runner's help with the structures and workloads filled in.
pub(crate) fn help() -> String {
    HELP.replace("KINDS", &names(Kind::ALL, Kind::name))
        .replace("WORKLOADS", &names(&Workload::ALL, Workload::name))
}

/// Parses the process's arguments: a subcommand (a first argument that is not an option) or the
/// runner's options.
pub(crate) fn parse() -> Result<Command> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let sub = args
        .first()
        .and_then(|a| a.to_str())
        .filter(|a| !a.starts_with('-'));
    let Some(sub) = sub else {
        return wheel(&mut lexopt::Parser::from_args(args));
    };
    let p = &mut lexopt::Parser::from_args(args[1..].iter().cloned());
    match sub {
        "async" => async_plan(p),
        "keepalive" => keepalive(p),
        "shm" => shm_plan(p),
        "mem" => mem(p),
        "async-mem" => async_mem(p),
        "async-one" => async_one(p),
        "percore-mem" => percore_mem(p),
        other => Err(format!("unknown argument {other:?}; see --help")),
    }
}

fn wheel(p: &mut lexopt::Parser) -> Result<Command> {
    let mut plan = Plan::default();
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help(help())),
            Long("quick") => plan.quick = true,
            Long("out") => plan.out = value::<String>(p, "--out")?.into(),
            Long("reps") => plan.reps = Some(value(p, "--reps")?),
            Long("sizes") => {
                let list: String = value(p, "--sizes")?;
                let sizes: std::result::Result<Vec<usize>, _> =
                    list.split(',').map(str::parse).collect();
                plan.sizes = Some(sizes.map_err(|e| format!("--sizes {list}: {e}"))?);
            }
            Long("only") => {
                for name in list(p, "--only")? {
                    plan.only
                        .push(Kind::from_name(&name).ok_or_else(|| no_structure(&name))?);
                }
            }
            Long("workloads") => {
                for name in list(p, "--workloads")? {
                    let w = Workload::ALL.into_iter().find(|w| w.name() == name);
                    plan.workloads.push(w.ok_or(format!("no workload {name}"))?);
                }
            }
            Long("no-memory") => plan.skip_memory = true,
            Long("no-cores") => plan.skip_cores = true,
            Long("per-core") => plan.per_core = Some(value(p, "--per-core")?),
            Long("scaling-only") => plan.scaling_only = true,
            Long("bench") => {} // passed by `cargo bench`
            other => return Err(unknown(other)),
        }
    }
    Ok(Command::Wheel(plan))
}

fn async_plan(p: &mut lexopt::Parser) -> Result<Command> {
    let mut plan = AsyncPlan {
        quick: false,
        reps: 5,
        out: PathBuf::from("target/bench-results"),
        workloads: Vec::new(),
        skip_memory: false,
    };
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help(ASYNC_HELP.into())),
            Long("quick") => (plan.quick, plan.reps) = (true, 1),
            Long("reps") => match value(p, "--reps")? {
                0 => return Err("--reps must be at least 1".into()),
                r => plan.reps = r,
            },
            Long("out") => plan.out = value::<String>(p, "--out")?.into(),
            Long("workloads") => plan.workloads = list(p, "--workloads")?,
            Long("no-memory") => plan.skip_memory = true,
            other => return Err(unknown(other)),
        }
    }
    Ok(Command::Async(plan))
}

/// The positional arguments of a subcommand, or its help.
fn positional(
    p: &mut lexopt::Parser,
    help: &str,
) -> Result<std::result::Result<Vec<String>, String>> {
    let mut args = Vec::new();
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Err(help.to_owned())),
            Value(v) => args.push(text(v, "argument")?),
            other => return Err(unknown(other)),
        }
    }
    Ok(Ok(args))
}

fn parse_at<T: FromStr>(args: &[String], i: usize, what: &str, usage: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let v = args.get(i).ok_or_else(|| usage.to_owned())?;
    v.parse().map_err(|e| format!("{what} {v}: {e}"))
}

fn keepalive(p: &mut lexopt::Parser) -> Result<Command> {
    let usage = KEEPALIVE_HELP.replace("DESIGNS", &names(&Design::ALL, Design::key));
    let args = match positional(p, &usage)? {
        Ok(args) if (5..=6).contains(&args.len()) => args,
        Ok(_) => return Err(usage),
        Err(help) => return Ok(Command::Help(help)),
    };
    let design =
        Design::from_key(&args[0]).ok_or_else(|| format!("no design {:?}; {usage}", args[0]))?;
    let load = Load {
        threads: parse_at(&args, 1, "THREADS", &usage)?,
        remote_share: parse_at(&args, 2, "REMOTE_SHARE", &usage)?,
        per_core: parse_at(&args, 3, "PER_CORE", &usage)?,
        ops_per_thread: parse_at(&args, 4, "OPS", &usage)?,
        seed: if args.len() == 6 {
            parse_at(&args, 5, "SEED", &usage)?
        } else {
            SEED
        },
    };
    Ok(Command::Keepalive(design, load))
}

fn shm_plan(p: &mut lexopt::Parser) -> Result<Command> {
    let mut plan = shm::Plan::default();
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(Command::Help(SHM_HELP.into())),
            Long("pairs") => plan.pairs = value::<u64>(p, "--pairs")?.max(1),
            Long("live") => plan.live = value::<usize>(p, "--live")?.max(1),
            Long("reps") => plan.reps = value::<usize>(p, "--reps")?.max(1),
            Long("processes") => plan.processes = value::<usize>(p, "--processes")?.clamp(1, 2),
            Long("horizon") => plan.horizon = Some(value::<usize>(p, "--horizon")?.max(1)),
            other => return Err(unknown(other)),
        }
    }
    Ok(Command::Shm(plan))
}

fn mem(p: &mut lexopt::Parser) -> Result<Command> {
    let args = match positional(p, MEM_HELP)? {
        Ok(args) if args.len() == 3 => args,
        Ok(_) => return Err(MEM_HELP.into()),
        Err(help) => return Ok(Command::Help(help)),
    };
    let kind = Kind::from_name(&args[0]).ok_or_else(|| no_structure(&args[0]))?;
    let n = parse_at(&args, 1, "N", MEM_HELP)?;
    Ok(Command::Mem(kind, n, parse_at(&args, 2, "SEED", MEM_HELP)?))
}

const PERCORE_MEM_HELP: &str =
    "usage: tickwheel-benches percore-mem percpu|mutex-wheel N (internal)";

fn percore_mem(p: &mut lexopt::Parser) -> Result<Command> {
    match positional(p, PERCORE_MEM_HELP)? {
        Ok(args) if args.len() == 2 => {
            let n = parse_at(&args, 1, "N", PERCORE_MEM_HELP)?;
            Ok(Command::PercoreMem(args[0].clone(), n))
        }
        Ok(_) => Err(PERCORE_MEM_HELP.into()),
        Err(help) => Ok(Command::Help(help)),
    }
}

fn async_mem(p: &mut lexopt::Parser) -> Result<Command> {
    match positional(p, ASYNC_MEM_HELP)? {
        Ok(args) if args.len() == 2 => {
            let n = parse_at(&args, 1, "N", ASYNC_MEM_HELP)?;
            Ok(Command::AsyncMem(args[0].clone(), n))
        }
        Ok(_) => Err(ASYNC_MEM_HELP.into()),
        Err(help) => Ok(Command::Help(help)),
    }
}

fn async_one(p: &mut lexopt::Parser) -> Result<Command> {
    match positional(p, ASYNC_ONE_HELP)? {
        Ok(args) if args.len() == 4 => {
            let n = parse_at(&args, 3, "N", ASYNC_ONE_HELP)?;
            let [api, workload, flavor, _] = <[String; 4]>::try_from(args).expect("four");
            Ok(Command::AsyncOne(api, workload, flavor, n))
        }
        Ok(_) => Err(ASYNC_ONE_HELP.into()),
        Err(help) => Ok(Command::Help(help)),
    }
}
