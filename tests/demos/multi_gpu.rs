//! The particle demo's multi-GPU mode (`--gpus N`, sort-last on NCCL): the picture of N GPUs
//! equals the one-GPU picture exactly (integer sums), and a rank that dies makes the others
//! stop with an error within the rank timeout. Needs 2 CUDA GPUs and NCCL: skipped with the
//! reason elsewhere (REQUIRE_GPUS=2 makes that a failure). The command-line refusals run
//! everywhere.

use crate::particles::{run_demo, temp_dir};
use cuvk_dev::testing::read_png;

use std::time::{Duration, Instant};

fn two_gpus(test: &str) -> bool {
    let n = cuvk::cuda::devices().map(|d| d.len()).unwrap_or(0);
    let nccl = cuvk::nccl::version().is_ok();
    if n >= 2 && nccl {
        return true;
    }
    let wanted: usize = std::env::var("REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(
        wanted < 2,
        "{test}: REQUIRE_GPUS={wanted}, but {n} GPU(s), NCCL present: {nccl}"
    );
    eprintln!("SKIP {test}: needs 2 CUDA GPUs and NCCL ({n} GPU(s), NCCL present: {nccl})");
    false
}

#[test]
fn bad_gpu_counts_are_usage_errors() {
    let out = run_demo(&["--gpus", "0"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--gpus must be at least 1"));
    let out = run_demo(&["--gpus", "2", "--fail-at", "x"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_without_a_name_is_a_usage_error() {
    let out = run_demo(&["--serve"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let out = run_demo(&["--serve", "x", "--frames", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--serve needs a name"));
}

/// Pixels below the HUD panel that differ between `--gpus 1` and `--gpus 2` pictures of
/// composite `mode` (the two-GPU run with `two_gpu_args` too), and the lit pixels of the
/// one-GPU picture.
fn one_vs_two_gpus(mode: &str, two_gpu_args: &[&str]) -> (usize, usize) {
    let mut pictures = Vec::new();
    for gpus in ["1", "2"] {
        let dir = temp_dir(&format!("multi{gpus}-{mode}{}", two_gpu_args.join("")));
        let d = dir.to_str().unwrap();
        let mut args = vec![
            "--gpus",
            gpus,
            "--composite",
            mode,
            "--particles",
            "4000000",
            "--frames",
            "40",
            "--out",
            d,
        ];
        if gpus == "2" {
            args.extend_from_slice(two_gpu_args);
        }
        let out = run_demo(&args);
        assert!(
            out.status.success(),
            "--gpus {gpus} --composite {mode} failed"
        );
        pictures.push(read_png(&dir.join(format!("multi_{gpus}gpu_0040.png"))));
    }
    let (w, h, one) = &pictures[0];
    let (_, _, two) = &pictures[1];
    // The HUD's second line names the GPU count: compare the picture below the HUD panel.
    let hud_rows = 6 * (h / 360).max(1) + (3 * 10 + 5) * (h / 360).max(1) + 2;
    let below: usize = one
        .chunks(4 * *w as usize)
        .zip(two.chunks(4 * *w as usize))
        .skip(hud_rows as usize)
        .map(|(a, b)| a.chunks(4).zip(b.chunks(4)).filter(|(x, y)| x != y).count())
        .sum();
    let lit = one
        .chunks(4)
        .filter(|p| p[0] as u32 + p[1] as u32 + p[2] as u32 > 60)
        .count();
    (below, lit)
}

#[test]
fn two_gpus_draw_exactly_the_one_gpu_picture() {
    if !two_gpus("multi_gpu_picture") {
        return;
    }
    // The glow sums integer counts (ncclSum); the opaque mode keeps the nearest packed sample
    // (ncclMin): both are exact whatever the split, the schedule and NCCL's transport.
    for (mode, two_gpu_args) in [
        ("add", &[][..]),
        ("depth", &[][..]),
        ("depth", &["--schedule", "scatter"][..]),
        ("depth", &["--net"][..]),
    ] {
        let (below, lit) = one_vs_two_gpus(mode, two_gpu_args);
        let mode = format!("{mode} {}", two_gpu_args.join(" "));
        eprintln!(
            "multi_gpu_picture --composite {mode}: {below} pixels differ below the HUD, {lit} lit"
        );
        assert_eq!(
            below, 0,
            "--composite {mode}: the pictures must match exactly"
        );
        assert!(
            lit > 10_000,
            "--composite {mode}: a picture of galaxies, not a black frame ({lit} lit pixels)"
        );
    }
}

#[test]
fn a_rank_that_dies_stops_the_others_within_the_rank_timeout() {
    if !two_gpus("multi_gpu_rank_death") {
        return;
    }
    let dir = temp_dir("multi_death");
    let start = Instant::now();
    let out = run_demo(&[
        "--gpus",
        "2",
        "--particles",
        "4000000",
        "--frames",
        "400",
        "--fail-at",
        "1:30",
        "--rank-timeout",
        "5",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a rank died: the run must fail");
    assert!(
        err.contains("rank 0: a collective did not complete"),
        "rank 0 says why: {err}"
    );
    assert!(took < Duration::from_secs(60), "bounded: {took:?}");
}
