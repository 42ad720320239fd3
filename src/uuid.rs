//! Device UUIDs, as Vulkan (`deviceUUID`) and CUDA (`cuDeviceGetUuid`) report them.

use std::fmt;

/// A 16-byte device UUID. Vulkan's `deviceUUID` and CUDA's `cuDeviceGetUuid` agree for the
/// same NVIDIA GPU (measured), which is how the bridge pairs the two APIs' devices.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// Builds a UUID from CUDA's signed-char representation.
    pub fn from_cuda(bytes: [std::ffi::c_char; 16]) -> Self {
        Uuid(bytes.map(|b| b as u8))
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_vulkaninfo() {
        let u = Uuid([
            0x6d, 0x65, 0x73, 0x61, 0x32, 0x32, 0x2e, 0x33, 0x2e, 0x36, 0, 0, 0, 0, 0, 0,
        ]);
        assert_eq!(u.to_string(), "6d657361-3232-2e33-2e36-000000000000");
    }

    #[test]
    fn from_cuda_keeps_bytes() {
        let raw: [std::ffi::c_char; 16] = [-1i8 as _; 16];
        assert_eq!(Uuid::from_cuda(raw).0, [0xff; 16]);
    }
}
