package cli

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

//go:embed newtmpl
var newTemplates embed.FS

// pluginName is what loomd new accepts: a Coopr type name that is also a
// good folder and file name.
var pluginName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// newData fills the templates.
type newData struct {
	Name   string // type, folder and file name: "hcloud"
	Class  string // entry table: "HcloudProvider"
	Title  string // "Hcloud"
	Family string // "provider" or "automator"
	Dir    string // the new folder, as given
	Parent string // the folder holding it (the --plugins dir)
}

func (a *App) newNewCmd(g *globalOptions) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "new provider|automator NAME",
		Short: "Create a plugin folder: definition, entry table with every hook, a passing test, editor stubs, README",
		Long: `Create DIR/NAME (DIR defaults to the current folder) holding a new plugin:

  NAME.json        the definition: type NAME, parameters, permissions, timeouts
  NAME.lua         the entry table with every hook of the family, commented
  NAME_test.lua    tests that pass under loomd test (a provider's against an HTTP fake)
  .luarc.json      lua-language-server settings that work anywhere (no Loom checkout)
  .luals/loom/     the LuaLS stubs it points at: loom, the loom.* bindings, the test API
  README.md        a stub to fill in

Then: loomd test DIR/NAME.`,
		Example: `  loomd new provider hcloud
  loomd new automator nginx --dir plugins`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runNew(g, args[0], args[1], dir)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "folder to create the plugin folder in (your --plugins folder)")
	return cmd
}

func (a *App) runNew(g *globalOptions, family, name, dir string) error {
	if family != "provider" && family != "automator" {
		return usageErr(fmt.Errorf("loomd new %s: the first argument is the plugin family, provider or automator", family))
	}
	if !pluginName.MatchString(name) {
		return usageErr(fmt.Errorf("loomd new %s %q: a plugin name is lower-case letters, digits, - and _, starting with a letter (it names the type, the folder and the files)", family, name))
	}
	folder := filepath.Join(dir, name)
	if _, err := os.Stat(folder); err == nil {
		return usageErr(fmt.Errorf("loomd new: %s already exists; choose another name or --dir", folder))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("loomd new: %w", err)
	}
	d := newData{Name: name, Title: title(name), Family: family, Dir: folder, Parent: dir}
	d.Class = strings.ReplaceAll(d.Title, " ", "") + title(family)
	files := map[string][]byte{}
	tdir := "newtmpl/" + family
	entries, err := newTemplates.ReadDir(tdir)
	if err != nil {
		return err
	}
	render := func(src, dst string) error {
		text, err := newTemplates.ReadFile(src)
		if err != nil {
			return err
		}
		t, err := template.New(src).Delims("{{", "}}").Parse(string(text))
		if err != nil {
			return fmt.Errorf("template %s: %w", src, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return fmt.Errorf("template %s: %w", src, err)
		}
		files[dst] = b.Bytes()
		return nil
	}
	for _, e := range entries {
		dst := strings.Replace(strings.TrimSuffix(e.Name(), ".tmpl"), "NAME", name, 1)
		if err := render(tdir+"/"+e.Name(), dst); err != nil {
			return err
		}
	}
	if err := render("newtmpl/README.md.tmpl", "README.md"); err != nil {
		return err
	}
	if err := render("newtmpl/luarc.json.tmpl", ".luarc.json"); err != nil {
		return err
	}
	// The stubs .luarc.json points at, inside the folder, so the editor
	// works wherever the plugin lives. A hidden folder: the loader skips it.
	reg := a.newBindings(g, discardLogger())
	defer reg.Close()
	stubs := filepath.ToSlash(filepath.Join(".luals", "loom"))
	for _, f := range stubFiles(reg) {
		files[stubs+"/"+f.name] = f.src
	}

	if err := os.MkdirAll(filepath.Join(folder, ".luals", "loom"), 0o755); err != nil {
		return fmt.Errorf("loomd new: %w", err)
	}
	order := []string{name + ".json", name + ".lua", name + "_test.lua", "README.md", ".luarc.json"}
	for _, p := range order {
		if err := os.WriteFile(filepath.Join(folder, p), files[p], 0o644); err != nil {
			return fmt.Errorf("loomd new: %w", err)
		}
		fmt.Fprintf(a.Out, "created %s\n", filepath.Join(folder, p))
		delete(files, p)
	}
	for p, content := range files {
		if err := os.WriteFile(filepath.Join(folder, filepath.FromSlash(p)), content, 0o644); err != nil {
			return fmt.Errorf("loomd new: %w", err)
		}
	}
	fmt.Fprintf(a.Out, "created %s (LuaLS stubs for your editor)\n\nNext:\n  loomd test %s\n", filepath.Join(folder, ".luals", "loom"), folder)
	return nil
}

// title turns "my-cloud_x" into "My Cloud X".
func title(s string) string {
	parts := strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '_' })
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, " ")
}
