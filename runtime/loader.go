package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// maxSourceSize caps a Lua file: parsing pathological sources (1e5 nested
// parentheses) is slow, and no plugin needs a megabyte of code in one file.
const maxSourceSize = 1 << 20

// LoadError is a problem found while loading a plugin: invalid JSON, a
// missing classname, a Lua syntax error, a duplicate type. It names the
// file (and line when known) so an author can go straight to it.
type LoadError struct {
	// Plugin is the plugin's name, or its folder when the name is unknown.
	Plugin string `json:"plugin"`
	// Type is the plugin type concerned, when the problem is specific to one.
	Type string `json:"type,omitempty"`
	// File is the file at fault, as a path under the plugins directory.
	File string `json:"file"`
	// Line is the 1-based line, or 0 when unknown.
	Line int `json:"line,omitempty"`
	// Message says what is wrong and what to do.
	Message string `json:"message"`
	// Warning marks problems that do not stop the plugin from serving,
	// such as a hook the entry table does not define.
	Warning bool `json:"warning,omitempty"`
	// Coopr marks what a Coopr server would refuse when loomd registers
	// the type (CooprProblems). loomd still serves the type from its own
	// queue, so these are warnings; loomd plugins check counts them as
	// errors.
	Coopr bool `json:"coopr,omitempty"`
	// Hook names the hook a missing-hook warning is about.
	Hook string `json:"hook,omitempty"`
}

// Location is "file:line", or the file alone when the line is unknown.
func (e *LoadError) Location() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return e.File
}

func (e *LoadError) Error() string {
	loc := e.Location()
	who := e.Plugin
	if e.Type != "" && e.Type != e.Plugin {
		who = fmt.Sprintf("%s (type %s)", e.Plugin, e.Type)
	}
	return fmt.Sprintf("%s: plugin %s: %s", loc, who, e.Message)
}

// plugin is one plugin folder and definition, compiled.
type plugin struct {
	dir     string // absolute folder
	display string // folder as shown to users (under the plugins dir as given)
	defFile string // definition file, as shown to users
	def     *Definition
	version string
	// protos maps a slash-separated path inside the folder ("lib/x.lua")
	// to its compiled chunk. Compiled once, shared by every VM.
	protos map[string]*lua.FunctionProto
	// defData and sources are the definition and .lua files exactly as
	// compiled (sources by slash path), for Sources.
	defData []byte
	sources map[string][]byte
	// top lists the top-level .lua files in name order: what runs at
	// provision time when the definition names no main file.
	top []string
}

// scanPlugins finds plugin definitions under dir, in both layouts Coopr
// scanned: <dir>/<plugin>/<x>.json and <dir>/<group>/<plugin>/<x>.json.
// A folder is a plugin folder when it holds a JSON file declaring types.
//
// broken lists the types declared by definitions whose code failed to
// compile, so a reload keeps their previous version serving.
func scanPlugins(dir string) (plugins []*plugin, errs []*LoadError, broken map[string]bool) {
	broken = make(map[string]bool)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []*LoadError{{Plugin: "-", File: dir, Message: fmt.Sprintf("reading the plugins directory: %v (set --plugins or LOOM_PLUGINS)", err)}}, broken
	}
	for _, e := range entries {
		if !isDir(dir, e) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		ps, es, found := loadFolder(dir, sub, broken)
		plugins, errs = append(plugins, ps...), append(errs, es...)
		if found {
			continue
		}
		// A group folder: look one level deeper.
		inner, err := os.ReadDir(sub)
		if err != nil {
			errs = append(errs, &LoadError{Plugin: e.Name(), File: sub, Message: err.Error()})
			continue
		}
		for _, ie := range inner {
			if !isDir(sub, ie) || strings.HasPrefix(ie.Name(), ".") {
				continue
			}
			ps, es, _ := loadFolder(dir, filepath.Join(sub, ie.Name()), broken)
			plugins, errs = append(plugins, ps...), append(errs, es...)
		}
	}
	return plugins, errs, broken
}

// scanFolders loads exactly the given plugin folders. A folder that
// holds no definition is an error.
func scanFolders(dirs []string) (plugins []*plugin, errs []*LoadError, broken map[string]bool) {
	broken = make(map[string]bool)
	for _, d := range dirs {
		ps, es, found := loadFolder(filepath.Dir(d), d, broken)
		plugins, errs = append(plugins, ps...), append(errs, es...)
		if !found {
			errs = append(errs, &LoadError{Plugin: filepath.Base(d), File: d,
				Message: "no plugin definition here: a plugin folder holds a JSON file declaring types under one of " + kindKeys()})
		}
	}
	return plugins, errs, broken
}

