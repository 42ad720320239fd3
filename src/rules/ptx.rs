//! Kernel signatures read from PTX text: the parameter list of each `.entry`, so that a launch
//! whose arguments do not match (a GPU fault, not an error, if it reached the driver) is
//! refused first. Pure text processing, tested on the PTX files in `shaders/ptx/`.

use std::fmt;

/// One parameter of a kernel, as PTX declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxParam {
    /// The parameter's name in the PTX (`stamp_param_0`).
    pub name: String,
    /// Its type as written (`.u64`, `.b8`, `.f32`, ...).
    pub ty: String,
    /// Size in bytes (element size × array length).
    pub size: usize,
    /// Alignment in bytes (`.align N`, or the element size).
    pub align: usize,
}

impl PtxParam {
    /// Whether a 64-bit integer fits: what a device address (pointer) argument needs.
    pub fn can_hold_pointer(&self) -> bool {
        self.size == 8 && matches!(self.ty.as_str(), ".u64" | ".s64" | ".b64")
    }
}

impl fmt::Display for PtxParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} ({} bytes)", self.ty, self.name, self.size)
    }
}

/// A kernel entry point and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSignature {
    /// The entry's name (`extern "C"` kernels keep their C name).
    pub name: String,
    /// Its parameters in order.
    pub params: Vec<PtxParam>,
}

/// The most bytes of parameters a CUDA kernel takes (CUDA 12.1 and later on Volta and
/// later GPUs: 32,764; older toolkits 4,096). A declared parameter list larger than this is
/// refused before any driver sees it.
pub const MAX_KERNEL_PARAM_BYTES: u64 = 32_764;

// The table: the enum, and beside each variant its rule (see `error::table`).
crate::error::table::refusals! {
    rows ptx_rules, path "Ptx.";
    /// Why PTX text could not be read.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[non_exhaustive]
    pub enum PtxError {
        /// No `.entry` of that name.
        #[error("PTX has no kernel `{name}`; its kernels: [{available}]")]
        NoEntry {
            /// The name asked for.
            name: String,
            /// The entries that exist, comma-separated.
            available: String,
        } => {
            /// PTX without a kernel of that name.
            PtxNoEntry = 0x0401
        },
        /// A parameter list could not be parsed.
        #[error("cannot parse parameter `{text}` of PTX kernel `{entry}`")]
        Malformed {
            /// The entry.
            entry: String,
            /// The text that did not parse.
            text: String,
        } => {
            /// A PTX parameter list that does not parse.
            PtxMalformed = 0x0402
        },
        /// An array parameter whose byte size (element size × length) does not fit in 64 bits.
        #[error(
            "parameter `{param}` of PTX kernel `{entry}` declares {count} elements of \
             {element_size} bytes: the size overflows 64 bits"
        )]
        ParamSizeOverflow {
            /// The entry.
            entry: String,
            /// The parameter's name.
            param: String,
            /// Bytes per element.
            element_size: u64,
            /// The declared length (`u64::MAX` where the length written is larger still).
            count: u64,
        } => {
            /// A PTX array parameter whose byte size overflows 64 bits.
            PtxParamSizeOverflow = 0x0403
        },
        /// The parameters take more bytes than a kernel launch may pass
        /// ([`MAX_KERNEL_PARAM_BYTES`]).
        #[error(
            "PTX kernel `{entry}` declares {bytes} bytes of parameters (`{param}` reaches it); \
             a launch passes at most {limit}"
        )]
        ParamsTooLarge {
            /// The entry.
            entry: String,
            /// The parameter at which the total passed the limit.
            param: String,
            /// The total size of the parameters up to and including `param`.
            bytes: u64,
            /// The limit, [`MAX_KERNEL_PARAM_BYTES`].
            limit: u64,
        } => {
            /// PTX parameters larger in all than a kernel launch passes.
            PtxParamsTooLarge = 0x0404
        },
    }
}

