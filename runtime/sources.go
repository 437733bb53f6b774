package runtime

import (
	"sort"
)

// PluginSource is one loaded plugin version as the runtime compiled it:
// its definition file and .lua sources, byte for byte. Loading the same
// sources (Options.Sources) gives the same version.
type PluginSource struct {
	// Dir is the plugin folder as the runtime was given it; plugin_dir
	// and the sandbox's grants still point there.
	Dir string `json:"dir"`
	// DefFile is the definition file's path and Definition its content.
	DefFile    string `json:"defFile"`
	Definition []byte `json:"definition"`
	// Files maps a slash-separated path inside Dir ("lib/x.lua") to the
	// source compiled.
	Files map[string][]byte `json:"files"`
}

// Sources returns the plugin versions serving now (including a previous
// version kept because its new one is broken), in folder order.
func (rt *Runtime) Sources() []PluginSource {
	seen := map[*plugin]bool{}
	out := []PluginSource{} // empty, not nil: no plugins is still a set of sources
	for _, pt := range rt.snap.Load().types {
		p := pt.plugin
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, PluginSource{Dir: p.display, DefFile: p.defFile, Definition: p.defData, Files: p.sources})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Dir != out[j].Dir {
			return out[i].Dir < out[j].Dir
		}
		return out[i].DefFile < out[j].DefFile
	})
	return out
}

// scanSources compiles plugin versions from their sources, like
// scanPlugins does from the folders.
func scanSources(srcs []PluginSource) (plugins []*plugin, errs []*LoadError, broken map[string]bool) {
	broken = make(map[string]bool)
	for _, s := range srcs {
		def, err := parseDefinition(s.Definition)
		if err != nil || def == nil {
			msg := "not a plugin definition"
			if err != nil {
				msg = err.Error()
			}
			errs = append(errs, &LoadError{Plugin: s.Dir, File: s.DefFile, Line: lineOf(msg), Message: msg})
			continue
		}
		p, perrs := compileFiles(s.Dir, s.DefFile, s.Definition, def, s.Files, false, nil)
		errs = append(errs, perrs...)
		if p != nil {
			plugins = append(plugins, p)
			continue
		}
		for name := range def.Types {
			broken[name] = true
		}
	}
	return plugins, errs, broken
}
