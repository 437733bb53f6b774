// Package catalog holds what a Coopr server kept as admin entities: cluster
// templates, services, hardware types, image types and providers, read
// from a folder laid out as Coopr's coopr-templates repository
// (clustertemplates/, services/, hardwaretypes/, imagetypes/,
// providers/), one entity per file in Coopr's JSON unchanged or the same
// in YAML. Resolve turns a template spec (a template and a size) into an
// ordinary spec with node groups, through the solver.
package catalog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/runtime"
)

// Kinds are the catalog's entity kinds, as folder names.
var Kinds = []string{"clustertemplates", "services", "hardwaretypes", "imagetypes", "providers"}

// Catalog is a loaded catalog folder.
type Catalog struct {
	Dir           string
	Templates     map[string]*spec.Template
	Services      map[string]*spec.Service
	HardwareTypes map[string]*spec.TypeEntity
	ImageTypes    map[string]*spec.TypeEntity
	Providers     map[string]*spec.Provider
	// Files maps "kind/name" to the file it came from.
	Files map[string]string
}

// Empty is a catalog with nothing in it.
func Empty() *Catalog {
	return &Catalog{Templates: map[string]*spec.Template{}, Services: map[string]*spec.Service{},
		HardwareTypes: map[string]*spec.TypeEntity{}, ImageTypes: map[string]*spec.TypeEntity{},
		Providers: map[string]*spec.Provider{}, Files: map[string]string{}}
}

// Load reads the catalog in dir. A dir that does not exist is an empty
// catalog; every bad file is reported (file:line), all at once.
func Load(dir string) (*Catalog, error) {
	c := Empty()
	c.Dir = dir
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return c, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading the catalog: %w", err)
	}
	var errs []error
	for _, kind := range Kinds {
		files, err := filepath.Glob(filepath.Join(dir, kind, "*"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			ext := strings.ToLower(filepath.Ext(f))
			if ext != ".json" && ext != ".yaml" && ext != ".yml" {
				continue
			}
			if err := c.loadFile(kind, f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("catalog %s:\n%w", dir, errors.Join(errs...))
	}
	return c, nil
}

func (c *Catalog) loadFile(kind, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var name string
	switch kind {
	case "clustertemplates":
		t, err := spec.ParseTemplate(file, data)
		if err != nil {
			return err
		}
		name = t.Name
		if err := c.dup(kind, name, file); err != nil {
			return err
		}
		c.Templates[name] = t
	case "services":
		s, err := spec.ParseService(file, data)
		if err != nil {
			return err
		}
		name = s.Name
		if err := c.dup(kind, name, file); err != nil {
			return err
		}
		c.Services[name] = s
	case "hardwaretypes", "imagetypes":
		what := "hardware type"
		m := c.HardwareTypes
		if kind == "imagetypes" {
			what, m = "image type", c.ImageTypes
		}
		t, err := spec.ParseTypeEntity(file, data, what)
		if err != nil {
			return err
		}
		name = t.Name
		if err := c.dup(kind, name, file); err != nil {
			return err
		}
		m[name] = t
	case "providers":
		p, err := spec.ParseProvider(file, data)
		if err != nil {
			return err
		}
		name = p.Name
		if err := c.dup(kind, name, file); err != nil {
			return err
		}
		c.Providers[name] = p
	}
	c.Files[kind+"/"+name] = file
	return nil
}

func (c *Catalog) dup(kind, name, file string) error {
	if prev, ok := c.Files[kind+"/"+name]; ok {
		return fmt.Errorf("%s: %s %q is already defined in %s", file, strings.TrimSuffix(kind, "s"), name, prev)
	}
	return nil
}

// Names lists the names of one kind, sorted.
func (c *Catalog) Names(kind string) []string {
	var out []string
	prefix := kind + "/"
	for k := range c.Files {
		if strings.HasPrefix(k, prefix) {
			out = append(out, strings.TrimPrefix(k, prefix))
		}
	}
	sort.Strings(out)
	return out
}

// Kind maps the names people use for a kind (template, service, hardware,
// hardwaretype, image, provider, plural or not) to the folder name.
func Kind(s string) (string, error) {
	switch strings.TrimSuffix(strings.ToLower(s), "s") {
	case "template", "clustertemplate", "cluster-template":
		return "clustertemplates", nil
	case "service":
		return "services", nil
	case "hardware", "hardwaretype", "hardware-type":
		return "hardwaretypes", nil
	case "image", "imagetype", "image-type":
		return "imagetypes", nil
	case "provider":
		return "providers", nil
	}
	return "", fmt.Errorf("unknown catalog kind %q: want template, service, hardwaretype, imagetype or provider", s)
}

// File returns the file an entity came from.
func (c *Catalog) File(kind, name string) (string, error) {
	if f, ok := c.Files[kind+"/"+name]; ok {
		return f, nil
	}
	where := c.Dir
	if where == "" {
		where = "(none)"
	}
	return "", fmt.Errorf("%s %q is not in the catalog %s%s (it has: %s)", strings.TrimSuffix(kind, "s"), name, where,
		runtime.DidYouMean(name, c.Names(kind)), orNone(c.Names(kind)))
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
