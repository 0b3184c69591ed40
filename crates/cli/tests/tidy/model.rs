//! One crate's modules as `syn` parses them: the module tree (from `mod` declarations, in files
//! or inline), and for each module the names it defines and imports and every path its code names,
//! with a resolver that says which module of the crate (or which outside path) a path lands in.
//! The other checks are questions asked of this model.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module's place in its crate: its names from the crate root (empty for the root itself).
pub type ModPath = Vec<String>;

/// A path as written in the code, one entry per segment; a leading `::` is an empty first segment.
pub type Written = Vec<String>;

/// How deep the resolver follows imports and globs into one another before giving up (a chain of
/// re-exports in a real crate is two or three long; the bound stops a `use` that names itself).
const MAX_RESOLVE_DEPTH: u8 = 12;

/// One module of a crate.
pub struct Module {
    pub path: ModPath,
    /// The file it is written in, relative to the crate's `src/`.
    pub file: String,
    /// Written inline (`mod x { .. }`) rather than in a file of its own.
    pub inline: bool,
    /// Declared under `#[cfg(test)]`, itself or an ancestor: test code, outside every check of
    /// production code.
    pub test_only: bool,
    /// Has a doc: `//!` at the top of its file, or (inline) a `///` or `//!` of its own.
    pub documented: bool,
    /// Modules it declares.
    children: BTreeSet<String>,
    /// Items it defines (types, functions, constants, traits, macros).
    items: BTreeSet<String>,
    /// Names brought in by `use`, each with the path it names, written relative to this module.
    imports: BTreeMap<String, Written>,
    /// Paths of `use ..::*`, written relative to this module.
    globs: Vec<Written>,
    /// Every path named outside `#[cfg(test)]` items and child modules: `use` trees (each leaf),
    /// expressions, types, patterns, and `a::b` sequences in macros' tokens.
    pub paths: Vec<Written>,
}

impl Module {
    /// The module's name as people write it: `build::machine`, `crate` for the root.
    pub fn name(&self) -> String {
        display(&self.path)
    }
}

/// `build::machine`, or `crate` for the root.
pub fn display(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// Where a path lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// In this module of the crate: the module itself (`item` none) or an item it holds or
    /// re-exports under that name.
    Local {
        module: ModPath,
        item: Option<String>,
    },
    /// Outside the crate (`std::fs::read`, another crate), or a name the crate does not define
    /// (a local variable, a generic), with its segments as resolved.
    External(Vec<String>),
}

/// The modules of one crate, by path.
pub struct Crate {
    pub modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    /// Reads the crate whose sources are in `src` (its root `lib.rs`, else `main.rs`).
    pub fn load(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        read_sources(src, src, &mut files);
        let root = if files.contains_key("lib.rs") {
            "lib.rs"
        } else {
            "main.rs"
        };
        Crate::parse(&files, root)
    }

    /// The crate of these files (paths relative to `src/`, with `/`), from the root file `root`.
    pub fn parse(files: &BTreeMap<String, String>, root: &str) -> Crate {
        let mut loader = Loader {
            files,
            modules: BTreeMap::new(),
        };
        loader.load_file(Vec::new(), root, true, false);
        Crate {
            modules: loader.modules,
        }
    }

    /// The module at `path`, if the crate has it.
    pub fn module(&self, path: &[String]) -> Option<&Module> {
        self.modules.get(path)
    }

    /// Where `written`, named in module `here`, lands.
    pub fn resolve(&self, here: &[String], written: &[String]) -> Option<Target> {
        self.resolve_within(here, written, 0)
    }

    fn resolve_within(&self, here: &[String], written: &[String], depth: u8) -> Option<Target> {
        if depth > MAX_RESOLVE_DEPTH {
            return None;
        }
        let (first, rest) = written.split_first()?;
        match first.as_str() {
            "crate" => self.walk(&[], rest, depth),
            "self" => self.walk(here, rest, depth),
            "super" => {
                let mut base = here.to_vec();
                let mut rest = written;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
                self.walk(&base, rest, depth)
            }
            "" => Some(Target::External(rest.to_vec())),
            name if self.in_scope(here, name, depth) => self.walk(here, written, depth),
            _ => Some(Target::External(written.to_vec())),
        }
    }

