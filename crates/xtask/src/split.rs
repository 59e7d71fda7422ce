//! A module in two parts: what its first plans run, and the rest (issue #45 item 7: the
//! page's first plan within 300 KB, the two-widget page's within 150 KB). `parts.rs` runs it
//! on the widget's module and the page's as they are built.
//!
//! The split is guided by a profile, not by hand: [`instrument`] marks each function as it
//! runs, `split/first_plans.mjs` runs the example page's first plans on that module in Node,
//! and [`split`] keeps what ran in the first part. Every other function's body moves to the
//! rest; in the first part it becomes a trampoline through an empty table (`split`), so a
//! call that reaches it before the rest is loaded traps, and the rest, once instantiated,
//! fills the table (its one element segment) and the same call runs through. The widget's
//! glue (`split/rest.js`, `firstOrRest`) turns that trap into "load the rest and run the
//! call again": the planner's calls are pure functions of their input, so a call abandoned
//! at the trap can run again. What one abandons — its heap blocks and stack — is lost once;
//! the stack pointer is put back; and the functions that keep state across calls (the
//! allocator's, the table of JS values') are never split, so a trap cannot stop them
//! half-way (see [`kept_first`]). The page is not pure (a Leptos app mid-update cannot run
//! a call again), so its glue (`split/page.js`) answers no input until the rest is loaded,
//! asks for it once the first plan is drawn, and starts over with both parts if anything
//! traps before.
//!
//! Binaryen's `wasm-split` does the same, but no pinned build of it is on the registries
//! (Debian's 108 exports the wrong table of a module with two); walrus is wasm-bindgen's own
//! reader and writer, already in the tool chain.

use std::collections::BTreeSet;

use walrus::ir::{Const, GlobalSet, Value};
use walrus::{
    ConstExpr, ElementItems, ElementKind, ExportItem, FunctionBuilder, FunctionId, FunctionKind, GlobalKind,
    ImportedFunction, LocalFunction, Module, RefType, ValType,
};

/// The namespace the rest imports the first part's functions, globals, tables and memory from.
const FIRST: &str = "first";

/// The first part's table of the rest's functions, empty until the rest is instantiated.
const TABLE: &str = "split";

/// The export that marks function `index` as run, in an [`instrument`]ed module.
pub(crate) const RAN: &str = "__ran";

/// The stack pointer's export in the first part: `firstOrRest` puts it back after a trap.
const STACK_POINTER: &str = "__stack_pointer";

/// A module split in two: [`split`]'s result.
pub(crate) struct Parts {
    pub(crate) first: Vec<u8>,
    pub(crate) rest: Vec<u8>,
    /// How many of the module's own functions went to the rest, of how many.
    pub(crate) moved: usize,
    pub(crate) functions: usize,
}

/// The module with a global per own function, set to 1 when the function is entered and
/// exported as `__ran{index}` (`index` in the module's function index space).
pub(crate) fn instrument(wasm: &[u8]) -> Result<Vec<u8>, String> {
    let mut module = read(wasm)?;
    for (index, id) in own_functions(&module) {
        let ran = module.globals.add_local(ValType::I32, true, false, ConstExpr::Value(Value::I32(0)));
        module.exports.add(&format!("{RAN}{index}"), ran);
        let function = module.funcs.get_mut(id).kind.unwrap_local_mut();
        let entry = function.entry_block();
        let mut body = function.builder_mut().instr_seq(entry);
        body.instr_at(0, GlobalSet { global: ran });
        body.instr_at(0, Const { value: Value::I32(1) });
    }
    Ok(module.emit_wasm())
}

/// Splits `wasm` (with its name section: [`kept_first`] reads it) into the functions `ran`
/// names — plus those kept first — and the rest.
pub(crate) fn split(wasm: &[u8], ran: &BTreeSet<usize>) -> Result<Parts, String> {
    let first_module = read(wasm)?;
    let moved: Vec<usize> = own_functions(&first_module)
        .into_iter()
        .filter(|&(index, id)| !ran.contains(&index) && !kept_first(first_module.funcs.get(id).name.as_deref()))
        .map(|(index, _)| index)
        .collect();
    let functions = own_functions(&first_module).len();
    let (rest, needed) = rest(read(wasm)?, &moved)?;
    let first = first(first_module, &moved, &needed)?;
    Ok(Parts { first, rest, moved: moved.len(), functions })
}

