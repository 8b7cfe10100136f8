//! `guard doctor`: which enforcement backend this kernel allows, found by loading programs.

use std::process::ExitCode;

use anstream::println;
use clap::Args;

use crate::cli::output;
use crate::doctor;
use crate::kernel::layers::LayerState;

#[derive(Args, Debug)]
#[command(
    after_help = "Each check loads real programs (root needed): a kernel can list `bpf` among
its LSMs and still refuse LSM programs, so configuration is never trusted.
The `landlock:` line gives the Landlock ABI the kernel answers (or absent): with it, `guard run`
confines the command's writes below the protected paths and write(...) denials.
The `sandbox modes` line lists the `guard run --sandbox` modes this machine can hold
(read-only and workspace-write need Landlock and root).
The `system rules` line says whether the system rules folder (/etc/guard/rules) is safe from the
commands guard runs: root's alone, or missing below a folder of guard's that `guard run` holds
read-only (create /etc/guard as root to make it so).
Then, for the backend in use, how each kind of rule is enforced, and which are not (on the
cgroup backend the kernel holds no read(...)/write(...) rule; docs/enforcement.md has the full table),
the layers of enforcement a scope here gets (exec, network, unix, devices, files, dns: up,
degraded or missing, with why), and what guard's resolver (in the path of the scope's DNS)
cannot see.
Exit status: 0 when some backend works, 1 when none does."
)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &DoctorArgs) -> ExitCode {
    let report = doctor::run();
    if args.json {
        output::print_json(&serde_json::to_value(&report).unwrap_or_default());
    } else {
        for check in &report.checks {
            let (mark, style) = if check.ok {
                (
                    "ok     ",
                    output::decision_style(Some(crate::policy::Decision::Allow)),
                )
            } else {
                (
                    "refused",
                    output::decision_style(Some(crate::policy::Decision::Forbidden)),
                )
            };
            println!("{style}{mark}{style:#} {}: {}", check.name, check.detail);
        }
        println!("landlock: {}", report.landlock.detail);
        println!(
            "sandbox modes: {} ({})",
            report.sandbox_modes.modes.join(", "),
            report.sandbox_modes.detail
        );
        let style = output::decision_style(Some(if report.system_rules.ok {
            crate::policy::Decision::Allow
        } else {
            crate::policy::Decision::Prompt
        }));
        println!(
            "system rules {}: {style}{}{style:#}",
            report.system_rules.path, report.system_rules.detail
        );
        match report.backend {
            Some(backend) => println!("backend: {} (the one `guard run` uses)", backend.as_str()),
            None => println!("backend: none: guard cannot enforce on this kernel"),
        }
        if let Some(backend) = report.backend {
            println!("what the {} backend enforces:", backend.as_str());
            for row in &report.enforces {
                let style = output::decision_style(Some(if row.enforced {
                    crate::policy::Decision::Allow
                } else {
                    crate::policy::Decision::Prompt
                }));
                println!("  {}: {style}{}{style:#}", row.rules, row.how);
            }
            println!("the layers a scope here gets (`guard status` has a daemon's, live):");
            for layer in &report.layers {
                let style = output::decision_style(Some(match layer.state {
                    LayerState::Up => crate::policy::Decision::Allow,
                    _ => crate::policy::Decision::Prompt,
                }));
                println!(
                    "  {}: {style}{}{style:#}: {}",
                    layer.layer,
                    layer.state.as_str(),
                    layer.detail
                );
            }
            println!("what guard's resolver cannot see, and how it is decided instead:");
            for spot in &report.resolver_cannot_see {
                println!("  {}: {}", spot.what, spot.how);
            }
            println!("a root process inside a scope, against guard itself:");
            for kind in &report.against_root {
                println!("  {}:", kind.scope);
                println!("    held by: {}", kind.holds);
                println!("    can still: {}", kind.can_still);
            }
        }
    }
    if report.backend.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
