//! The opaque, depth-composited particle mode's sphere pass (issue 38; shaders/
//! particles_spheres.comp) on any Vulkan device with 64-bit buffer atomics (lavapipe has
//! them): the galaxies drawn as lit spheres packed depth-over-colour with `atomicMin`; the
//! per-pixel minimum of two halves' pictures (what `ncclMin` computes across ranks) equals the
//! picture of all the particles, bit for bit; the nearer of two spheres at one pixel wins.

use std::sync::Arc;

use cuvk::vulkan::{AsVkBuffer, VulkanContext};
use cuvk_dev::sim::particles::{initial_state, OrbitCamera};
use cuvk_dev::{CommandSlots, ComputePipeline, PrivateAllocator, PrivateBuffer};

use crate::repo;

const W: u32 = 480;
const H: u32 = 300;

// The shaders' push constants, as the canvas records them: one statement of their layout.
use cuvk_dev::canvas::{SpherePush, SphereResolvePush as ResolvePush};

/// Draws particles `range` of `positions` into a fresh sample buffer; its u64 samples.
fn draw(
    vk: &Arc<VulkanContext>,
    alloc: &Arc<PrivateAllocator>,
    positions: &PrivateBuffer,
    range: std::ops::Range<u32>,
    to_png: Option<&std::path::Path>,
) -> anyhow::Result<Vec<u64>> {
    let storage = cuvk::ash::vk::BufferUsageFlags::STORAGE_BUFFER
        | cuvk::ash::vk::BufferUsageFlags::TRANSFER_SRC
        | cuvk::ash::vk::BufferUsageFlags::TRANSFER_DST;
    let n = u64::from(W * H);
    let mut samples = PrivateBuffer::gpu_only(alloc, "samples", n * 8, storage)?;
    vk.fill_buffer(&mut samples, 0, n * 8, u32::MAX)?;
    let pixels = PrivateBuffer::gpu_only(alloc, "pixels", n * 4, storage)?;
    let spv = std::fs::read(repo::file("shaders/particles_spheres.spv"))?;
    let spheres = ComputePipeline::new(vk, &spv, 2, size_of::<SpherePush>() as u32, 1)?;
    let set = spheres.descriptor_set(&[positions as &dyn AsVkBuffer, &samples])?;
    let spv = std::fs::read(repo::file("shaders/particles_spheres_resolve.spv"))?;
    let resolve = ComputePipeline::new(vk, &spv, 2, size_of::<ResolvePush>() as u32, 1)?;
    let resolve_set = resolve.descriptor_set(&[&samples as &dyn AsVkBuffer, &pixels])?;
    let camera = OrbitCamera::default();
    let push = SpherePush {
        view_proj: camera.view_proj(W as f32 / H as f32),
        count: range.end,
        width: W,
        height: H,
        radius: 0.12,
        first: range.start,
        focal: H as f32 / (2.0 * camera.tan_half_fov()),
        depth_scale: cuvk_dev::sim::particles::depth_scale(),
    };
    let mut cmds = CommandSlots::new(vk, 1)?;
    let d = vk.device();
    // SAFETY: the command buffer is fresh; every buffer outlives the submission (waited for
    // below through the slot's fence).
    unsafe {
        let cmd = cmds.begin(0)?;
        spheres.record_dispatch(cmd, set, bytemuck::bytes_of(&push), 64);
        cuvk_dev::demo::full_barrier(d, cmd, cuvk::ash::vk::AccessFlags::SHADER_WRITE);
        let rp = ResolvePush {
            width: W,
            height: H,
            bgra: 0,
            clear: 0,
        };
        resolve.record_dispatch(
            cmd,
            resolve_set,
            bytemuck::bytes_of(&rp),
            (W * H).div_ceil(256),
        );
        cuvk_dev::demo::full_barrier(d, cmd, cuvk::ash::vk::AccessFlags::SHADER_WRITE);
        d.end_command_buffer(cmd)?;
        vk.submit_with_semaphores(&[cmd], &[], &[], cmds.fence(0))?;
    }
    cmds.wait_fenced()?;
    // SAFETY: the one submission completed (its fence, waited above).
    unsafe { cmds.assume_idle() };
    let mut back = PrivateBuffer::readback(alloc, "samples back", n * 8)?;
    vk.copy_buffer(&samples, 0, &mut back, 0, n * 8)?;
    if let Some(path) = to_png {
        let mut rgba = PrivateBuffer::readback(alloc, "pixels back", n * 4)?;
        vk.copy_buffer(&pixels, 0, &mut rgba, 0, n * 4)?;
        cuvk_dev::demo::write_png(path, W, H, &rgba.read::<u8>()?)?;
    }
    Ok(back.read::<u64>()?)
}