/// Functions that stay in the first part whether a first plan ran them or not: the
/// allocator's (a trap inside `dlmalloc` would leave its free lists half-linked for every
/// later call), wasm-bindgen's table of JS values (`__externref_table_alloc`, its growth
/// inlined, and `_dealloc`), and any without a name to judge by. Everything else holds no
/// state across calls.
fn kept_first(name: Option<&str>) -> bool {
    name.is_none_or(|name| name.contains("dlmalloc") || name.starts_with("__externref_table_"))
}

fn read(wasm: &[u8]) -> Result<Module, String> {
    Module::from_buffer(wasm).map_err(|e| format!("reading the widget's wasm: {e}"))
}

/// The module's own (not imported) functions, with their index in its function index space.
fn own_functions(module: &Module) -> Vec<(usize, FunctionId)> {
    module
        .funcs
        .iter()
        .enumerate()
        .filter(|(_, f)| matches!(f.kind, FunctionKind::Local(_)))
        .map(|(index, f)| (index, f.id()))
        .collect()
}

fn function_name(index: usize) -> String {
    format!("f{index}")
}

/// A global's name between the parts: the stack pointer by its own name, the others by index.
fn global_name(module: &Module, index: usize, id: walrus::GlobalId) -> String {
    match module.globals.get(id).name.as_deref() {
        Some("__stack_pointer") => STACK_POINTER.to_owned(),
        _ => format!("g{index}"),
    }
}

/// The rest: the moved functions, everything else imported from the first part, and one
/// element segment that puts the moved functions into the first part's [`TABLE`] in
/// `moved`'s order. Returns it with the names it imports, which the first part exports.
fn rest(mut module: Module, moved: &[usize]) -> Result<(Vec<u8>, BTreeSet<String>), String> {
    let moved_set: BTreeSet<usize> = moved.iter().copied().collect();
    let functions: Vec<FunctionId> = module.funcs.iter().map(walrus::Function::id).collect();
    for (index, &id) in functions.iter().enumerate() {
        if moved_set.contains(&index) {
            continue;
        }
        let ty = module.funcs.get(id).ty();
        if let FunctionKind::Import(imported) = &module.funcs.get(id).kind {
            let import = module.imports.get_mut(imported.import);
            import.module = FIRST.to_owned();
            import.name = function_name(index);
        } else {
            let import = module.imports.add(FIRST, &function_name(index), id);
            module.funcs.get_mut(id).kind = FunctionKind::Import(ImportedFunction { import, ty });
        }
    }
    let globals: Vec<walrus::GlobalId> = module.globals.iter().map(walrus::Global::id).collect();
    for (index, id) in globals.into_iter().enumerate() {
        let name = global_name(&module, index, id);
        if let GlobalKind::Import(import) = module.globals.get(id).kind {
            let import = module.imports.get_mut(import);
            (import.module, import.name) = (FIRST.to_owned(), name);
        } else {
            let import = module.imports.add(FIRST, &name, id);
            module.globals.get_mut(id).kind = GlobalKind::Import(import);
        }
    }
    let tables: Vec<walrus::TableId> = module.tables.iter().map(walrus::Table::id).collect();
    for (index, id) in tables.into_iter().enumerate() {
        let name = format!("t{index}");
        if let Some(import) = module.tables.get(id).import {
            let import = module.imports.get_mut(import);
            (import.module, import.name) = (FIRST.to_owned(), name);
        } else {
            let import = module.imports.add(FIRST, &name, id);
            let table = module.tables.get_mut(id);
            table.import = Some(import);
            table.elem_segments.clear();
        }
    }
    let memories: Vec<walrus::MemoryId> = module.memories.iter().map(walrus::Memory::id).collect();
    for id in memories {
        let import = module.imports.add(FIRST, "memory", id);
        let memory = module.memories.get_mut(id);
        memory.import = Some(import);
        memory.data_segments.clear();
    }
    // The first part initialises memory and tables and owns the exports and the start.
    for id in module.data.iter().map(walrus::Data::id).collect::<Vec<_>>() {
        module.data.delete(id);
    }
    for id in module.elements.iter().map(walrus::Element::id).collect::<Vec<_>>() {
        module.elements.delete(id);
    }
    for id in module.exports.iter().map(walrus::Export::id).collect::<Vec<_>>() {
        module.exports.delete(id);
    }
    module.start = None;
    for id in module.customs.iter().map(|(id, _)| id).collect::<Vec<_>>() {
        module.customs.delete(id);
    }
    let size = u64::try_from(moved.len()).map_err(|e| e.to_string())?;
    let table = module.tables.add_local(false, size, Some(size), RefType::FUNCREF);
    let import = module.imports.add(FIRST, TABLE, table);
    module.tables.get_mut(table).import = Some(import);
    let items = moved.iter().map(|&index| functions[index]).collect();
    let offset = ConstExpr::Value(Value::I32(0));
    let segment = module.elements.add(ElementKind::Active { table, offset }, ElementItems::Functions(items));
    module.tables.get_mut(table).elem_segments.insert(segment);
    walrus::passes::gc::run(&mut module);
    let needed = module.imports.iter().map(|import| import.name.clone()).collect();
    Ok((module.emit_wasm(), needed))
}