// IsPluginFolder reports whether dir is a plugin folder rather than a
// folder of them: it holds a JSON file with a kind's key (providertypes,
// automatortypes...), or one too broken to tell, which loading it then
// reports.
func IsPluginFolder(dir string) bool {
	jsons, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	for _, j := range jsons {
		data, err := os.ReadFile(j)
		if err != nil {
			continue
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(data, &top) != nil {
			return true
		}
		for _, k := range kindTable {
			if _, ok := top[k.Key]; ok {
				return true
			}
		}
	}
	return false
}

// IsTestFile reports whether a file in a plugin folder is a Lua test
// (name_test.lua): loomd test runs it; the loader never compiles or
// runs it as plugin code, and it does not change the plugin's version.
func IsTestFile(name string) bool {
	return strings.HasSuffix(filepath.Base(name), "_test.lua")
}

func isDir(parent string, e fs.DirEntry) bool {
	if e.IsDir() {
		return true
	}
	if e.Type()&fs.ModeSymlink != 0 {
		st, err := os.Stat(filepath.Join(parent, e.Name()))
		return err == nil && st.IsDir()
	}
	return false
}

// loadFolder loads every definition in one folder. found reports whether
// the folder held a definition (or a broken JSON file that may be one).
func loadFolder(root, dir string, broken map[string]bool) (plugins []*plugin, errs []*LoadError, found bool) {
	jsons, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(jsons)
	for _, jf := range jsons {
		data, err := os.ReadFile(jf)
		if err != nil {
			errs = append(errs, &LoadError{Plugin: filepath.Base(dir), File: jf, Message: err.Error()})
			found = true
			continue
		}
		def, err := parseDefinition(data)
		if err != nil {
			errs = append(errs, &LoadError{Plugin: filepath.Base(dir), File: jf, Line: lineOf(err.Error()), Message: err.Error()})
			found = true
			continue
		}
		if def == nil {
			continue // some other JSON file
		}
		found = true
		for _, name := range append(append([]string(nil), def.ProviderTypes...), def.AutomatorTypes...) {
			for _, msg := range CooprProblems(name, def.Types[name].Raw) {
				errs = append(errs, &LoadError{Plugin: def.Name, Type: name, File: jf, Warning: true, Coopr: true,
					Message: "a Coopr server would refuse this type: " + msg})
			}
		}
		p, perrs := compilePlugin(dir, jf, data, def)
		errs = append(errs, perrs...)
		if p != nil {
			plugins = append(plugins, p)
		} else {
			for name := range def.Types {
				broken[name] = true
				// Name the type in the errors, so a task for it can say
				// why it is not served.
				for _, e := range perrs {
					if e.Type == "" && len(def.Types) == 1 {
						e.Type = name
					}
				}
			}
		}
	}
	return plugins, errs, found
}

// lineOf extracts "line N" from a describeJSONError message.
func lineOf(msg string) int {
	var n int
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i:], "line %d", &n)
	}
	return n
}

// compilePlugin reads, hashes and compiles every .lua file of the folder,
// recursively, so syntax errors in required modules surface at load time.
func compilePlugin(dir, defFile string, defData []byte, def *Definition) (*plugin, []*LoadError) {
	files, unreadTop, errs := readPluginFiles(dir, def)
	return compileFiles(dir, defFile, defData, def, files, unreadTop, errs)
}

// readPluginFiles reads the .lua sources of a plugin folder, keyed by
// their slash-separated path inside it. unreadTop reports a top-level
// .lua file that could not be read (its error is in errs).
func readPluginFiles(dir string, def *Definition) (files map[string][]byte, unreadTop bool, errs []*LoadError) {
	var names []string
	// A plugin folder may itself be a symlink (operators link folders into
	// the plugins dir); walk what it points to, but name files under dir.
	walkRoot := dir
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		walkRoot = r
	}
	walkErr := filepath.WalkDir(walkRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != walkRoot && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".lua") && !IsTestFile(d.Name()) {
			rel, _ := filepath.Rel(walkRoot, path)
			names = append(names, rel)
		}
		return nil
	})
	if walkErr != nil {
		errs = append(errs, &LoadError{Plugin: def.Name, File: dir, Message: fmt.Sprintf("reading the plugin folder: %v", walkErr)})
	}
	// Sources are read through an os.Root, so a symlink cannot pull in a
	// file from outside the plugin folder.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, false, append(errs, &LoadError{Plugin: def.Name, File: dir, Message: fmt.Sprintf("opening the plugin folder: %v", err)})
	}
	defer root.Close()
	files = make(map[string][]byte, len(names))
	for _, rel := range names {
		src, err := readSource(root, rel)
		if err != nil {
			unreadTop = unreadTop || !strings.ContainsRune(rel, filepath.Separator)
			errs = append(errs, &LoadError{Plugin: def.Name, File: filepath.Join(dir, rel), Message: err.Error()})
			continue
		}
		files[filepath.ToSlash(rel)] = src
	}
	return files, unreadTop, errs
}

