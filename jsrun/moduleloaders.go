package jsrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"
)

// Two ready-made module loaders: ModuleMap (modules given inline, as the
// HTTP handler's "modules") and DirModules (files under one directory, as
// `shellgate eval FILE.mjs`). Both resolve specifiers alike:
//
//   - "./x.js" and "../x.js" relative to the importing module's directory
//     (the run's own source is at the root), never above the root;
//   - "/x.js" from the root;
//   - anything else (a bare name such as "lodash") as it is, for a
//     ModuleMap only; DirModules refuses bare names.
//
// Names ending in .ts, .mts or .cts are TypeScript. Their errors are
// *UserErrors: the guest sees them.

// resolveSpecifier resolves specifier from importer; bare reports a bare
// name (returned as it is).
func resolveSpecifier(specifier, importer string) (name string, bare bool, err error) {
	switch {
	case specifier == "":
		return "", false, &UserError{Name: "Error", Message: "empty module specifier"}
	case !utf8.ValidString(specifier) || strings.ContainsAny(specifier, "\x00\\"):
		return "", false, &UserError{Name: "Error", Message: fmt.Sprintf("module specifier %q has a NUL, a backslash or invalid UTF-8", specifier)}
	}
	dir := "."
	if importer != EntryModule {
		dir = path.Dir(importer)
	}
	switch {
	case specifier == "." || specifier == ".." || strings.HasPrefix(specifier, "./") || strings.HasPrefix(specifier, "../"):
		name = path.Join(dir, specifier)
	case strings.HasPrefix(specifier, "/"):
		name = path.Clean(specifier)[1:]
		if strings.Contains(specifier, "/../") || strings.HasSuffix(specifier, "/..") {
			name = ".." // refused below, as a relative escape is
		}
	default:
		return specifier, true, nil
	}
	if name == ".." || strings.HasPrefix(name, "../") {
		return "", false, &UserError{Name: "Error", Message: fmt.Sprintf("import of %q from %q leaves the module root", specifier, importer)}
	}
	if name == "." || name == "" {
		return "", false, &UserError{Name: "Error", Message: fmt.Sprintf("module specifier %q names a directory", specifier)}
	}
	return name, false, nil
}

func languageOf(name string) Language {
	switch path.Ext(name) {
	case ".ts", ".mts", ".cts":
		return LanguageTypeScript
	}
	return LanguageJavaScript
}

// ModuleMap is a ModuleLoader over modules given by name. Keys are names
// as a root-level import would write them ("util.js", "./util.js" and
// "/util.js" are one module; "lib/x.js" is in directory lib) or bare names.
type ModuleMap struct {
	mods map[string]string
}

// NewModuleMap checks the names of modules and returns their loader.
func NewModuleMap(modules map[string]string) (*ModuleMap, error) {
	m := &ModuleMap{mods: make(map[string]string, len(modules))}
	for k, src := range modules {
		spec := k
		if !strings.HasPrefix(k, "./") && !strings.HasPrefix(k, "/") && !strings.HasPrefix(k, "../") && strings.Contains(k, "/") {
			spec = "./" + k // a path, not a bare name
		}
		name, _, err := resolveSpecifier(spec, EntryModule)
		if err != nil {
			return nil, fmt.Errorf("module %q: %v", k, err)
		}
		if msg := badModuleName(name); msg != "" {
			return nil, fmt.Errorf("module %q: %s", k, msg)
		}
		if _, dup := m.mods[name]; dup {
			return nil, fmt.Errorf("module %q is given twice (as %q)", name, k)
		}
		m.mods[name] = src
	}
	return m, nil
}

// Normalize implements ModuleLoader.
func (m *ModuleMap) Normalize(_ context.Context, specifier, importer string) (string, error) {
	name, _, err := resolveSpecifier(specifier, importer)
	return name, err
}

// Load implements ModuleLoader.
func (m *ModuleMap) Load(_ context.Context, name string) (Module, error) {
	src, ok := m.mods[name]
	if !ok {
		return Module{}, &UserError{Name: "Error", Message: fmt.Sprintf("module %q not found", name)}
	}
	return Module{Source: src, Language: languageOf(name)}, nil
}

// DirModules is a ModuleLoader over the files under one directory: a
// module cannot import anything outside it (".." past the root is refused,
// and the files are opened through os.Root, so symbolic links cannot lead
// out either). Only regular files load.
type DirModules struct {
	Root string
}

// moduleLimitKey carries the per-module byte limit to the loaders here, so
// that DirModules reads no more of a file than the run could take.
type moduleLimitKey struct{}

// Normalize implements ModuleLoader.
func (d DirModules) Normalize(_ context.Context, specifier, importer string) (string, error) {
	name, bare, err := resolveSpecifier(specifier, importer)
	if err != nil {
		return "", err
	}
	if bare {
		return "", &UserError{Name: "Error", Message: fmt.Sprintf("bare module specifier %q: import files with ./, ../ or /", specifier)}
	}
	return name, nil
}

// Load implements ModuleLoader.
func (d DirModules) Load(ctx context.Context, name string) (Module, error) {
	root, err := os.OpenRoot(d.Root)
	if err != nil {
		return Module{}, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Module{}, &UserError{Name: "Error", Message: fmt.Sprintf("module %q not found", name)}
		}
		return Module{}, &UserError{Name: "Error", Message: fmt.Sprintf("module %q cannot be opened: %v", name, errors.Unwrap(err))}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Module{}, err
	}
	if !st.Mode().IsRegular() {
		return Module{}, &UserError{Name: "Error", Message: fmt.Sprintf("module %q is not a regular file", name)}
	}
	limit, _ := ctx.Value(moduleLimitKey{}).(int)
	if limit <= 0 {
		limit = DefaultLimits.SourceBytes
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return Module{}, err
	}
	return Module{Source: string(b), Language: languageOf(name)}, nil
}
