//! The TypeScript declarations of what the JS API returns, derived from the Rust types that
//! serialize it (ts-rs, the core's `typescript` feature): `src/outputs.d.ts` must be what
//! this writes. `UPDATE_EXPECT=1 cargo test -p stageplan-js --test typescript` rewrites it.
//! Inputs (scenarios, options), which accept more than their Rust types say (quantities as
//! text), stay hand-written in `src/stageplan.d.ts`.

use stageplan::model::{LayerSummary, ModelSummary, TypeBytes};
use stageplan::plan::*;
use stageplan::planner::replan::{Move, Replan};
use stageplan::presets::{Catalog, DevicePreset, ModelEntry, RamPreset};
use stageplan::view::users::{Tick, UsersChart, UsersView};
use stageplan::view::{Band, BaselineRow, MemoryBar, Note, PlanView, Segment, StageRow};
use ts_rs::{Config, TS};

fn declarations() -> String {
    // JSON carries every integer as a JavaScript number (sizes over 2^53 as the nearest one).
    let cfg = Config::new().with_large_int("number");
    let decls = [
        Plan::decl(&cfg),
        PlannedModel::decl(&cfg),
        PlannedWorkload::decl(&cfg),
        Stage::decl(&cfg),
        StageOffload::decl(&cfg),
        stageplan::plan::MachineGpu::decl(&cfg),
        MemoryBreakdown::decl(&cfg),
        TimeBreakdown::decl(&cfg),
        Bound::decl(&cfg),
        LeftOut::decl(&cfg),
        Search::decl(&cfg),
        Baseline::decl(&cfg),
        BaselineStage::decl(&cfg),
        Diagnostic::decl(&cfg),
        Level::decl(&cfg),
        Change::decl(&cfg),
        Accuracy::decl(&cfg),
        PipelineFull::decl(&cfg),
        AtDepth::decl(&cfg),
        PlannedRider::decl(&cfg),
        RiderKind::decl(&cfg),
        stageplan::Policy::decl(&cfg),
        stageplan::Objective::decl(&cfg),
        stageplan::engine::Engine::decl(&cfg),
        stageplan::device::DeviceKind::decl(&cfg),
        stageplan::device::Backend::decl(&cfg),
        stageplan::TensorType::decl(&cfg),
        PlanView::decl(&cfg),
        UsersView::decl(&cfg),
        UsersChart::decl(&cfg),
        Tick::decl(&cfg),
        StageRow::decl(&cfg),
        Band::decl(&cfg),
        MemoryBar::decl(&cfg),
        Segment::decl(&cfg),
        BaselineRow::decl(&cfg),
        Note::decl(&cfg),
        ModelSummary::decl(&cfg),
        LayerSummary::decl(&cfg),
        TypeBytes::decl(&cfg),
        Catalog::decl(&cfg),
        ModelEntry::decl(&cfg),
        DevicePreset::decl(&cfg),
        RamPreset::decl(&cfg),
        stageplan::presets::GpuLinkPreset::decl(&cfg),
        Replan::decl(&cfg),
        Move::decl(&cfg),
        stageplan::serving::Answer::decl(&cfg),
        stageplan::serving::Served::decl(&cfg),
        stageplan::serving::Scheduler::decl(&cfg),
        stageplan::serving::TargetsHeld::decl(&cfg),
        stageplan::serving::Found::decl(&cfg),
        stageplan::serving::Replicas::decl(&cfg),
        stageplan::serving::Replica::decl(&cfg),
        stageplan::serving::Limit::decl(&cfg),
        stageplan::serving::Missed::decl(&cfg),
        stageplan::serving::Percentile::decl(&cfg),
    ];
    let mut out = String::from(
        "\n// ---- what the API returns: generated from the Rust types by crates/stageplan-js/tests/typescript.rs ----\n",
    );
    for decl in decls {
        out.push('\n');
        out.push_str("export ");
        out.push_str(&decl);
        out.push('\n');
    }
    out
}

#[test]
fn the_output_declarations_are_generated_from_the_rust_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/outputs.d.ts");
    let generated = declarations();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let current = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        current == generated,
        "src/outputs.d.ts is out of date: run `UPDATE_EXPECT=1 cargo test -p stageplan-js --test typescript`"
    );
}