    /// Whether `name` means something in module `here`: a child, an item, an import, or a name
    /// one of its globs brings in.
    fn in_scope(&self, here: &[String], name: &str, depth: u8) -> bool {
        let Some(module) = self.module(here) else {
            return false;
        };
        module.children.contains(name)
            || module.items.contains(name)
            || module.imports.contains_key(name)
            || self.glob_source(module, name, depth).is_some()
    }

    /// The module one of `module`'s globs brings `name` in from.
    fn glob_source(&self, module: &Module, name: &str, depth: u8) -> Option<ModPath> {
        module.globs.iter().find_map(|glob| {
            match self.resolve_within(&module.path, glob, depth + 1)? {
                Target::Local {
                    module: from,
                    item: None,
                } if self.in_scope(&from, name, depth + 1) => Some(from),
                _ => None,
            }
        })
    }

    /// Follows `segments` down from module `at`: into child modules, through imports and globs
    /// (so a re-export leads to where the item is defined), until an item or the end.
    fn walk(&self, at: &[String], segments: &[String], depth: u8) -> Option<Target> {
        let Some((first, rest)) = segments.split_first() else {
            return Some(Target::Local {
                module: at.to_vec(),
                item: None,
            });
        };
        let module = self.module(at)?;
        if module.children.contains(first) {
            let mut child = at.to_vec();
            child.push(first.clone());
            return self.walk(&child, rest, depth);
        }
        let here = Target::Local {
            module: at.to_vec(),
            item: Some(first.clone()),
        };
        if module.items.contains(first) {
            return Some(here);
        }
        if let Some(imported) = module.imports.get(first) {
            let full: Written = imported.iter().chain(rest).cloned().collect();
            return self.resolve_within(at, &full, depth + 1);
        }
        if let Some(from) = self.glob_source(module, first, depth) {
            return self.walk(&from, segments, depth + 1);
        }
        Some(here)
    }
}

/// Reads every `.rs` file under `dir` into `files`, keyed by its path relative to `src`.
fn read_sources(src: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            read_sources(src, &path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let relative = path
                .strip_prefix(src)
                .expect("a file found under src is under src");
            let key = relative
                .iter()
                .map(|part| part.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            files.insert(key, text);
        }
    }
}

/// Builds the module tree, file by file.
struct Loader<'a> {
    files: &'a BTreeMap<String, String>,
    modules: BTreeMap<ModPath, Module>,
}

