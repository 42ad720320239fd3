//! Depth-correct sort-last compositing (issue 38), the arithmetic: each rank draws its share of
//! an opaque scene into one `u64` per pixel — depth in the high 32 bits as an order-preserving
//! unsigned key, colour (RGBA8) in the low 32 — keeping the smallest value per pixel
//! (`atomicMin` on 64-bit integers when drawing); the composite of the ranks is then the
//! per-pixel minimum, one `ncclReduce`/`ncclAllReduce` with `ncclMin` on `ncclUint64`, no
//! custom reduction. Because a minimum is associative and commutative, the composite of any
//! split of the samples among any number of ranks is the minimum over all of them: the N-GPU
//! picture equals the one-GPU picture **bit for bit**, ties included (equal depths resolve to
//! the smaller colour value, on every split). Pure and property-tested here; the renderer and
//! the NCCL call use exactly these functions' bit layouts.

// The compositor (issue 38) lands next; until then only the tests use these.
#![cfg_attr(not(test), allow(dead_code))]

/// A pixel no rank drew: larger than every sample, so the minimum keeps any sample over it.
pub(crate) const EMPTY: u64 = u64::MAX;

/// An order-preserving unsigned key of `depth`: `a < b` ⇔ `depth_key(a) < depth_key(b)` for
/// every non-NaN `a`, `b` (−0.0 and +0.0 get neighbouring keys, −0.0 first). The IEEE-754
/// trick: a positive float's bits order as unsigned integers once the sign bit is set; a
/// negative one's order reversed, so all its bits are flipped.
pub(crate) fn depth_key(depth: f32) -> u32 {
    let bits = depth.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The depth a key stands for (the inverse of [`depth_key`]).
pub(crate) fn key_depth(key: u32) -> f32 {
    let bits = if key & 0x8000_0000 != 0 {
        key & 0x7FFF_FFFF
    } else {
        !key
    };
    f32::from_bits(bits)
}

/// A sample: depth high, RGBA8 colour low.
pub(crate) fn pack(depth: f32, rgba: u32) -> u64 {
    (u64::from(depth_key(depth)) << 32) | u64::from(rgba)
}

/// The depth and colour of a sample; `None` for [`EMPTY`].
pub(crate) fn unpack(sample: u64) -> Option<(f32, u32)> {
    (sample != EMPTY).then(|| (key_depth((sample >> 32) as u32), sample as u32))
}

/// The composite of `ranks`' pictures (equal lengths): the per-pixel minimum, what
/// `ncclMin` on `ncclUint64` computes. The CPU reference the GPU path is tested against.
pub(crate) fn composite(ranks: &[&[u64]]) -> Vec<u64> {
    let len = ranks.first().map_or(0, |r| r.len());
    (0..len)
        .map(|i| ranks.iter().map(|r| r[i]).min().unwrap_or(EMPTY))
        .collect()
}

/// One rank drawing `samples` (pixel, depth, colour) into a picture of `pixels`: per pixel
/// the smallest packed value, as the renderer's 64-bit `atomicMin` keeps it in any order.
pub(crate) fn draw(pixels: usize, samples: &[(usize, f32, u32)]) -> Vec<u64> {
    let mut picture = vec![EMPTY; pixels];
    for &(p, depth, rgba) in samples {
        if let Some(px) = picture.get_mut(p) {
            *px = (*px).min(pack(depth, rgba));
        }
    }
    picture
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keys_order_like_the_depths_and_ties_take_the_smaller_colour() {
        let depths = [
            -1e30f32,
            -2.5,
            -0.0,
            0.0,
            1e-40,
            0.25,
            1.0,
            3.0e38,
            f32::INFINITY,
        ];
        for w in depths.windows(2) {
            assert!(depth_key(w[0]) < depth_key(w[1]), "{} vs {}", w[0], w[1]);
        }
        for d in depths {
            assert_eq!(key_depth(depth_key(d)).to_bits(), d.to_bits());
        }
        assert!(pack(0.5, 0x00FF_0000) < pack(0.5, 0xFF00_0000));
        assert!(pack(0.5, u32::MAX) < pack(0.5000001, 0));
        assert_eq!(unpack(pack(0.75, 0x1234_5678)), Some((0.75, 0x1234_5678)));
        assert_eq!(unpack(EMPTY), None);
        assert!(
            pack(f32::INFINITY, u32::MAX) < EMPTY,
            "any sample beats an empty pixel"
        );
    }

    proptest! {
        /// However the samples are split among ranks (and in whatever order each rank draws
        /// them), the composite equals one rank drawing them all: bit for bit.
        #[test]
        fn any_split_composites_to_the_one_gpu_picture(
            samples in proptest::collection::vec((0usize..64, -1.0e6f32..1.0e6, any::<u32>()), 0..400),
            owners in proptest::collection::vec(0usize..8, 400),
            ranks in 1usize..8,
        ) {
            let one_gpu = draw(64, &samples);
            let mut shares = vec![Vec::new(); ranks];
            for (i, s) in samples.iter().enumerate() {
                shares[owners[i] % ranks].push(*s);
            }
            // Each rank draws its share backwards: the order inside a rank does not matter.
            let pictures: Vec<Vec<u64>> = shares
                .iter()
                .map(|share| {
                    let reversed: Vec<_> = share.iter().rev().copied().collect();
                    draw(64, &reversed)
                })
                .collect();
            let views: Vec<&[u64]> = pictures.iter().map(|p| p.as_slice()).collect();
            prop_assert_eq!(composite(&views), one_gpu);
        }

        /// The nearest sample wins a pixel, its colour with it; equal depths take the
        /// smaller colour.
        #[test]
        fn the_nearest_sample_wins(a in -1.0e6f32..1.0e6, b in -1.0e6f32..1.0e6, ca: u32, cb: u32) {
            let picture = composite(&[&draw(1, &[(0, a, ca)]), &draw(1, &[(0, b, cb)])]);
            let (depth, colour) = unpack(picture[0]).unwrap();
            let (ka, kb) = (depth_key(a), depth_key(b));
            let expect = match ka.cmp(&kb) {
                std::cmp::Ordering::Less => (a, ca),
                std::cmp::Ordering::Greater => (b, cb),
                std::cmp::Ordering::Equal => (a, ca.min(cb)),
            };
            prop_assert_eq!((depth.to_bits(), colour), (expect.0.to_bits(), expect.1));
        }
    }
}
