//! cuvk's errors as Python exceptions (`cuvk._errors`): the class is chosen by the error's
//! kind, and the exception keeps the rule (the Rust enum path) and the numbers it was checked
//! with, so Python code can match on them as Rust code matches on the enum.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What an exception carries besides its message.
pub struct Refusal {
    /// `cuvk.ErrorKind`'s variant name: picks the exception class.
    pub kind: &'static str,
    /// The broken rule, e.g. `"Layout.OutOfBounds"` or `"Array.Dtype"`.
    pub rule: String,
    /// The integers the rule was checked with.
    pub numbers: Vec<(String, i128)>,
    /// The Vulkan valid-usage ID, where the spec states one.
    pub vuid: Option<&'static str>,
    /// The message.
    pub message: String,
}

/// A refusal made by the Python layer itself (dtype, shape, device of a foreign array).
pub fn refusal(
    kind: &'static str,
    rule: &str,
    message: impl Into<String>,
    numbers: &[(&str, i128)],
) -> PyErr {
    to_py(Refusal {
        kind,
        rule: rule.to_owned(),
        numbers: numbers.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        vuid: None,
        message: message.into(),
    })
}

/// `err` (an exception made by `refusal`) with `numbers[name] = value`: a Python int of any
/// size, where `refusal`'s numbers are i128 (a stream handle of 2**200 is kept exactly).
pub fn with_number(err: PyErr, name: &str, value: &Bound<'_, PyAny>) -> PyErr {
    let py = value.py();
    if let Ok(numbers) = err.value(py).getattr("numbers") {
        // Without the number (an exception that is not cuvk's: the module failed to import)
        // the error still says what it refuses.
        let _ = numbers.set_item(name, value);
    }
    err
}

/// A cuvk error as its Python exception.
pub fn from_cuvk(e: cuvk::Error) -> PyErr {
    to_py(describe(&e))
}

/// The parts of a cuvk error that its exception keeps.
pub fn describe(e: &cuvk::Error) -> Refusal {
    Refusal {
        kind: kind_name(e.kind()),
        // cuvk's own rule (the C ABI and Bevy report the same); the error's path where no
        // rule was broken (a driver call that failed: "Vulkan", "Cuda", "Timeout").
        rule: e.name(),
        numbers: e.numbers(),
        vuid: e.vuid(),
        message: message_chain(e),
    }
}

fn kind_name(kind: cuvk::ErrorKind) -> &'static str {
    use cuvk::ErrorKind as K;
    match kind {
        K::InvalidInput => "InvalidInput",
        K::Unsupported => "Unsupported",
        K::NotEnabled => "NotEnabled",
        K::NotFound => "NotFound",
        K::OutOfMemory => "OutOfMemory",
        K::WrongDevice => "WrongDevice",
        K::Driver => "Driver",
        K::Timeout => "Timeout",
        K::Io => "Io",
        _ => "",
    }
}

/// The error's message followed by its sources' ("a: b: c").
fn message_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn to_py(r: Refusal) -> PyErr {
    Python::attach(|py| match build(py, &r) {
        Ok(e) => e,
        Err(_) => PyRuntimeError::new_err(r.message),
    })
}

fn build(py: Python<'_>, r: &Refusal) -> PyResult<PyErr> {
    let make = py.import("cuvk._errors")?.getattr("_make")?;
    let numbers = PyDict::new(py);
    for (k, v) in &r.numbers {
        numbers.set_item(k, v)?;
    }
    let exc = make.call1((r.message.as_str(), r.kind, r.rule.as_str(), numbers, r.vuid))?;
    Ok(PyErr::from_value(exc))
}

/// `?` on cuvk results inside Python methods.
pub trait IntoPyResult<T> {
    /// The result with its error as a Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for cuvk::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(from_cuvk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same refusal as the C ABI's and Bevy's tests: Python reports cuvk's rule name
    /// (`cuvk::Rule`), with the numbers; a failed call (no rule) keeps its error path.
    #[test]
    fn refusals_carry_cuvks_rule_as_every_front_end_does() {
        let e = cuvk::Error::Layout(cuvk::LayoutError::ZeroSize { offset: 64 });
        let r = describe(&e);
        assert_eq!(r.rule, cuvk::Rule::LayoutZeroSize.name());
        assert_eq!(r.rule, "Layout.ZeroSize");
        assert_eq!(r.numbers, vec![("offset".to_owned(), 64)]);
        let t = describe(&cuvk::Error::Timeout {
            what: "x",
            timeout_ns: 5,
        });
        assert_eq!(t.rule, "Timeout");
    }

    #[test]
    fn a_real_error_keeps_kind_rule_and_numbers() {
        let e: cuvk::Error = cuvk::LayoutError::Misaligned {
            what: "offset",
            value: 4,
            alignment: 16,
            rule: cuvk::AlignmentRule::CudaMappedBuffer,
        }
        .into();
        let r = describe(&e);
        assert_eq!(r.kind, "InvalidInput");
        assert_eq!(r.rule, "Layout.Misaligned");
        assert!(r.numbers.contains(&("value".to_owned(), 4)));
        assert!(r.numbers.contains(&("alignment".to_owned(), 16)));
    }
}