impl Loader<'_> {
    /// Loads the module `path` written in `file`. A file "owns its folder" (its child modules'
    /// files are beside it) when it is a crate root, a `mod.rs`, or was named by `#[path]`;
    /// otherwise they are in the folder of its name (`a.rs` → `a/`).
    fn load_file(&mut self, path: ModPath, file: &str, owns_folder: bool, test_only: bool) {
        let text = self
            .files
            .get(file)
            .unwrap_or_else(|| panic!("{file}: no such file for module {}", display(&path)));
        let syntax = syn::parse_file(text).unwrap_or_else(|e| panic!("{file}: {e}"));
        let folder = if owns_folder {
            parent(file).to_string()
        } else {
            join(
                parent(file),
                file.trim_end_matches(".rs")
                    .rsplit('/')
                    .next()
                    .unwrap_or(""),
            )
        };
        let module = Module {
            path,
            file: file.to_string(),
            inline: false,
            test_only,
            documented: has_doc(&syntax.attrs),
            children: BTreeSet::new(),
            items: BTreeSet::new(),
            imports: BTreeMap::new(),
            globs: Vec::new(),
            paths: Vec::new(),
        };
        self.load_items(module, &folder, &syntax.items);
    }

    /// Records `module`'s items and paths, then loads its child modules; `folder` is where the
    /// files of its children are (for an inline module: its file's folder plus its name).
    fn load_items(&mut self, mut module: Module, folder: &str, items: &[syn::Item]) {
        let mut named = PathCollector::default();
        for item in items {
            if let Some(name) = item_name(item) {
                module.items.insert(name);
            }
            if !matches!(item, syn::Item::Mod(_)) {
                named.visit_item(item);
            }
        }
        for leaf in named.uses {
            if leaf.glob {
                module.globs.push(leaf.path.clone());
            } else if let Some(name) = &leaf.name {
                module.imports.insert(name.clone(), leaf.path.clone());
            }
            module.paths.push(leaf.path);
        }
        module.paths.extend(named.paths);
        let children: Vec<&syn::ItemMod> = items
            .iter()
            .filter_map(|item| match item {
                syn::Item::Mod(m) => Some(m),
                _ => None,
            })
            .collect();
        for child in &children {
            module.children.insert(child.ident.to_string());
        }
        let (path, file, test_only, inline) = (
            module.path.clone(),
            module.file.clone(),
            module.test_only,
            module.inline,
        );
        self.modules.insert(path.clone(), module);
        for child in children {
            self.load_child(&path, &file, folder, inline, test_only, child);
        }
    }

    fn load_child(
        &mut self,
        parent_path: &[String],
        file: &str,
        folder: &str,
        parent_inline: bool,
        parent_test_only: bool,
        declared: &syn::ItemMod,
    ) {
        let name = declared.ident.to_string();
        let mut path = parent_path.to_vec();
        path.push(name.clone());
        let test_only = parent_test_only || requires_test(&declared.attrs);
        match &declared.content {
            Some((_, items)) => {
                let module = Module {
                    path,
                    file: file.to_string(),
                    inline: true,
                    test_only,
                    // syn keeps a module's inner attributes (`//!`) with its outer ones (`///`).
                    documented: has_doc(&declared.attrs),
                    children: BTreeSet::new(),
                    items: BTreeSet::new(),
                    imports: BTreeMap::new(),
                    globs: Vec::new(),
                    paths: Vec::new(),
                };
                self.load_items(module, &join(folder, &name), items);
            }
            None => {
                if let Some(written) = path_attribute(&declared.attrs) {
                    // `#[path]` is relative to the declaring file's folder, or, inside an inline
                    // module, to the folder that inline module's children would have.
                    let base = if parent_inline { folder } else { parent(file) };
                    let child_file = normalize(&join(base, &written));
                    self.load_file(path, &child_file, true, test_only);
                } else {
                    let beside = join(folder, &format!("{name}.rs"));
                    let nested = join(folder, &format!("{name}/mod.rs"));
                    if self.files.contains_key(&nested) && !self.files.contains_key(&beside) {
                        self.load_file(path, &nested, true, test_only);
                    } else {
                        self.load_file(path, &beside, false, test_only);
                    }
                }
            }
        }
    }
}

/// The name an item defines in its module's namespace, if any.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// One leaf of a `use` tree.
struct UseLeaf {
    path: Written,
    /// The name it binds (none for `_` and globs).
    name: Option<String>,
    glob: bool,
}

/// Gathers the paths a module's own code names, leaving out `#[cfg(test)]` items (test code) and
/// attributes (which name lints, derives and docs, not modules).
#[derive(Default)]
struct PathCollector {
    uses: Vec<UseLeaf>,
    paths: Vec<Written>,
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if requires_test(item_attrs(item)) {
            return;
        }
        match item {
            syn::Item::Use(u) => flatten_use(&u.tree, &mut Vec::new(), &mut self.uses),
            // A module nested in a function body is rare; its paths count as its parent's.
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    for item in items {
                        self.visit_item(item);
                    }
                }
            }
            _ => syn::visit::visit_item(self, item),
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            syn::ImplItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !requires_test(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_trait_item(&mut self, item: &'ast syn::TraitItem) {
        let attrs = match item {
            syn::TraitItem::Const(i) => &i.attrs,
            syn::TraitItem::Fn(i) => &i.attrs,
            syn::TraitItem::Type(i) => &i.attrs,
            syn::TraitItem::Macro(i) => &i.attrs,
            _ => return syn::visit::visit_trait_item(self, item),
        };
        if !requires_test(attrs) {
            syn::visit::visit_trait_item(self, item);
        }
    }

    fn visit_field(&mut self, field: &'ast syn::Field) {
        if !requires_test(&field.attrs) {
            syn::visit::visit_field(self, field);
        }
    }

    fn visit_variant(&mut self, variant: &'ast syn::Variant) {
        if !requires_test(&variant.attrs) {
            syn::visit::visit_variant(self, variant);
        }
    }

    fn visit_arm(&mut self, arm: &'ast syn::Arm) {
        if !requires_test(&arm.attrs) {
            syn::visit::visit_arm(self, arm);
        }
    }

    fn visit_local(&mut self, local: &'ast syn::Local) {
        if !requires_test(&local.attrs) {
            syn::visit::visit_local(self, local);
        }
    }

    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}

    /// `pub(crate)`, `pub(super)`: who may see an item, not a module it uses.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut written: Written = Vec::new();
        if path.leading_colon.is_some() {
            written.push(String::new());
        }
        written.extend(path.segments.iter().map(|s| s.ident.to_string()));
        self.paths.push(written);
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.paths.extend(paths_in_tokens(mac.tokens.clone()));
    }
}

