//! The plugin starts with Bevy, adopts Bevy's Vulkan device and reports why CUDA is
//! unavailable (in both worlds), and refuses a wrong setup with a reason.

use bevy::prelude::*;
use bevy::render::RenderApp;
use bevy_cuvk::{CuvkDevice, CuvkPlugin, CuvkStatus};

use crate::app::{
    assert_silent, headless_app, record_wgpu_messages, serial, start, update_until, vulkan_present,
    Order,
};

/// Runs until the main world's status is known; returns (main, render) statuses.
/// Fails on any validation message, app drop included.
fn statuses(cuvk: CuvkPlugin, order: Order) -> (CuvkStatus, Option<CuvkStatus>, bool) {
    record_wgpu_messages();
    let mut app = headless_app(cuvk, order);
    start(&mut app);
    assert_eq!(
        app.world().get_resource::<CuvkStatus>(),
        Some(&CuvkStatus::Pending),
        "the main world's status exists from the start"
    );
    let updates = update_until(&mut app, 20, |app| {
        app.world()
            .get_resource::<CuvkStatus>()
            .is_some_and(|s| *s != CuvkStatus::Pending)
    });
    // As CuvkStatus's docs say: decided at the first extraction (the end of the first update),
    // so the main world's systems see it from the second update on.
    assert_eq!(
        updates, 1,
        "the main world's status is known after its first update"
    );
    let main = app.world().resource::<CuvkStatus>().clone();
    let render = app
        .get_sub_app(RenderApp)
        .and_then(|r| r.world().get_resource::<CuvkStatus>().cloned());
    let device = app.world().get_resource::<CuvkDevice>().is_some();
    eprintln!("main world: {main}\nrender world: {render:?}\ndevice resource: {device}");
    // A few more frames, then the app goes (render world, cuvk's context, Bevy's device).
    for _ in 0..3 {
        app.update();
    }
    drop(app);
    assert_silent("plugin start, frames and drop");
    (main, render, device)
}

#[test]
fn plugin_reports_why_cuda_is_unavailable_and_bevy_keeps_running() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    let (main, render, device) = statuses(CuvkPlugin::default(), Order::Before);
    assert_eq!(render.as_ref(), Some(&main), "both worlds say the same");
    if bevy_cuvk::cuvk::cuda::driver_present() {
        // The GPU machine: CUDA pairs with Bevy's device.
        assert!(main.is_ready(), "{main}");
        assert!(device, "CuvkDevice is published with Ready");
        return;
    }
    assert_ne!(
        std::env::var("REQUIRE_GPU").as_deref(),
        Ok("1"),
        "REQUIRE_GPU=1 but no CUDA driver: {main}"
    );
    let reason = main.reason().unwrap_or_default();
    assert!(
        reason.contains("CUDA driver library not found"),
        "the reason names the missing driver: {main}"
    );
    assert!(!device, "no CuvkDevice without CUDA");
}

#[test]
fn bevy_device_passes_cuvk_checks_with_cuda_turned_off() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    // `Disabled` is decided after Bevy's device was adopted (external memory, timeline
    // semaphores, every function cuvk calls): reaching it proves the device can share.
    let cuvk = CuvkPlugin {
        use_cuda: false,
        ..default()
    };
    let (main, _, device) = statuses(cuvk, Order::Before);
    assert!(
        main.reason()
            .is_some_and(|r| r.contains("CUDA turned off in CuvkPlugin's settings")),
        "{main}"
    );
    assert!(!device);
}

#[test]
fn plugin_added_after_render_plugin_says_so() {
    if !vulkan_present() {
        return;
    }
    let _serial = serial();
    let (main, _, _) = statuses(CuvkPlugin::default(), Order::After);
    assert!(
        main.reason()
            .is_some_and(|r| r.contains("added after RenderPlugin") && r.contains("add_before")),
        "{main}"
    );
}