/// Every `.entry` in `ptx`, with its parameters.
pub fn entries(ptx: &str) -> Result<Vec<KernelSignature>, PtxError> {
    let mut out = Vec::new();
    let mut rest = ptx;
    while let Some(at) = find_entry(rest) {
        rest = &rest[at + ".entry".len()..];
        let open = rest.find('(');
        let brace = rest.find('{');
        // An entry with no parameter list (`.entry k {`) has no '(' before its body.
        let (name, params_text) = match (open, brace) {
            (Some(o), b) if b.is_none_or(|b| o < b) => {
                let close = rest[o..]
                    .find(')')
                    .map(|c| o + c)
                    .ok_or(PtxError::Malformed {
                        entry: rest[..o].trim().to_string(),
                        text: "(".into(),
                    })?;
                (rest[..o].trim().to_string(), &rest[o + 1..close])
            }
            (_, Some(b)) => (rest[..b].trim().to_string(), ""),
            _ => break,
        };
        let params = params_text
            .split(',')
            .map(strip_comments)
            .filter(|p| !p.trim().is_empty())
            .map(|p| parse_param(&name, p.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        check_total_size(&name, &params)?;
        out.push(KernelSignature { name, params });
    }
    Ok(out)
}

#[cfg(test)]
/// The signature of kernel `name` in `ptx`.
pub fn entry(ptx: &str, name: &str) -> Result<KernelSignature, PtxError> {
    let all = entries(ptx)?;
    let available = all
        .iter()
        .map(|e| e.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    all.into_iter()
        .find(|e| e.name == name)
        .ok_or(PtxError::NoEntry {
            name: name.to_string(),
            available,
        })
}

/// Position of the next `.entry` directive (not inside a `//` comment).
fn find_entry(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(".entry") {
        let at = from + i;
        let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
        let after = text[at + ".entry".len()..].chars().next();
        if !text[line_start..at].contains("//") && after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + ".entry".len();
    }
    None
}

fn strip_comments(p: &str) -> String {
    p.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `.param [.align N] .TYPE [.ptr .space .align M] NAME[ [LEN] ]`
fn parse_param(entry: &str, text: &str) -> Result<PtxParam, PtxError> {
    let bad = || PtxError::Malformed {
        entry: entry.to_string(),
        text: text.to_string(),
    };
    let mut words = text.split_whitespace().peekable();
    if words.next() != Some(".param") {
        return Err(bad());
    }
    let mut align = None;
    let mut ty = None;
    let mut name = None;
    while let Some(w) = words.next() {
        match w {
            ".align" if ty.is_none() => {
                align = Some(words.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?);
            }
            ".align" => {
                // `.ptr .global .align N`: the pointee's alignment, not the parameter's.
                words.next();
            }
            ".ptr" | ".global" | ".const" | ".shared" | ".local" => {}
            w if w.starts_with('.') && ty.is_none() => ty = Some(w.to_string()),
            w => name = Some(w.to_string()),
        }
    }
    let ty = ty.ok_or_else(bad)?;
    let name = name.ok_or_else(bad)?;
    let element = element_size(&ty).ok_or_else(bad)?;
    let (name, count) = match name.split_once('[') {
        Some((n, len)) => {
            let digits = len.trim_end_matches(']');
            // A length past u64 as written (None) is a length whose size overflows.
            let len = match digits.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => None,
                Err(_) => return Err(bad()),
            };
            (n.to_string(), len)
        }
        None => (name, Some(1)),
    };
    // `a[N]` with a huge N: a wrapped size would pass the launch checks; refuse it here, with
    // the numbers, and anything past the launch limit too.
    let size = count
        .and_then(|n| n.checked_mul(element as u64))
        .ok_or_else(|| PtxError::ParamSizeOverflow {
            entry: entry.to_string(),
            param: name.clone(),
            element_size: element as u64,
            count: count.unwrap_or(u64::MAX),
        })?;
    let too_large = || PtxError::ParamsTooLarge {
        entry: entry.to_string(),
        param: name.clone(),
        bytes: size,
        limit: MAX_KERNEL_PARAM_BYTES,
    };
    if size > MAX_KERNEL_PARAM_BYTES {
        return Err(too_large());
    }
    let size = usize::try_from(size).map_err(|_| too_large())?;
    Ok(PtxParam {
        name,
        size,
        align: align.unwrap_or(element),
        ty,
    })
}

/// Refuses a parameter list larger in all (each parameter at its alignment) than a launch
/// passes, naming the parameter that crosses [`MAX_KERNEL_PARAM_BYTES`].
fn check_total_size(entry: &str, params: &[PtxParam]) -> Result<(), PtxError> {
    let mut end: u64 = 0;
    for p in params {
        // Each size is at most the limit (parse_param), so none of this overflows.
        let align = (p.align as u64).max(1);
        end = end.div_ceil(align) * align + p.size as u64;
        if end > MAX_KERNEL_PARAM_BYTES {
            return Err(PtxError::ParamsTooLarge {
                entry: entry.to_string(),
                param: p.name.clone(),
                bytes: end,
                limit: MAX_KERNEL_PARAM_BYTES,
            });
        }
    }
    Ok(())
}

fn element_size(ty: &str) -> Option<usize> {
    Some(match ty {
        ".u8" | ".s8" | ".b8" => 1,
        ".u16" | ".s16" | ".b16" | ".f16" | ".bf16" => 2,
        ".u32" | ".s32" | ".b32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".u64" | ".s64" | ".b64" | ".f64" => 8,
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn one_param(decl: &str) -> String {
        format!(".visible .entry k(\n {decl}\n)\n{{ ret; }}")
    }

    #[test]
    fn array_parameter_whose_size_overflows_is_refused_with_the_numbers() {
        let half = u64::MAX / 2;
        let e = entry(&one_param(&format!(".param .align 8 .b64 a[{half}]")), "k");
        assert_eq!(
            e,
            Err(PtxError::ParamSizeOverflow {
                entry: "k".into(),
                param: "a".into(),
                element_size: 8,
                count: half,
            })
        );
        // Past u64 as written: still the overflow, the count saturated.
        let e = entry(&one_param(".param .b8 a[18446744073709551616]"), "k");
        assert!(
            matches!(
                e,
                Err(PtxError::ParamSizeOverflow {
                    count: u64::MAX,
                    ..
                })
            ),
            "{e:?}"
        );
    }

    #[test]
    fn parameters_past_the_launch_limit_never_reach_the_driver() {
        // 2^64 - 1 bytes fits u64 but no launch: refused here (0.3 passed it to the driver).
        let e = entry(
            &one_param(".param .align 8 .b8 a[18446744073709551615]"),
            "k",
        );
        assert_eq!(
            e,
            Err(PtxError::ParamsTooLarge {
                entry: "k".into(),
                param: "a".into(),
                bytes: u64::MAX,
                limit: MAX_KERNEL_PARAM_BYTES,
            })
        );
        // Two parameters that pass it together: refused at the second.
        let two =
            ".visible .entry k(\n .param .b8 a[30000],\n .param .align 8 .b8 b[4000]\n)\n{ ret; }";
        assert_eq!(
            entry(two, "k"),
            Err(PtxError::ParamsTooLarge {
                entry: "k".into(),
                param: "b".into(),
                bytes: 34_000,
                limit: MAX_KERNEL_PARAM_BYTES,
            })
        );
        // At the limit: accepted; the next valid call works.
        let ok = entry(&one_param(".param .align 4 .b8 a[32764]"), "k").unwrap();
        assert_eq!(ok.params[0].size, 32_764);
    }

    const INLINE: &str = include_str!("../../shaders/ptx/inline.ptx");
    const PARTICLES: &str = include_str!("../../shaders/ptx/particles.ptx");
    const ROUNDTRIP: &str = include_str!("../../shaders/ptx/roundtrip.ptx");

    fn sizes(sig: &KernelSignature) -> Vec<usize> {
        sig.params.iter().map(|p| p.size).collect()
    }

    #[test]
    fn real_ptx_signatures() {
        let stamp = entry(INLINE, "stamp").unwrap();
        assert_eq!(sizes(&stamp), [8, 8, 4]);
        assert!(stamp.params[0].can_hold_pointer() && !stamp.params[2].can_hold_pointer());
        let affine = entry(INLINE, "affine").unwrap();
        assert_eq!(sizes(&affine), [8, 16]);
        assert_eq!(affine.params[1].align, 16);
        assert_eq!(sizes(&entry(INLINE, "hello").unwrap()), [4]);
        let step = entry(PARTICLES, "step").unwrap();
        assert_eq!(sizes(&step), [8, 8, 8, 8, 32]);
        assert_eq!(step.params[4].align, 4);
        let names: Vec<String> = entries(ROUNDTRIP)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            names,
            ["write_pattern", "count_not_equal", "copy16", "fill_u32"]
        );
        assert_eq!(entries(INLINE).unwrap().len(), 7);
    }

    #[test]
    fn missing_kernel_lists_the_real_ones() {
        let e = entry(ROUNDTRIP, "nope").unwrap_err();
        assert!(
            e.to_string().contains("write_pattern, count_not_equal"),
            "{e}"
        );
    }

    #[test]
    fn hand_written_forms() {
        let ptx = "// .entry commented(\n.entry k0 {\n}\n.visible .entry k1(\n\t.param .u64 .ptr .global .align 4 p, // x\n\t.param .f32 s,\n\t.param .align 8 .b8 a[24]\n)\n{\n}";
        let all = entries(ptx).unwrap();
        assert_eq!(all.len(), 2);
        assert!(all[0].params.is_empty());
        assert_eq!(sizes(&all[1]), [8, 4, 24]);
        assert_eq!(all[1].params[0].align, 8);
        assert_eq!(all[1].params[2].align, 8);
        assert!(matches!(
            entries(".entry k(.param .q7 x)"),
            Err(PtxError::Malformed { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn generated_parameter_lists_round_trip(
            tys in proptest::collection::vec(0usize..6, 0..12),
            arrays in proptest::collection::vec(1usize..40, 12),
        ) {
            const TYPES: [(&str, usize); 6] =
                [(".u8", 1), (".u16", 2), (".u32", 4), (".u64", 8), (".f32", 4), (".b8", 1)];
            let params: Vec<String> = tys
                .iter()
                .enumerate()
                .map(|(i, &t)| {
                    if TYPES[t].0 == ".b8" {
                        format!(".param .align 8 .b8 k_param_{i}[{}]", arrays[i])
                    } else {
                        format!(".param {} k_param_{i}", TYPES[t].0)
                    }
                })
                .collect();
            let ptx = format!(".visible .entry k(\n\t{}\n)\n{{\n}}\n", params.join(",\n\t"));
            let sig = entry(&ptx, "k").unwrap();
            proptest::prop_assert_eq!(sig.params.len(), tys.len());
            for (i, (&t, p)) in tys.iter().zip(&sig.params).enumerate() {
                let want = if TYPES[t].0 == ".b8" { arrays[i] } else { TYPES[t].1 };
                proptest::prop_assert_eq!(p.size, want);
            }
        }
    }
}