/// The paths of two or more segments (`a::b`, `::a::b`, `$crate::a`) in a macro's tokens, which
/// syn leaves unparsed. A single name is left out: in a macro it is as likely a local variable.
fn paths_in_tokens(tokens: TokenStream) -> Vec<Written> {
    let mut found = Vec::new();
    let mut current: Written = Vec::new();
    // Set after `::`: the next name continues the path.
    let mut joined = false;
    let mut colons = 0;
    let finish = |current: &mut Written, found: &mut Vec<Written>| {
        if current.iter().filter(|s| !s.is_empty()).count() >= 2 {
            found.push(current.clone());
        }
        current.clear();
    };
    for tree in tokens {
        match tree {
            TokenTree::Ident(ident) => {
                if !joined {
                    finish(&mut current, &mut found);
                }
                current.push(ident.to_string());
                joined = false;
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' => {
                colons += 1;
                if colons == 2 {
                    if current.is_empty() {
                        current.push(String::new());
                    }
                    joined = true;
                    colons = 0;
                }
            }
            TokenTree::Group(group) => {
                finish(&mut current, &mut found);
                found.extend(paths_in_tokens(group.stream()));
                joined = false;
                colons = 0;
            }
            _ => {
                finish(&mut current, &mut found);
                joined = false;
                colons = 0;
            }
        }
    }
    finish(&mut current, &mut found);
    found
}

/// Every leaf of a `use` tree, with the path before it in `prefix`.
fn flatten_use(tree: &syn::UseTree, prefix: &mut Written, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => out.push(use_leaf(prefix, &n.ident, None)),
        syn::UseTree::Rename(r) => out.push(use_leaf(prefix, &r.ident, Some(&r.rename))),
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            path: prefix.clone(),
            name: None,
            glob: true,
        }),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

/// `use a::b`, `use a::{self}` (binds `a`), `use a::b as c`, `use a::b as _`.
fn use_leaf(prefix: &Written, ident: &syn::Ident, rename: Option<&syn::Ident>) -> UseLeaf {
    let mut path = prefix.clone();
    if ident != "self" {
        path.push(ident.to_string());
    }
    let bound = rename.unwrap_or(ident).to_string();
    let name = match bound.as_str() {
        "_" => None,
        "self" => path.last().cloned(),
        _ => Some(bound),
    };
    UseLeaf {
        path,
        name,
        glob: false,
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::ExternCrate(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::ForeignMod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::TraitAlias(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Union(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Whether these attributes hold a doc (`///`, `//!`, `#[doc = ..]`).
pub fn has_doc(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("doc"))
}

/// Whether a `#[cfg(..)]` among these attributes is true only in tests: `cfg(test)`, or an
/// `all(..)` with `test` in it. (`cfg(any(test, feature = ".."))` is production code too.)
pub fn requires_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg"))
        .filter_map(|a| a.parse_args::<syn::Meta>().ok())
        .any(|meta| predicate_requires_test(&meta))
}

fn predicate_requires_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(list) if list.path.is_ident("all") => list
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|all| all.iter().any(predicate_requires_test)),
        _ => false,
    }
}

