//! `fwc import`: parse arguments, call `crate::import` (read the original, translate, prove),
//! write the repository, check it like `fwc check` does, and print the summary (text or JSON).

use std::path::PathBuf;
use std::process::ExitCode;

use miette::Result;

use crate::import::{self, ImportError, Kind};

use super::Global;

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
fwc import --from nft /etc/nftables.conf --out fw          # file loaded by nft in a scratch namespace\n  \
fwc import --from nft --live --out fw                      # this host's ruleset\n  \
fwc import --from nft --live --netns blue --out fw         # a network namespace's ruleset\n  \
fwc import --from iptables /etc/iptables/rules.v4 --out fw # iptables-save output (or the directory)\n  \
fwc import --from ufw /etc/ufw --out fw                    # loaded by ufw's own ufw-init in a scratch namespace\n  \
fwc import --from firewalld /etc/firewalld --out fw        # zones, services, policies, ipsets (proof: firewalld itself)\n  \
fwc import --from firewalld --live --out fw                # the running firewalld's /etc/firewalld\n  \
fwc import --from nft /etc/nftables.conf --out fw --verify # and prove: N flows, 0 differ\n\n\
Writes DIR/fwc.kdl, DIR/rules/*.kdl, large sets under DIR/lists/, and DIR/tests/imported.kdl: what the ORIGINAL\n\
does to a sample of flows (every rule's boundary addresses and ports, both families, each interface, random\n\
flows), evaluated by fwc's evaluator. Docker's, libvirt's and Kubernetes' chains are left out with a note.\n\
A construct fwc cannot express is an error naming its origin (with --partial: a warning).\n\
See docs/import.md. Exit codes: 0 imported (and verified), 1 error or refused constructs, 3 --verify found differences.")]
pub struct ImportArgs {
    /// What the original is: nft (an nft -f file, or the live ruleset), iptables (iptables-save
    /// output or /etc/iptables), ufw (/etc/ufw, loaded by ufw's own ufw-init), firewalld
    /// (/etc/firewalld: its XML translated; the proof runs firewalld on a copy in a scratch namespace).
    #[arg(long, value_parser = ["nft", "iptables", "ufw", "firewalld"])]
    pub from: String,
    /// The file (or directory) to import. Not with --live.
    #[arg(conflicts_with = "live")]
    pub path: Option<PathBuf>,
    /// Import the live ruleset (of this host, or of --netns NS).
    #[arg(long)]
    pub live: bool,
    /// With --live: the network namespace whose ruleset to read.
    #[arg(long, requires = "live", value_hint = clap::ValueHint::Other)]
    pub netns: Option<String>,
    /// Where to write the rule repository (must not hold one yet).
    #[arg(long)]
    pub out: PathBuf,
    /// Leave constructs fwc cannot express out, with a warning each, instead of failing.
    #[arg(long)]
    pub partial: bool,
    /// Also compile the result and evaluate the original and the import on every flow of the
    /// proof: "N flows, 0 differ", or each difference with both deciding rules (exit 3).
    #[arg(long)]
    pub verify: bool,
    /// firewalld: the system's definitions (services, zones, policies) the configuration builds on.
    #[arg(long, value_name = "DIR", default_value = crate::import::firewalld_source::DEFAULT_LIB, value_hint = clap::ValueHint::DirPath)]
    pub firewalld_lib: PathBuf,
    /// firewalld: import without the proof when firewalld is not installed (no
    /// tests/imported.kdl; nothing shows that the import does what firewalld did).
    #[arg(long, conflicts_with = "verify")]
    pub skip_proof: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ImportArgs, g: &Global) -> Result<ExitCode> {
    let kind = match a.from.as_str() {
        "nft" => Kind::Nft,
        "iptables" => Kind::Iptables,
        "ufw" => Kind::Ufw,
        _ => Kind::Firewalld,
    };
    if a.path.is_none() && !a.live {
        return Err(miette::miette!(help = "give the file to import (e.g. /etc/nftables.conf) or --live", "fwc import needs a PATH or --live"));
    }
    let quiet = g.quiet;
    let mut progress = |what: &str| {
        if !quiet {
            eprintln!("fwc import: {what}…");
        }
    };
    progress("reading the original");
    let fail = |e: ImportError| -> Result<ExitCode> {
        if let ImportError::Refused(list) = &e {
            for r in list {
                eprintln!("error: {}: {}\n  help: {}", r.origin, r.what, r.hint);
            }
        }
        Err(miette::miette!(help = e.hint(), "{e}"))
    };
    let (imp, label) = if kind == Kind::Firewalld {
        if a.netns.is_some() {
            return Err(miette::miette!(help = "run fwc in that namespace's mount namespace, or give its configuration directory as PATH", "--netns is for --from nft/iptables: firewalld's configuration is a directory"));
        }
        let dir = a.path.clone().unwrap_or_else(|| PathBuf::from("/etc/firewalld"));
        match import::firewalld(&dir, &a.firewalld_lib, a.live, a.skip_proof, a.partial, &mut progress) {
            Ok(x) => x,
            Err(e) => return fail(e),
        }
    } else {
        if a.skip_proof {
            return Err(miette::miette!(help = "the other sources are proved by loading them with their own tool", "--skip-proof is for --from firewalld"));
        }
        let (listing, origins, label, notes) = match import::read(kind, a.path.as_deref(), a.live, a.netns.as_deref()) {
            Ok(x) => x,
            Err(e) => return fail(e),
        };
        match import::import_with_notes(listing, &origins, &label, notes, a.partial, &mut progress) {
            Ok(x) => (x, label),
            Err(e) => return fail(e),
        }
    };
    if a.live && kind == Kind::Firewalld && !a.json {
        eprintln!("warning: --live imports firewalld's permanent configuration: runtime-only changes (firewall-cmd without --permanent) are not in it");
    }
    let i = &imp.imported;
    if a.verify {
        if let Some(why) = &imp.proof_missing {
            for r in &i.refused {
                eprintln!("warning: {}: {} (left out)\n  help: {}", r.origin, r.what, r.hint);
            }
            return Err(miette::miette!(
                help = "import without --verify to write the rules without tests/imported.kdl (nothing then proves them: check them by hand), or rewrite that rule in the original",
                "--verify needs the proof, and fwc's evaluator cannot run the original: {why}"
            ));
        }
    }
    // Everything is written aside (a directory beside --out), checked and verified there, and
    // moved into place at the end: a failed import leaves nothing behind.
    let staging = match import::Staging::new(&a.out) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    if let Err(e) = import::write(staging.dir(), &imp.files) {
        return fail(e);
    }
    // The result must pass `fwc check`: report (and fail on) anything it does not.
    progress("checking the result");
    let tree = fwc_compiler::read::source::SourceTree::from_dir(staging.dir());
    let checked = tree.and_then(|t| {
        fwc_compiler::check_fleet(&t)?;
        fwc_compiler::policytest::check(&t)?;
        Ok(t)
    });
    let tree = match checked {
        Ok(t) => t,
        Err(d) => {
            eprint!("{}", d.render(g.color_stderr()));
            return Err(miette::miette!(help = "this is a bug in fwc import: please report it with the original ruleset (nothing was written)", "the imported rules for {} do not pass `fwc check`", a.out.display()));
        }
    };
    let mut differences = None;
    if a.verify {
        progress(&format!("verifying {} flows", imp.flows.len()));
        let (art, _) = match fwc_compiler::compile(&tree, None, None) {
            Ok(x) => x,
            Err(d) => {
                eprint!("{}", d.render(g.color_stderr()));
                return Ok(ExitCode::from(1));
            }
        };
        differences = Some(match import::verify(&imp.listing, &art, &imp.flows) {
            Ok(d) => d,
            Err(e) => return fail(e),
        });
    }
    if let Err(e) = staging.commit() {
        return fail(e);
    }
    if a.json {
        let v = super::output::versioned(&serde_json::json!({
            "out": a.out.display().to_string(),
            "source": label,
            "files": imp.files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "imported": i.imported(),
            "merged": i.merged.iter().map(|(o, w)| serde_json::json!({"origin": o, "why": w})).collect::<Vec<_>>(),
            "refused": i.refused,
            "notes": i.notes,
            "flows": imp.flows.len(),
            "proof_missing": imp.proof_missing,
            "differences": differences,
        }));
        super::output::print(&v);
    } else {
        for (o, why) in &i.merged {
            println!("merged:   {o}: {why}");
        }
        for r in &i.refused {
            eprintln!("warning: {}: {} (left out)\n  help: {}", r.origin, r.what, r.hint);
        }
        for n in &i.notes {
            println!("note:     {n}");
        }
        if let Some(why) = &imp.proof_missing {
            eprintln!("warning: no tests/imported.kdl: {why}");
        }
        println!(
            "imported {} rule(s), merged {}, refused {} into {} ({} files, {} flows in tests/imported.kdl)",
            i.imported(),
            i.merged.len(),
            i.refused.len(),
            a.out.display(),
            imp.files.len(),
            if imp.proof_missing.is_some() { 0 } else { imp.flows.len() }
        );
        if let Some(d) = &differences {
            for x in d {
                println!("differs:  {}\n  original: {}\n  imported: {}", x.flow, x.original, x.imported);
            }
            println!("{} flows, {} differ", imp.flows.len(), d.len());
        }
    }
    if differences.is_some_and(|d| !d.is_empty()) {
        return Ok(ExitCode::from(3));
    }
    Ok(ExitCode::SUCCESS)
}
