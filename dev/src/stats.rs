//! Small statistics shared by the benchmark programs.

/// The median of `v` (the upper one for an even count); NaN-safe ordering.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