// compileFiles hashes and compiles a plugin's sources (slash path inside
// dir -> source); unreadTop and errs are what reading them met.
func compileFiles(dir, defFile string, defData []byte, def *Definition, files map[string][]byte, unreadTop bool, errs []*LoadError) (*plugin, []*LoadError) {
	p := &plugin{dir: dir, display: dir, defFile: defFile, def: def, defData: defData, sources: files,
		protos: make(map[string]*lua.FunctionProto)}
	if abs, err := filepath.Abs(dir); err == nil {
		p.dir = abs
	}
	h := sha256.New()
	h.Write(defData)
	rels := make([]string, 0, len(files))
	for rel := range files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	hasTop := unreadTop
	for _, rel := range rels {
		src := files[rel]
		f := filepath.Join(dir, filepath.FromSlash(rel))
		if !strings.Contains(rel, "/") {
			hasTop = true
		}
		h.Write([]byte(rel))
		h.Write(src)
		proto, lerr := compileChunk(src, f)
		if lerr != nil {
			lerr.Plugin = def.Name
			errs = append(errs, lerr)
			continue
		}
		p.protos[rel] = proto
		if !strings.Contains(rel, "/") {
			p.top = append(p.top, rel)
		}
	}
	p.version = hex.EncodeToString(h.Sum(nil))[:12]
	for name, td := range def.Types {
		if m := td.main(def); m != "" {
			if _, ok := p.protos[filepath.ToSlash(filepath.Clean(m))]; !ok {
				errs = append(errs, &LoadError{Plugin: def.Name, Type: name, File: defFile,
					Message: fmt.Sprintf("main file %q not found (or not compiled) in %s", m, dir)})
			}
		}
	}
	if !hasTop && def.Main == "" {
		errs = append(errs, &LoadError{Plugin: def.Name, File: defFile, Warning: true,
			Message: fmt.Sprintf("no .lua file next to the definition in %s", dir)})
	}
	// Any compile error makes the version unusable: serving half a
	// plugin would fail in confusing ways at run time.
	for _, e := range errs {
		if !e.Warning {
			return nil, errs
		}
	}
	return p, errs
}

func readSource(root *os.Root, rel string) ([]byte, error) {
	st, err := root.Stat(rel)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w (symlinks must stay inside the plugin folder)", rel, err)
	}
	if st.Size() > maxSourceSize {
		return nil, fmt.Errorf("source is %d bytes; the limit is %d: split it into modules", st.Size(), maxSourceSize)
	}
	return root.ReadFile(rel)
}

// CompileChunk parses and compiles Lua source as the loader does, with
// its errors: a syntax error at a line, or at the end of a file that
// leaves a block open (not line -1). loomd test compiles test files with
// it.
func CompileChunk(src []byte, name string) (*lua.FunctionProto, *LoadError) {
	return compileChunk(src, name)
}

// compileChunk parses and compiles Lua source. name is the chunk name Lua
// shows in errors and tracebacks (the file's path as the user gave it).
func compileChunk(src []byte, name string) (*lua.FunctionProto, *LoadError) {
	chunk, err := parse.Parse(bytes.NewReader(src), name)
	if err != nil {
		le := &LoadError{File: name, Message: "syntax error: " + strings.TrimSpace(err.Error())}
		var pe *parse.Error
		if errors.As(err, &pe) {
			le.Line = pe.Pos.Line
			if pe.Pos.Line == parse.EOF {
				le.Line = bytes.Count(src, []byte("\n")) + 1
				le.Message = "unexpected end of file: an unclosed function, if, do, table or string?"
			} else if pe.Token == "" {
				le.Message = "syntax error: " + strings.TrimSpace(pe.Message)
			} else {
				le.Message = fmt.Sprintf("syntax error near '%s': %s", pe.Token, strings.TrimSpace(pe.Message))
			}
		}
		return nil, le
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		le := &LoadError{File: name, Message: "compile error: " + err.Error()}
		var ce *lua.CompileError
		if errors.As(err, &ce) {
			le.Line = ce.Line
			le.Message = "compile error: " + ce.Message
		}
		return nil, le
	}
	return proto, nil
}
