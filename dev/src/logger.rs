//! Prints `cuvk`'s warnings and errors to stderr as they happen. Since 0.2 the library does not
//! print; it reports through the `log` crate (validation messages as warnings, resources it
//! leaks to stay safe as errors). The examples show them as the library used to print them.
//! Shared by the examples.

struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level() && metadata.target().starts_with("cuvk")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        match record.level() {
            log::Level::Error => eprintln!("cuvk: {}", record.args()),
            _ => eprintln!("{}", record.args()),
        }
    }

    fn flush(&self) {}
}

/// Installs the logger (once; later calls, or another logger already set, change nothing):
/// warnings and errors, or down to the level `RUST_LOG` names (`info`, `debug`, `trace`, or
/// `cuvk::ipc=debug`: the level after the last `=`; cuvk's records only either way).
pub fn init() {
    if log::set_logger(&Stderr).is_ok() {
        let asked = std::env::var("RUST_LOG").unwrap_or_default();
        let level = asked.rsplit('=').next().unwrap_or_default().parse();
        log::set_max_level(level.unwrap_or(log::LevelFilter::Warn));
    }
}