/// The first part: each moved function's body replaced by a call through [`TABLE`] at its
/// slot, and every name the rest imports exported.
fn first(mut module: Module, moved: &[usize], needed: &BTreeSet<String>) -> Result<Vec<u8>, String> {
    let size = u64::try_from(moved.len()).map_err(|e| e.to_string())?;
    let table = module.tables.add_local(false, size, Some(size), RefType::FUNCREF);
    module.exports.add(TABLE, table);
    let functions: Vec<FunctionId> = module.funcs.iter().map(walrus::Function::id).collect();
    for (slot, &index) in moved.iter().enumerate() {
        let id = functions[index];
        let ty = module.funcs.get(id).ty();
        let (params, results) = {
            let ty = module.types.get(ty);
            (ty.params().to_vec(), ty.results().to_vec())
        };
        let mut builder = FunctionBuilder::new(&mut module.types, &params, &results);
        let args: Vec<walrus::LocalId> = params.iter().map(|&param| module.locals.add(param)).collect();
        let mut body = builder.func_body();
        for &arg in &args {
            body.local_get(arg);
        }
        body.i32_const(i32::try_from(slot).map_err(|e| e.to_string())?).call_indirect(ty, table);
        let trampoline: LocalFunction = builder.local_func(args);
        module.funcs.get_mut(id).kind = FunctionKind::Local(trampoline);
    }
    let mut exported = BTreeSet::new();
    for (index, &id) in functions.iter().enumerate() {
        export(&mut module, needed, &mut exported, function_name(index), ExportItem::Function(id));
    }
    let globals: Vec<walrus::GlobalId> = module.globals.iter().map(walrus::Global::id).collect();
    for (index, id) in globals.into_iter().enumerate() {
        let name = global_name(&module, index, id);
        export(&mut module, needed, &mut exported, name, ExportItem::Global(id));
    }
    let tables: Vec<walrus::TableId> = module.tables.iter().map(walrus::Table::id).collect();
    for (index, id) in tables.into_iter().enumerate().filter(|&(_, id)| id != table) {
        export(&mut module, needed, &mut exported, format!("t{index}"), ExportItem::Table(id));
    }
    if !module.exports.iter().any(|e| e.name == "memory" && matches!(e.item, ExportItem::Memory(_))) {
        return Err("the widget's wasm exports no `memory` for the rest to import".into());
    }
    if !exported.contains(STACK_POINTER) {
        return Err("the widget's wasm has no `__stack_pointer` global the rest uses: was it built with names?".into());
    }
    walrus::passes::gc::run(&mut module);
    Ok(module.emit_wasm())
}

/// Exports `item` as `name` where the rest imports it; the memory is exported already.
fn export(
    module: &mut Module,
    needed: &BTreeSet<String>,
    exported: &mut BTreeSet<String>,
    name: String,
    item: ExportItem,
) {
    if needed.contains(&name) && !exported.contains(&name) {
        module.exports.add(&name, item);
        exported.insert(name);
    }
}