#[test]
fn two_halves_composite_to_the_whole_picture_bit_for_bit() {
    let _shared = cuvk_dev::testing::shared();
    let Some(vk) = cuvk_dev::testing::vulkan("spheres") else {
        return;
    };
    if !vk.info().capabilities.int64_atomics {
        eprintln!(
            "SKIP spheres: no 64-bit buffer atomics on {}",
            vk.info().name
        );
        return;
    }
    let alloc = PrivateAllocator::new(&vk).unwrap();
    let count = 6_000u32;
    let (pos, _) = initial_state(count as usize, 7);
    let storage = cuvk::ash::vk::BufferUsageFlags::STORAGE_BUFFER
        | cuvk::ash::vk::BufferUsageFlags::TRANSFER_DST;
    let mut positions =
        PrivateBuffer::gpu_only(&alloc, "positions", u64::from(count) * 16, storage).unwrap();
    let mut up = PrivateBuffer::upload(&alloc, "upload", u64::from(count) * 16).unwrap();
    up.write(&pos).unwrap();
    vk.copy_buffer(&up, 0, &mut positions, 0, u64::from(count) * 16)
        .unwrap();
    let png = std::env::temp_dir().join("cuvk-spheres.png");
    let whole = draw(&vk, &alloc, &positions, 0..count, Some(&png)).unwrap();
    let a = draw(&vk, &alloc, &positions, 0..count / 3, None).unwrap();
    let b = draw(&vk, &alloc, &positions, count / 3..count, None).unwrap();
    let composite: Vec<u64> = a.iter().zip(&b).map(|(x, y)| *x.min(y)).collect();
    let drawn = whole.iter().filter(|&&s| s != u64::MAX).count();
    eprintln!(
        "spheres: {drawn} of {} pixels drawn; picture in {}",
        W * H,
        png.display()
    );
    assert!(
        drawn > 1000,
        "the spheres cover too little of the picture: {drawn} pixels"
    );
    let differ = composite.iter().zip(&whole).filter(|(x, y)| x != y).count();
    assert_eq!(
        differ, 0,
        "the composite of the halves differs from the whole picture"
    );
    // The comparison can fail: one half alone is not the picture.
    let missing = a.iter().zip(&whole).filter(|(x, y)| x != y).count();
    assert!(
        missing > 100,
        "one third alone matched the whole picture: {missing} pixels differ"
    );
    cuvk_dev::testing::assert_clean(&vk);
}

/// Two spheres seen overlapping, the back one 1.5 units behind with its centre on the front
/// one's rim: the front one's colour wins there (its rim is nearer than the back one's
/// centre), and the back one's where only it is drawn. A depth pulled towards the eye by too
/// much (the first cut pulled it about 100 times too far) lets the back centre win the rim.
#[test]
fn the_nearer_surface_wins_where_spheres_overlap() {
    let _shared = cuvk_dev::testing::shared();
    let Some(vk) = cuvk_dev::testing::vulkan("spheres_overlap") else {
        return;
    };
    if !vk.info().capabilities.int64_atomics {
        eprintln!(
            "SKIP spheres_overlap: no 64-bit buffer atomics on {}",
            vk.info().name
        );
        return;
    }
    let alloc = PrivateAllocator::new(&vk).unwrap();
    let [right, _, forward] = OrbitCamera::default().axes();
    let at = |base: [f32; 3], ahead: f32, side: f32, key: f32| {
        let p: Vec<f32> = (0..3)
            .map(|i| base[i] + ahead * forward[i] + side * right[i])
            .collect();
        [p[0], p[1], p[2], key]
    };
    // Front: magenta (key 0), at the origin; back: blue (key 100), 1.5 units further, its
    // centre 0.11 to the side (the front sphere's radius is 0.12).
    let pos = [at([0.0; 3], 0.0, 0.0, 0.0), at([0.0; 3], 1.5, 0.11, 100.0)];
    let storage = cuvk::ash::vk::BufferUsageFlags::STORAGE_BUFFER
        | cuvk::ash::vk::BufferUsageFlags::TRANSFER_DST;
    let mut positions = PrivateBuffer::gpu_only(&alloc, "positions", 32, storage).unwrap();
    let mut up = PrivateBuffer::upload(&alloc, "upload", 32).unwrap();
    up.write(&pos).unwrap();
    vk.copy_buffer(&up, 0, &mut positions, 0, 32).unwrap();
    let both = draw(&vk, &alloc, &positions, 0..2, None).unwrap();
    let back = draw(&vk, &alloc, &positions, 1..2, None).unwrap();
    let front = draw(&vk, &alloc, &positions, 0..1, None).unwrap();
    let colour = |s: u64| s as u32 & 0x00FF_FFFF;
    // Where both drew, the front one's sample and colour; elsewhere each alone.
    let mut overlap = 0;
    for i in 0..both.len() {
        match (front[i] != u64::MAX, back[i] != u64::MAX) {
            (true, true) => {
                overlap += 1;
                assert_eq!(
                    both[i], front[i],
                    "pixel {i}: the back sphere won over the front"
                );
                assert!(front[i] < back[i]);
            }
            (true, false) => assert_eq!(both[i], front[i]),
            (false, true) => assert_eq!(colour(both[i]), colour(back[i])),
            (false, false) => assert_eq!(both[i], u64::MAX),
        }
    }
    assert!(
        overlap > 0,
        "the spheres do not overlap: the test shows nothing"
    );
    cuvk_dev::testing::assert_clean(&vk);
}
