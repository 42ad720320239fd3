//! `--bench`: the same particle simulation stepped three ways inside Bevy — a CUDA kernel in
//! Bevy's queue (inline), a CUDA kernel on a CUDA stream (stream), WGSL compute (what a Bevy
//! user writes without CUDA) — each in a fresh headless run of this example with `--sync`
//! (every frame waits for its GPU work, so the frame time includes it), side by side in one
//! table, and as JSON (`--json PATH`).

use std::process::Command;

use bevy::prelude::AppExit;

use crate::Options;

/// One measured run.
struct Row {
    particles: u32,
    path: &'static str,
    mean: f64,
    p50: f64,
    p99: f64,
    ran: String,
}

/// The frame-time summary line a run prints: mean, p50, p99 (ms).
fn parse_summary(stdout: &str) -> Option<(f64, f64, f64)> {
    let line = stdout.lines().find(|l| l.starts_with("frames: "))?;
    let after = |key: &str| -> Option<f64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split_whitespace().next()?.parse().ok()
    };
    Some((after("mean ")?, after("p50 ")?, after("p99 ")?))
}

/// Runs the benchmark; the exit status fails if a run failed or took another path.
pub fn run(o: &Options) -> AppExit {
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("bench: cannot find this program's path");
        return AppExit::error();
    };
    let frames = o.frames.unwrap_or(600);
    let paths: [(&str, &[&str]); 3] = [
        ("WGSL compute", &["--sim", "wgsl"]),
        ("CUDA inline", &["--launch", "inline"]),
        ("CUDA stream", &["--launch", "stream"]),
    ];
    let mut rows = Vec::new();
    let mut failed = false;
    for &count in &o.counts {
        for (path, args) in paths {
            let out = std::env::temp_dir().join(format!("bevy_cuvk_bench_{}", std::process::id()));
            let run = Command::new(&exe)
                .args(["--headless", "--sync", "--skip", "60", "--frames"])
                .arg(frames.to_string())
                .args(["--particles", &count.to_string(), "--out"])
                .arg(&out)
                .args(args)
                .env("RUST_LOG", "error")
                .output();
            let _ = std::fs::remove_dir_all(&out);
            let Ok(run) = run else {
                eprintln!("bench: could not start {}", exe.display());
                return AppExit::error();
            };
            let stdout = String::from_utf8_lossy(&run.stdout);
            let ran = stdout
                .lines()
                .find_map(|l| l.strip_prefix("simulation: "))
                .unwrap_or("?")
                .to_owned();
            match (run.status.success(), parse_summary(&stdout)) {
                (true, Some((mean, p50, p99))) => rows.push(Row {
                    particles: count,
                    path,
                    mean,
                    p50,
                    p99,
                    ran,
                }),
                _ => {
                    failed = true;
                    eprintln!(
                        "bench: {path} at {count} failed ({}):\n{stdout}{}",
                        run.status,
                        String::from_utf8_lossy(&run.stderr)
                    );
                }
            }
        }
    }
    println!(
        "\nBevy frame with the particle step, {frames} frames each (first 60 left out), every \
         frame waiting for its GPU work (--sync):"
    );
    println!(
        "{:>10}  {:<13} {:>9} {:>9} {:>9} {:>9}  ran as",
        "particles", "step", "mean ms", "p50 ms", "p99 ms", "vs WGSL"
    );
    let mut json = Vec::new();
    for r in &rows {
        let wgsl = rows
            .iter()
            .find(|w| w.particles == r.particles && w.path == "WGSL compute")
            .map(|w| w.mean);
        let ratio = wgsl.map_or(f64::NAN, |w| r.mean / w);
        println!(
            "{:>10}  {:<13} {:>9.3} {:>9.3} {:>9.3} {:>8.2}x  {}",
            r.particles, r.path, r.mean, r.p50, r.p99, ratio, r.ran
        );
        json.push(format!(
            "{{\"particles\":{},\"path\":\"{}\",\"mean_ms\":{:.4},\"p50_ms\":{:.4},\
             \"p99_ms\":{:.4},\"vs_wgsl\":{:.4},\"ran_as\":\"{}\"}}",
            r.particles,
            r.path,
            r.mean,
            r.p50,
            r.p99,
            ratio,
            r.ran.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    if let Some(path) = &o.json {
        let text = format!("[\n  {}\n]\n", json.join(",\n  "));
        match std::fs::write(path, text) {
            Ok(()) => println!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("bench: could not write {}: {e}", path.display());
                failed = true;
            }
        }
    }
    if failed {
        AppExit::error()
    } else {
        AppExit::Success
    }
}