/// The value of a `#[path = ".."]` attribute.
fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// The folder of a `/`-separated relative file path (`""` at the top).
fn parent(file: &str) -> &str {
    file.rsplit_once('/').map_or("", |(folder, _)| folder)
}

fn join(folder: &str, name: &str) -> String {
    if folder.is_empty() {
        name.to_string()
    } else {
        format!("{folder}/{name}")
    }
}

/// `a/./b/../c.rs` → `a/c.rs`.
fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

/// A crate from `(file, text)` pairs, its root `lib.rs`: the unit tests' fixtures.
#[cfg(test)]
pub fn fixture(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<String, String> = files
        .iter()
        .map(|(f, t)| (f.to_string(), t.to_string()))
        .collect();
    Crate::parse(&files, "lib.rs")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(module: &[&str], item: Option<&str>) -> Option<Target> {
        Some(Target::Local {
            module: module.iter().map(|s| s.to_string()).collect(),
            item: item.map(str::to_string),
        })
    }

    fn written(path: &str) -> Written {
        path.split("::").map(str::to_string).collect()
    }

    #[test]
    fn modules_are_found_in_every_layout() {
        let krate = fixture(&[
            (
                "lib.rs",
                "mod a; mod b; #[path = \"elsewhere.rs\"] mod c; mod d { mod e; }",
            ),
            ("a.rs", "mod inner;"),
            ("a/inner.rs", ""),
            ("b/mod.rs", "mod x;"),
            ("b/x.rs", ""),
            ("elsewhere.rs", "mod y;"),
            ("y.rs", ""),
            ("d/e.rs", ""),
        ]);
        let files: Vec<(String, &str)> = krate
            .modules
            .values()
            .map(|m| (m.name(), m.file.as_str()))
            .collect();
        assert_eq!(
            files,
            [
                ("crate".to_string(), "lib.rs"),
                ("a".to_string(), "a.rs"),
                ("a::inner".to_string(), "a/inner.rs"),
                ("b".to_string(), "b/mod.rs"),
                ("b::x".to_string(), "b/x.rs"),
                ("c".to_string(), "elsewhere.rs"),
                ("c::y".to_string(), "y.rs"),
                ("d".to_string(), "lib.rs"),
                ("d::e".to_string(), "d/e.rs"),
            ]
        );
    }

    #[test]
    fn paths_resolve_through_imports_re_exports_and_globs() {
        let krate = fixture(&[
            ("lib.rs", "mod a; mod b; pub use b::Thing; fn top() {}"),
            (
                "a.rs",
                "use crate::b; use super::b::{self as bee}; use crate::b::*;",
            ),
            ("b.rs", "pub struct Thing; pub mod deep { pub fn f() {} }"),
        ]);
        let a = ["a".to_string()];
        for (path, expected) in [
            ("crate::Thing", local(&["b"], Some("Thing"))),
            ("b::deep::f", local(&["b", "deep"], Some("f"))),
            ("bee::Thing", local(&["b"], Some("Thing"))),
            ("deep::f", local(&["b", "deep"], Some("f"))),
            ("super::top", local(&[], Some("top"))),
            (
                "std::fs::read",
                Some(Target::External(written("std::fs::read"))),
            ),
        ] {
            assert_eq!(krate.resolve(&a, &written(path)), expected, "{path}");
        }
    }

    #[test]
    fn test_code_names_no_path() {
        let krate = fixture(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "#[cfg(test)] use crate::b::X; #[cfg(all(unix, test))] fn t() { crate::b::f() }
                 #[cfg(test)] mod tests { fn u() { crate::b::f() } }
                 fn live() { format!(\"{}\", crate::b::Y) }",
            ),
            ("b.rs", ""),
        ]);
        let a = krate.module(&["a".to_string()]).expect("a is a module");
        assert!(a.paths.contains(&written("crate::b::Y")));
        assert!(!a.paths.iter().any(|p| p.contains(&"X".to_string())));
        assert!(!a.paths.contains(&written("crate::b::f")));
        assert!(
            krate
                .module(&["a".to_string(), "tests".to_string()])
                .expect("tests is a module")
                .test_only
        );
    }
}
